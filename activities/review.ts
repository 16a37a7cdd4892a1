// MANUAL_REVIEW: where evidence cannot decide, a person does. Escalation parks the task (its
// reservation stays open); an operator's resolution (a workflow Update) is checked against the
// facts, applied with a CAS and audited in the same transaction.
import { ApplicationFailure } from '@temporalio/common';
import { and, eq, isNull, ne, or, sql } from 'drizzle-orm';
import { casAttempt } from '../db/attempts';
import { holdFenceForFacts } from '../db/modes';
import { jobEvidence } from '../db/job-evidence';
import { generationTask, taskAttempt } from '../db/schema';
import { casTaskStatus, lockTask } from '../db/tasks';
import { FailureType } from '../domain/errors';
import type { TaskFacts } from '../domain/facts';
import { reviewProblem, type ReviewResolution } from '../domain/review';
import { decide } from '../domain/task-machine';
import { fenced, notFound, providerFor, type TaskActivityDeps } from './deps';
import { escalate } from './escalate';
import { finishTask } from '../db/settlement';
import { readTaskFacts } from './task-facts';
import { recordAudit } from '../db/audit';
import { settledCharge } from '../db/ledger';

const invalid = (message: string) => ApplicationFailure.create({ type: FailureType.InvalidState, message, nonRetryable: true });

