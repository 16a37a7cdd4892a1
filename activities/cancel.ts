// CANCEL_REQUESTED: ask the provider to cancel, best effort. The terminal state still comes
// from the provider (callback or poll) through the state machine: a success that races the
// cancel wins and is rescued and charged (docs/billing.md). A cancel that can never be taken is
// bounded like a failed read (activities/provider-reads.ts).
import { setTimeout as sleep } from 'node:timers/promises';
import { Context } from '@temporalio/activity';
import { eq } from 'drizzle-orm';
import { holdFence } from '../db/fence';
import { generationTask, taskAttempt } from '../db/schema';
import { fenced, providerFor, type TaskActivityDeps } from './deps';
import { classifyReadFailure, pastMaxRun, recordReadFailure } from './provider-reads';

/** Tries of a cancel that meets transient trouble, CANCEL_RETRY_MS × n apart, before it is given up. */
const CANCEL_TRIES = 3;
const CANCEL_RETRY_MS = 500;

export function createCancelActivities(deps: TaskActivityDeps) {
  return {
    async requestProviderCancel(taskId: string): Promise<{ sent: boolean }> {
      return fenced(deps, async (token) => {
        const [row] = await deps.db
          .select({ task: generationTask, attempt: taskAttempt })
          .from(generationTask)
          .innerJoin(taskAttempt, eq(taskAttempt.attempt_id, generationTask.active_attempt_id))
          .where(eq(generationTask.task_id, taskId));
        if (!row || row.task.status !== 'CANCEL_REQUESTED' || !row.attempt.provider_job_id) return { sent: false };
        const adapter = providerFor(deps, row.attempt.provider);
        // Some providers cannot cancel (Kling): the job runs to its end and the state machine decides.
        if (adapter.capabilities.canCancel === false) return { sent: false };
        // Past the provider's maximum run time there is nothing left to cancel; the poll parks the task.
        if (pastMaxRun(deps, adapter, row.attempt, deps.clock.now())) return { sent: false };
        const signal = Context.current().cancellationSignal;
        // The region may have failed over since the token was read: check it again right before
        // the call, so a fenced worker never sends a provider call the new region did not decide.
        await holdFence(deps.db, token);
        const jobId = row.attempt.provider_job_id;
        for (let tried = 1; ; tried++) {
          try {
            await adapter.cancel(jobId, signal, { model: row.attempt.provider_model });
            return { sent: true };
          } catch (err) {
            if (signal.aborted) throw err;
            // Best effort: transient trouble is tried again a few times here, then given up, so
            // the workflow goes on polling and applying the inbox instead of waiting on the
            // activity's retries. A cancel the provider will never take (job gone, request
            // refused) is counted like a failed read, and the poll that follows decides
            // (activities/provider-reads.ts).
            const transient = classifyReadFailure(err).kind === 'transient';
            if (transient && tried < CANCEL_TRIES) {
              await sleep(CANCEL_RETRY_MS * tried, undefined, { signal });
              continue;
            }
            Context.current().log.warn('provider cancel not sent', { taskId, error: classifyReadFailure(err).message, tries: tried });
            await recordReadFailure(deps, token, taskId, row.attempt, err);
            return { sent: false };
          }
        }
      });
    },
  };
}
