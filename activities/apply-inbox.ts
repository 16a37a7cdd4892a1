// Applies pending inbox rows (callbacks and polls alike) to the task through the state
// machine. The task row is locked, so two executions at once serialise and the second finds
// nothing left to apply.
import { and, asc, desc, eq, isNull, ne, sql } from 'drizzle-orm';
import { casAttempt } from '../db/attempts';
import type { Tx } from '../db/client';
import type { FenceToken } from '../db/fence';
import type { TaskLock } from '../db/task-tx';
import { deserializeJob, type StoredJob } from '../db/inbox';
import { callbackInbox, generationTask, taskAttempt, taskTransition, type AttemptRow, type TaskRow } from '../db/schema';
import { casTaskStatus } from '../db/tasks';
import type { TaskFacts } from '../domain/facts';
import { FINISHED_PROVIDER_JOB_STATES, GONE_AFTER_CANCEL } from '../domain/states';
import { providerCost } from '../domain/provider-cost';
import { attemptStateFor, decide } from '../domain/task-machine';
import { moderatedFailure } from '../domain/moderation';
import type { ProviderJob } from '../providers/types';
import { providerFor, taskFactStep, type TaskActivityDeps } from './deps';
import { finishTask } from '../db/settlement';
import { parkOnSecondJob } from './earlier-job';

async function boundElsewhere(tx: Tx, provider: string, jobId: string, attemptId: string): Promise<boolean> {
  const rows = await tx
    .select({ id: taskAttempt.attempt_id })
    .from(taskAttempt)
    .where(and(eq(taskAttempt.provider, provider), eq(taskAttempt.provider_job_id, jobId), ne(taskAttempt.attempt_id, attemptId)))
    .limit(1);
  return rows.length > 0;
}
type InboxRow = typeof callbackInbox.$inferSelect;

/**
 * Whether a task in MANUAL_REVIEW was parked while its cancel was requested: its latest
 * transition into review came from CANCEL_REQUESTED (task_transition, no column of its own).
 */
async function parkedWhileCancelling(tx: Tx, task: TaskRow): Promise<boolean> {
  if (task.status !== 'MANUAL_REVIEW' || !task.cancel_requested_at) return false;
  const [parked] = await tx
    .select({ from: taskTransition.from_status })
    .from(taskTransition)
    .where(and(eq(taskTransition.task_id, task.task_id), eq(taskTransition.to_status, 'MANUAL_REVIEW')))
    .orderBy(desc(taskTransition.to_version))
    .limit(1);
  return parked?.from === 'CANCEL_REQUESTED';
}

/**
 * Applies every pending inbox row of a task inside a task transaction that holds the task and its
 * active attempt locked (db/task-tx.ts, options.activeAttempt): the body of applyInbox, and of a
 * wait's poll that records and applies in one transaction (activities/await-provider.ts).
 */
export type InboxApply = (tx: Tx, task: TaskRow, lock: TaskLock) => Promise<void>;

/**
 * How a failed job is told to the tenant: a content-moderation refusal is its own outcome,
 * CONTENT_MODERATED with the side the provider names (docs/decisions/0070); any other is PROVIDER_FAILED.
 */
function failureOf(job: ProviderJob): { failureCode: string; failureMessage: string } {
  if (job.moderation) return moderatedFailure(job.moderation);
  return { failureCode: 'PROVIDER_FAILED', failureMessage: job.error ?? `provider ${job.rawStatus}` };
}