export function createReviewActivities(deps: TaskActivityDeps) {
  /**
   * A job an operator binds must exist at the active attempt's provider (read with the JobRef
   * that provider needs), carry no other attempt's token, and be bound to no other attempt.
   * Whatever stops the read fails the Update at once with the reason (never a retry loop the
   * operator cannot see end); the operator tries again.
   */
  async function assertJobBindable(taskId: string, providerJobId: string): Promise<void> {
    const [row] = await deps.db
      .select({ attempt: taskAttempt })
      .from(generationTask)
      .innerJoin(taskAttempt, eq(taskAttempt.attempt_id, generationTask.active_attempt_id))
      .where(eq(generationTask.task_id, taskId));
    if (!row) throw invalid('task has no attempt to bind a job to');
    const { attempt } = row;
    if (attempt.provider_job_id && attempt.provider_job_id !== providerJobId) {
      throw invalid(`attempt already has provider job ${attempt.provider_job_id}`);
    }
    const [other] = await deps.db
      .select({ id: taskAttempt.attempt_id })
      .from(taskAttempt)
      .where(and(eq(taskAttempt.provider, attempt.provider), eq(taskAttempt.provider_job_id, providerJobId), ne(taskAttempt.attempt_id, attempt.attempt_id)));
    if (other) throw invalid(`provider job ${providerJobId} is bound to attempt ${other.id}`);
    let job;
    try {
      job = await providerFor(deps, attempt.provider).getJob(providerJobId, AbortSignal.timeout(deps.settings.providerCallTimeoutMs), {
        model: attempt.provider_model,
      });
    } catch (err) {
      if (err instanceof ApplicationFailure) throw err;
      if ((err as Error).name === 'ProviderNotFound') throw invalid(`${attempt.provider} has no job ${providerJobId}`);
      throw ApplicationFailure.create({
        type: FailureType.ProviderUnavailable,
        message: `could not read job ${providerJobId} from ${attempt.provider}: ${(err as Error).message}; try the resolution again`,
        nonRetryable: true,
        cause: err as Error,
      });
    }
    if (job.correlationToken && job.correlationToken !== attempt.attempt_id) {
      throw invalid(`provider job ${providerJobId} carries another attempt's token`);
    }
  }

  return {
    async escalateTask(taskId: string, reason: string): Promise<TaskFacts> {
      await fenced(deps, (token) => escalate(deps, token, taskId, { sourceEvent: 'workflow.escalate', detail: { reason: reason.slice(0, 2000) } }));
      return readTaskFacts(deps.db, taskId, deps.clock.now());
    },

    /** Applies an operator's resolution of MANUAL_REVIEW. Fails (non-retryable) when the facts do not allow it. */
    async resolveReview(taskId: string, resolution: ReviewResolution): Promise<TaskFacts> {
      const problem = reviewProblem(resolution);
      if (problem) throw invalid(problem);
      await fenced(deps, async (token) => {
        if (resolution.kind === 'bind-job') await assertJobBindable(taskId, resolution.providerJobId);
        await deps.db.transaction(async (tx) => {
          // The mode again, in the writing transaction: fenced() read it before a bind-job's
          // provider read, and an operator narrowing it leaves the epoch where it was.
          await holdFenceForFacts(tx, token);
          const task = await lockTask(tx, taskId);
          if (!task) throw notFound(`task ${taskId}`);
          const from = task.status;
          const event = resolution.kind === 'bind-job' ? 'REVIEW_BIND_JOB' : resolution.kind === 'not-submitted' ? 'REVIEW_NOT_SUBMITTED' : 'REVIEW_FAIL';
          const d = decide(from, { type: event });
          if (d.kind !== 'move') throw invalid(`task is ${from}, not in MANUAL_REVIEW`);
          const actor = `operator:${resolution.operator}`;
          const attemptId = task.active_attempt_id;
          if (resolution.kind === 'fail') {
            // Nothing is charged, unless the ledger settled the reservation already (a task made
            // live again after it was settled, then parked): the task then ends with the charge its
            // ledger carries, since a different one is refused by the ledger and would park it for
            // ever; a correction is an operator grant (docs/billing.md).
            const settled = await settledCharge(tx, taskId);
            await finishTask(tx, token, task, {
              to: 'FAILED',
              charge: settled ?? '0',
              sourceEvent: 'review.fail',
              actor,
              failureCode: 'OPERATOR_FAILED',
              failureMessage: resolution.reason,
              ...(settled !== null ? { detail: { kept_ledger_settlement: settled } } : {}),
            });
          } else {
            if (resolution.kind === 'bind-job') {
              if (!attemptId) throw invalid('task has no attempt to bind a job to');
              const bound = await casAttempt(
                tx,
                attemptId,
                { where: or(isNull(taskAttempt.provider_job_id), eq(taskAttempt.provider_job_id, resolution.providerJobId)) },
                // The failed-read count starts again from the operator's bind (docs/decisions/0012).
                { provider_job_id: resolution.providerJobId, submit_state: 'SUBMITTED', read_failures: 0, next_poll_at: sql`now()` },
              );
              if (!bound) throw invalid('the attempt was bound to another job meanwhile');
            } else if (attemptId) {
              // Refused while anything says a job exists: confirming it would buy a second one.
              const evidence = await jobEvidence(tx, attemptId);
              if (evidence) throw invalid(`refused: ${evidence.description} (bind the job, or wait and try again)`);
              await casAttempt(
                tx,
                attemptId,
                { where: sql`${taskAttempt.provider_job_id} IS NULL` },
                { submit_state: 'REJECTED', last_error: `operator confirmed not submitted: ${resolution.reason}` },
              );
            }
            await casTaskStatus(tx, token, {
              taskId,
              from,
              expectedVersion: task.status_version,
              to: d.to,
              sourceEvent: `review.${resolution.kind}`,
              actor,
              attemptId,
              detail: { reason: resolution.reason, ...(resolution.kind === 'bind-job' ? { provider_job_id: resolution.providerJobId } : {}) },
            });
          }
          await recordAudit(tx, {
            actor,
            action: `review.${resolution.kind}`,
            targetType: 'task',
            targetId: taskId,
            reason: resolution.reason,
            detail: { from, to: d.to, ...(resolution.kind === 'bind-job' ? { provider_job_id: resolution.providerJobId } : {}) },
          });
        });
      });
      return readTaskFacts(deps.db, taskId, deps.clock.now());
    },
  };
}
