// A job heard of for an attempt the task has moved past (docs/design.md §5 "Unknown outcome",
// docs/decisions/0063): a proof of absence or an operator's "not-submitted" was wrong, or a stale
// execution's create was accepted after all. Money must not be spent on the next attempt, and the
// evidence must never be set aside quietly.
//   - the next attempt was not sent yet (prepare, claim): it is set aside, the earlier attempt is
//     the task's active one again, and the task parks in MANUAL_REVIEW with the evidence; what the
//     evidence carries (a bound job, inbox rows) is applied at once, so a job we know moves the
//     task on from there (SUBMITTED, RUNNING, …), and candidates alone leave it with an operator;
//   - the next attempt was sent already: two jobs may exist; the task parks in MANUAL_REVIEW with
//     both named (a finished task keeps the inbox row as evidence for the callbacks reconciler).
import { Context } from '@temporalio/activity';
import { eq, sql } from 'drizzle-orm';
import { casAttempt } from '../db/attempts';
import type { Tx } from '../db/client';
import type { FenceToken } from '../db/fence';
import type { JobEvidence } from '../db/job-evidence';
import type { TaskLock } from '../db/task-tx';
import { generationTask, taskAttempt, type AttemptRow, type TaskRow } from '../db/schema';
import { casTaskStatusRow } from '../db/tasks';
import { isTerminal } from '../domain/states';
import { canTransition } from '../domain/task-machine';
import type { InboxApply } from './apply-inbox';

/** The transition that parks a task on evidence of an earlier attempt's job. */
export const EARLIER_JOB_EVENT = 'workflow.earlier-job';

/** task → MANUAL_REVIEW on the evidence about `attemptId`; with `activate`, that attempt is the task's active one again. */
function park(tx: Tx, token: FenceToken, task: TaskRow, attemptId: string, detail: Record<string, unknown>, activate: AttemptRow | null) {
  return casTaskStatusRow(tx, token, {
    taskId: task.task_id,
    from: task.status,
    expectedVersion: task.status_version,
    to: 'MANUAL_REVIEW',
    sourceEvent: EARLIER_JOB_EVENT,
    actor: 'workflow',
    attemptId,
    detail,
    ...(activate ? { set: { activeAttemptId: activate.attempt_id, provider: { name: activate.provider, model: activate.provider_model } } } : {}),
  });
}

/**
 * Under the task's row lock, before anything is sent for `next` (PREPARED, or null when no next
 * attempt exists yet): takes the task back to the attempt the evidence is about. Returns the task
 * as it is afterwards.
 */
export async function takeBackEarlierJob(
  tx: Tx,
  lock: TaskLock,
  task: TaskRow,
  evidence: JobEvidence,
  next: AttemptRow | null,
  apply: InboxApply,
  now: Date,
): Promise<TaskRow> {
  const { token } = lock;
  if (isTerminal(task.status) || task.status === 'MANUAL_REVIEW') {
    // Nothing to take back: a finished task keeps the job bound on its attempt (the caller wrote
    // it) and this log; a parked task is an operator's, and its next dispatch meets the evidence.
    Context.current().log.error('job evidence for an earlier attempt of a finished or parked task', {
      taskId: task.task_id,
      status: task.status,
      attemptId: evidence.attemptId,
      providerJobId: evidence.providerJobId,
    });
    return task;
  }
  Context.current().log.error('job evidence for an earlier attempt: the next attempt is not sent', {
    taskId: task.task_id,
    attemptId: evidence.attemptId,
    providerJobId: evidence.providerJobId,
    setAside: next?.attempt_id ?? null,
  });
  if (next) {
    await casAttempt(
      tx,
      next.attempt_id,
      { from: 'PREPARED' },
      { submit_state: 'CANCELLED', last_error: `set aside before it was sent: ${evidence.description}` },
    );
  }
  const [earlier] = await tx.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, evidence.attemptId));
  // The earlier attempt was set aside as never sent (REJECTED): it is open again, known or unknown.
  const reopened =
    !!earlier &&
    (await casAttempt(
      tx,
      earlier.attempt_id,
      { from: 'REJECTED' },
      {
        submit_state: earlier.provider_job_id ? 'SUBMITTED' : 'SUBMIT_UNKNOWN',
        unknown_since: earlier.provider_job_id ? earlier.unknown_since : now,
        next_poll_at: now,
        last_error: `job evidence after it was set aside: ${evidence.description}`.slice(0, 2000),
      },
    ));
  if (reopened) {
    // Its inbox rows were marked processed as "not the active attempt": they are applied now.
    await tx.execute(sql`UPDATE callback_inbox SET processed_at = NULL, process_error = NULL WHERE attempt_id = ${evidence.attemptId}`);
  }
  const parked = await park(
    tx,
    token,
    task,
    evidence.attemptId,
    {
      reason: `job evidence for an earlier attempt: ${evidence.description}`.slice(0, 2000),
      earlier_attempt_id: evidence.attemptId,
      ...(evidence.providerJobId ? { provider_job_id: evidence.providerJobId } : {}),
      ...(next ? { set_aside_attempt_id: next.attempt_id } : {}),
    },
    reopened && earlier ? earlier : null,
  );
  if (!parked) throw new Error(`task ${task.task_id} changed under its row lock`);
  if (!reopened || !earlier) return parked;
  let current = parked;
  if (earlier.provider_job_id) {
    // A job the provider accepted for it: the task follows that job from here.
    const bound = await casTaskStatusRow(tx, token, {
      taskId: task.task_id,
      from: 'MANUAL_REVIEW',
      expectedVersion: parked.status_version,
      to: 'SUBMITTED',
      sourceEvent: `${EARLIER_JOB_EVENT}-bound`,
      actor: 'workflow',
      attemptId: earlier.attempt_id,
      detail: { provider_job_id: earlier.provider_job_id },
    });
    if (bound) current = bound;
  }
  await apply(tx, current, { ...lock, task: current, attempt: null });
  const [after] = await tx.select().from(generationTask).where(eq(generationTask.task_id, task.task_id));
  return after ?? current;
}

/**
 * An inbox row (or an accepted create) carries a job for `attemptId`, an attempt the task is no
 * longer on, while the task's active attempt was sent already: two jobs may exist. Parks the task
 * in MANUAL_REVIEW with both named, unless it is parked or finished already. Returns the task as
 * it is afterwards.
 */
export async function parkOnSecondJob(tx: Tx, token: FenceToken, task: TaskRow, attemptId: string, providerJobId: string): Promise<TaskRow> {
  Context.current().log.error('a provider job for an attempt the task moved past: possible duplicate cost', {
    taskId: task.task_id,
    attemptId,
    providerJobId,
    activeAttemptId: task.active_attempt_id,
  });
  if (task.status === 'MANUAL_REVIEW' || !canTransition(task.status, 'MANUAL_REVIEW')) return task;
  const parked = await park(
    tx,
    token,
    task,
    attemptId,
    {
      reason: `provider job ${providerJobId} of attempt ${attemptId} exists beside the active attempt ${task.active_attempt_id}: possible duplicate cost`,
      earlier_attempt_id: attemptId,
      provider_job_id: providerJobId,
    },
    null,
  );
  return parked ?? task;
}