export function createInboxApply(deps: TaskActivityDeps): InboxApply {
  /** Inbox rows applied in this transaction, with the reason a row changed nothing (null when it applied). */
  type Processed = Map<string, string | null>;

  /** Marks every applied row processed in one statement (not one UPDATE per row). */
  async function markProcessed(tx: Tx, processed: Processed) {
    if (processed.size === 0) return;
    await tx.execute(sql`
      UPDATE callback_inbox AS i SET processed_at = now(), process_error = v.error
      FROM unnest(${sql.param([...processed.keys()])}::uuid[], ${sql.param([...processed.values()])}::text[]) AS v(inbox_id, error)
      WHERE i.inbox_id = v.inbox_id`);
  }

  /**
   * A job reported for an attempt the task moved past is evidence, never set aside quietly: with
   * the active attempt sent, two jobs may exist and the task parks with both; with it unsent, the
   * row stays as evidence that the next claim meets (activities/earlier-job.ts).
   */
  async function movedPast(
    tx: Tx,
    token: FenceToken,
    task: TaskRow,
    row: InboxRow & { attempt_id: string },
    processed: Processed,
    locked: AttemptRow | null,
  ): Promise<TaskRow> {
    const [active] =
      locked?.attempt_id === task.active_attempt_id || !task.active_attempt_id
        ? [locked]
        : await tx.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, task.active_attempt_id));
    if (!active || active.submit_state === 'PREPARED') {
      processed.set(row.inbox_id, 'job evidence for an attempt the task moved past: the next claim takes the task back to it');
      return task;
    }
    processed.set(row.inbox_id, 'job evidence for an attempt the task moved past: parked for review');
    return parkOnSecondJob(tx, token, task, row.attempt_id, row.provider_job_id);
  }

  /** Applies one event; returns the task as it is afterwards. */
  /** `locked`: the active attempt as the transaction's opening read it, while no row has changed it yet. */
  /** `cancelRequested`: the batch began in a review parked while cancelling (parkedWhileCancelling). */
  async function applyOne(
    tx: Tx,
    token: FenceToken,
    task: TaskRow,
    row: InboxRow,
    processed: Processed,
    locked: AttemptRow | null,
    cancelRequested: boolean,
  ): Promise<TaskRow> {
    if (row.attempt_id === null) {
      processed.set(row.inbox_id, 'event matched to no attempt');
      return task;
    }
    if (row.attempt_id !== task.active_attempt_id) return movedPast(tx, token, task, { ...row, attempt_id: row.attempt_id }, processed, locked);
    const [attempt] =
      locked?.attempt_id === row.attempt_id ? [locked] : await tx.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, row.attempt_id)).for('update');
    if (!attempt) {
      processed.set(row.inbox_id, 'attempt not found');
      return task;
    }
    const job: ProviderJob = deserializeJob((row.payload as { job: StoredJob }).job);
    if (attempt.provider_job_id && attempt.provider_job_id !== job.jobId) {
      processed.set(row.inbox_id, `job ${job.jobId} is not the attempt's job ${attempt.provider_job_id}`);
      return task;
    }
    // A fingerprint match another of our attempts bound meanwhile is that attempt's job: binding it
    // here would break the (provider, provider_job_id) index and retry forever.
    if (!attempt.provider_job_id && (await boundElsewhere(tx, attempt.provider, job.jobId, attempt.attempt_id))) {
      processed.set(row.inbox_id, `job ${job.jobId} is bound to another attempt`);
      return task;
    }
    // Order by the provider's clock: an event older than the last applied one changes nothing.
    if (attempt.provider_updated_at && job.updatedAt && job.updatedAt < attempt.provider_updated_at) {
      processed.set(row.inbox_id, 'stale: older than the last applied provider event');
      return task;
    }
    const nextAttemptState = attemptStateFor(attempt.submit_state, job.state);
    // MANUAL_REVIEW keeps applying evidence, but only news moves it on: a job now known for the
    // attempt, or a change of the job's state. A repeat of what parked the task (a poll of a
    // finished job whose output could not be rescued) leaves it with the operator
    // (docs/runbooks/manual-review.md).
    if (task.status === 'MANUAL_REVIEW' && attempt.provider_job_id && !nextAttemptState) {
      processed.set(row.inbox_id, 'nothing new for a task in review');
      return task;
    }
    const succeeded = job.state === 'succeeded';
    // A finished job has no progress left to show; a read that says nothing leaves the last one.
    const progress = FINISHED_PROVIDER_JOB_STATES.includes(job.state) ? null : job.progress;
    const ttlMs = providerFor(deps, attempt.provider).capabilities.outputUrlTtlMs;
    // The job's end records what it cost us, once: a repeated or later read of the ended job changes nothing.
    const cost =
      FINISHED_PROVIDER_JOB_STATES.includes(job.state) && attempt.provider_cost_source === null
        ? providerCost({
            provider: attempt.provider,
            model: attempt.provider_model,
            state: job.state,
            metrics: job.metrics,
            requestedSeconds: task.request.duration_seconds,
          })
        : null;
    await casAttempt(
      tx,
      attempt.attempt_id,
      {},
      {
        provider_job_id: job.jobId,
        provider_status: job.rawStatus,
        provider_updated_at: job.updatedAt ?? attempt.provider_updated_at,
        ...(nextAttemptState ? { submit_state: nextAttemptState } : {}),
        ...(succeeded && job.outputUrl
          ? { output_url: job.outputUrl, output_deadline_at: new Date((job.updatedAt ?? deps.clock.now()).getTime() + ttlMs) }
          : {}),
        ...(job.metrics ? { provider_metrics: job.metrics } : {}),
        ...(cost ? { provider_cost: cost.amount, provider_cost_unit: cost.unit, provider_cost_source: cost.source, provider_cost_at: deps.clock.now() } : {}),
        // The latest progress the provider gave; its change wakes the event streams (docs/events.md).
        ...(progress !== undefined ? { progress, progress_at: deps.clock.now() } : {}),
        ...(job.error ? { last_error: job.error.slice(0, 2000) } : {}),
      },
    );

    const from = task.status;
    const d = decide(from, { type: 'PROVIDER_STATE', state: job.state, cancelRequested });
    if (d.kind !== 'move') {
      processed.set(row.inbox_id, d.kind === 'reject' ? d.reason : null);
      return task;
    }
    const sourceEvent = `${row.source}:${row.inbox_id}`;
    if (d.to === 'FAILED' || d.to === 'CANCELLED') {
      // docs/billing.md: a cancel is charged only when the provider reported a state it bills; a job
      // it no longer knows (GONE_AFTER_CANCEL, a 404) reported none.
      const chargeable =
        d.to === 'CANCELLED' && job.rawStatus !== GONE_AFTER_CANCEL && providerFor(deps, attempt.provider).capabilities.chargeableStates.includes(job.state);
      await finishTask(tx, token, task, {
        to: d.to,
        // docs/billing.md: a cancel the provider bills is charged; failures are released.
        charge: chargeable ? task.reserved_amount : '0',
        sourceEvent,
        actor: 'workflow',
        attemptId: attempt.attempt_id,
        ...(d.to === 'FAILED' ? failureOf(job) : {}),
        detail: { provider_status: job.rawStatus, ...(job.moderation ? { moderation: job.moderation } : {}) },
      });
      processed.set(row.inbox_id, null);
      // Settled: the row as finishTask left it (charge, failure, version).
      const [fresh] = await tx.select().from(generationTask).where(eq(generationTask.task_id, task.task_id));
      return fresh ?? task;
    }
    const version = await casTaskStatus(tx, token, {
      taskId: task.task_id,
      from,
      expectedVersion: task.status_version,
      to: d.to,
      sourceEvent,
      actor: 'workflow',
      attemptId: attempt.attempt_id,
      detail: { provider_status: job.rawStatus, provider_job_id: job.jobId },
    });
    if (version === null) throw new Error(`task ${task.task_id} changed under its row lock`);
    processed.set(row.inbox_id, null);
    // What the CAS changed that the rows after this one read: the status and its version.
    return { ...task, status: d.to, status_version: version };
  }

  /** Every pending row, oldest provider time first. */
  return async (tx, locked, { token, attempt }) => {
    const taskId = locked.task_id;
    let task = locked;
    const rows = await tx
      .select()
      .from(callbackInbox)
      .where(and(eq(callbackInbox.task_id, taskId), isNull(callbackInbox.processed_at)))
      .orderBy(sql`${callbackInbox.provider_updated_at} asc nulls last`, asc(callbackInbox.received_at))
      .for('update');
    const processed: Processed = new Map();
    const cancelRequested = rows.length > 0 && (await parkedWhileCancelling(tx, task));
    // The opening read's attempt row serves the first row; a later one re-reads what it changed.
    let current = attempt;
    for (const row of rows) {
      task = await applyOne(tx, token, task, row, processed, current, cancelRequested);
      current = null;
    }
    await markProcessed(tx, processed);
    // A cancel that arrived while the submit outcome was open is honoured once the job is known.
    if (task.cancel_requested_at && (task.status === 'SUBMITTED' || task.status === 'RUNNING')) {
      await casTaskStatus(tx, token, {
        taskId,
        from: task.status,
        expectedVersion: task.status_version,
        to: 'CANCEL_REQUESTED',
        sourceEvent: 'workflow.deferred-cancel',
        actor: 'workflow',
        attemptId: task.active_attempt_id,
      });
    }
  };
}

export function createInboxActivities(deps: TaskActivityDeps, apply: InboxApply = createInboxApply(deps)) {
  return {
    /** Applies every pending inbox row of the task, oldest provider time first. */
    async applyInbox(taskId: string): Promise<TaskFacts> {
      return taskFactStep(deps, taskId, apply, { activeAttempt: true });
    },
  };
}
