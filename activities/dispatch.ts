// QUEUED → DISPATCHING → SUBMITTING: choose the route and prepare attempt N.
import { createHash } from 'node:crypto';
import { eq } from 'drizzle-orm';
import { holdFence } from '../db/fence';
import { assertModeAllows } from '../db/modes';
import { generationTask, taskAttempt } from '../db/schema';
import { applyTaskEvent, casTaskStatus, lockTask } from '../db/tasks';
import type { TaskFacts } from '../domain/facts';
import { fenced, notFound, type TaskActivityDeps } from './deps';
import { deadlineExceeded, pastDeadline } from './deadline';
import { routeNextAttempt } from './routing';
import { failedUncharged, finishTask } from '../db/settlement';
import { readTaskFacts } from './task-facts';

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

export function createDispatchActivities(deps: TaskActivityDeps) {
  return {
    /** QUEUED → DISPATCHING. A no-op in any later state. */
    async dispatchTask(taskId: string): Promise<TaskFacts> {
      await fenced(deps, (token) =>
        deps.db.transaction(async (tx) => {
          await holdFence(tx, token);
          const task = await lockTask(tx, taskId);
          if (!task) throw notFound(`task ${taskId}`);
          await applyTaskEvent(tx, token, task, { type: 'DISPATCH' }, { sourceEvent: 'workflow.dispatch', actor: 'workflow' });
        }),
      );
      return readTaskFacts(deps.db, taskId, deps.clock.now());
    },

    /**
     * DISPATCHING → SUBMITTING with attempt N in PREPARED. Honours a cancel that arrived before
     * submit (released, the provider never called) and the attempt budget.
     */
    async prepareAttempt(taskId: string): Promise<TaskFacts> {
      await fenced(deps, (token) =>
        deps.db.transaction(async (tx) => {
          await holdFence(tx, token);
          const task = await lockTask(tx, taskId);
          if (!task) throw notFound(`task ${taskId}`);
          if (task.status !== 'DISPATCHING') return;
          if (task.cancel_requested_at) {
            await finishTask(tx, token, task, { to: 'CANCELLED', charge: '0', sourceEvent: 'workflow.cancel-before-submit', actor: 'workflow' });
            return;
          }
          const history = await tx
            .select({
              attempt_no: taskAttempt.attempt_no,
              provider: taskAttempt.provider,
              submit_state: taskAttempt.submit_state,
              unknown_since: taskAttempt.unknown_since,
            })
            .from(taskAttempt)
            .where(eq(taskAttempt.task_id, taskId));
          const used = history.length;
          const attemptNo = used + 1;
          if (attemptNo > deps.settings.maxSubmitAttempts) {
            await finishTask(tx, token, task, failedUncharged('workflow.attempts-exhausted', 'PROVIDER_REJECTED', `provider rejected ${used} attempts`));
            return;
          }
          if (pastDeadline(task, deps.clock.now(), 0)) {
            await finishTask(tx, token, task, deadlineExceeded('workflow.deadline-before-attempt'));
            return;
          }
          // QUEUE_ONLY / RECONCILE_ONLY: no new provider job. The task waits here (ModePaused, retried).
          await assertModeAllows(tx, token.scope, 'submit');
          const route = routeNextAttempt(
            { taskId, request: task.request, provider: task.provider, providerModel: task.provider_model },
            history,
            {
              available: Object.keys(deps.providers),
              maxAttempts: deps.settings.maxSubmitAttempts,
              settings: deps.routing,
              health: deps.providerHealth(),
              stats: deps.routeStats,
            },
          );
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
          // The task names the provider of its active attempt.
          await tx
            .update(generationTask)
            .set({ provider: route.provider, provider_model: route.model })
            .where(eq(generationTask.task_id, taskId));
          await casTaskStatus(tx, token, {
            taskId,
            from: 'DISPATCHING',
            expectedVersion: task.status_version,
            to: 'SUBMITTING',
            sourceEvent: 'workflow.attempt-prepared',
            actor: 'workflow',
            attemptId,
            detail: { attempt_no: attemptNo, provider: route.provider, model: route.model, route: { via: route.via, reason: route.reason } },
            set: { activeAttemptId: attemptId },
          });
        }),
      );
      return readTaskFacts(deps.db, taskId, deps.clock.now());
    },
  };
}
