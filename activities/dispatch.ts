// QUEUED → DISPATCHING → SUBMITTING: choose the route and prepare attempt N.
import { createHash } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type { Tx } from '../db/client';
import { ModePausedError } from '../db/modes';
import type { TaskLock } from '../db/task-tx';
import { modeForbids } from '../domain/modes';
import { generationTask, taskAttempt } from '../db/schema';
import { applyTaskEvent, casTaskStatus } from '../db/tasks';
import type { TaskFacts } from '../domain/facts';
import { taskFactStep, type TaskActivityDeps } from './deps';
import { deadlineExceeded, pastDeadline } from './deadline';
import { routeNextAttempt } from './routing';
import { failedUncharged, finishTask } from '../db/settlement';
import { spentBound } from './create-pace';
import { earlierJobEvidence } from '../db/job-evidence';
import { heldRoutes } from '../db/catalog-routes';
import type { InboxApply } from './apply-inbox';
import { takeBackEarlierJob } from './earlier-job';

/**
 * Attempt ids are derived from (task id, attempt number), name-based like a UUIDv5: every
 * retry, reset or second worker computes the same id, and it is the provider idempotency key.
 */
export function attemptIdFor(taskId: string, attemptNo: number): string {
  const h = createHash('sha1').update(`vidorch:attempt:${taskId}:${attemptNo}`).digest();
  h[6] = (h[6]! & 0x0f) | 0x50;
  h[8] = (h[8]! & 0x3f) | 0x80;
  const hex = h.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

type TaskRow = typeof generationTask.$inferSelect;

export function createDispatchActivities(deps: TaskActivityDeps, apply: InboxApply) {
  /**
   * DISPATCHING → SUBMITTING with attempt N in PREPARED, on the task locked in `tx`. Honours a
   * cancel that arrived before submit (released, the provider never called) and the attempt
   * budget. `pause: 'stay'` returns without a change where the mode forbids a new provider job
   * (instead of throwing ModePaused), so the caller's earlier writes commit.
   */
  async function prepareLocked(tx: Tx, lock: TaskLock, task: TaskRow, pause: 'throw' | 'stay'): Promise<void> {
    const { token } = lock;
    const taskId = task.task_id;
    if (task.status !== 'DISPATCHING') return;
    // Attempts are only created here, with the task naming the new one in the same transaction:
    // a task with no active attempt has none yet.
    const history = task.active_attempt_id
      ? await tx
          .select({
            attempt_no: taskAttempt.attempt_no,
            provider: taskAttempt.provider,
            submit_state: taskAttempt.submit_state,
            unknown_since: taskAttempt.unknown_since,
            throttled: taskAttempt.throttled,
          })
          .from(taskAttempt)
          .where(eq(taskAttempt.task_id, taskId))
      : [];
    const attemptNo = history.length + 1;
    // Once-only, decided where the money is spent: no new attempt while an earlier one has any
    // evidence of a job (docs/design.md §1, activities/earlier-job.ts).
    const earlier = await earlierJobEvidence(tx, taskId, attemptNo);
    if (earlier) {
      await takeBackEarlierJob(tx, lock, task, earlier, null, apply, deps.clock.now());
      return;
    }
    if (task.cancel_requested_at) {
      await finishTask(tx, token, task, { to: 'CANCELLED', charge: '0', sourceEvent: 'workflow.cancel-before-submit', actor: 'workflow' });
      return;
    }
    // Throttled creates have a bound of their own (docs/decisions/0057).
    const throttled = history.filter((a) => a.throttled).length;
    const counts = { counted: history.length - throttled, throttled };
    const spent = spentBound(counts, deps.settings);
    if (spent !== null) {
      const why = spent === 'rejections' ? `provider rejected ${counts.counted} attempts` : `provider throttled ${throttled} attempts`;
      await finishTask(tx, token, task, failedUncharged('workflow.attempts-exhausted', 'PROVIDER_REJECTED', why));
      return;
    }
    if (pastDeadline(task, deps.clock.now(), 0)) {
      await finishTask(tx, token, task, deadlineExceeded('workflow.deadline-before-attempt'));
      return;
    }
    // QUEUE_ONLY / RECONCILE_ONLY: no new provider job. The task waits here (ModePaused, retried).
    // The mode is the fence row's, share-locked since the transaction began.
    if (modeForbids(lock.mode, 'submit')) {
      if (pause === 'stay') return;
      throw new ModePausedError(lock.mode, 'submit');
    }
    const route = routeNextAttempt({ taskId, request: task.request, provider: task.provider, providerModel: task.provider_model }, history, {
      available: Object.keys(deps.providers),
      // Routes held after a breaking schema change, read in this transaction (docs/decisions/0072).
      held: await heldRoutes(tx),
      maxAttempts: deps.settings.maxSubmitAttempts,
      settings: deps.routing,
      health: deps.providerHealth(),
      stats: deps.routeStats,
    });
    if (route.kind === 'rejected') {
      // Validated at create, so only a catalog or configuration change gets here.
      await finishTask(tx, token, task, failedUncharged('workflow.no-route', 'NO_ROUTE', `no provider can serve this task: ${route.detail}`));
      return;
    }
    const attemptId = attemptIdFor(taskId, attemptNo);
    await tx
      .insert(taskAttempt)
      .values({
        attempt_id: attemptId,
        task_id: taskId,
        attempt_no: attemptNo,
        provider: route.provider,
        provider_model: route.model,
        provider_idempotency_key: attemptId,
        submit_state: 'PREPARED',
      })
      .onConflictDoNothing();
    await casTaskStatus(tx, token, {
      taskId,
      from: 'DISPATCHING',
      expectedVersion: task.status_version,
      to: 'SUBMITTING',
      sourceEvent: 'workflow.attempt-prepared',
      actor: 'workflow',
      attemptId,
      detail: { attempt_no: attemptNo, provider: route.provider, model: route.model, route: { via: route.via, reason: route.reason } },
      // The task names the provider of its active attempt.
      set: { activeAttemptId: attemptId, provider: { name: route.provider, model: route.model } },
    });
  }

  return {
    /** QUEUED → DISPATCHING. A no-op in any later state. */
    async dispatchTask(taskId: string): Promise<TaskFacts> {
      return taskFactStep(deps, taskId, (tx, task, { token }) =>
        applyTaskEvent(tx, token, task, { type: 'DISPATCH' }, { sourceEvent: 'workflow.dispatch', actor: 'workflow' }),
      );
    },

    /** DISPATCHING → SUBMITTING with attempt N in PREPARED (prepareLocked). A no-op in any other state. */
    async prepareAttempt(taskId: string): Promise<TaskFacts> {
      return taskFactStep(deps, taskId, (tx, task, lock) => prepareLocked(tx, lock, task, 'throw'));
    },

    /**
     * dispatchTask and prepareAttempt in one transaction: QUEUED → DISPATCHING → SUBMITTING, both
     * transitions recorded as the two steps record them. Where the mode forbids a new provider
     * job, the dispatch alone commits and the task is left in DISPATCHING, where prepareAttempt
     * waits for the mode (docs/decisions/0006). A task already past QUEUED is only prepared.
     */
    async dispatchAndPrepare(taskId: string): Promise<TaskFacts> {
      return taskFactStep(deps, taskId, async (tx, locked, lock) => {
        let task = locked;
        if (task.status === 'QUEUED') {
          const version = await casTaskStatus(tx, lock.token, {
            taskId,
            from: 'QUEUED',
            expectedVersion: task.status_version,
            to: 'DISPATCHING',
            sourceEvent: 'workflow.dispatch',
            actor: 'workflow',
          });
          if (version === null) throw new Error(`task ${taskId} changed under its row lock`);
          task = { ...task, status: 'DISPATCHING', status_version: version };
        }
        await prepareLocked(tx, lock, task, 'stay');
      });
    },
  };
}
