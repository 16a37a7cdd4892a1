// CANCEL_REQUESTED: ask the provider to cancel, best effort. The terminal state still comes
// from the provider (callback or poll) through the state machine: a success that races the
// cancel wins and is rescued and charged (docs/billing.md).
import { Context } from '@temporalio/activity';
import { eq } from 'drizzle-orm';
import { holdFence } from '../db/fence';
import { generationTask, taskAttempt } from '../db/schema';
import { fenced, providerFor, type TaskActivityDeps } from './deps';

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
        // The region may have failed over since the token was read: check it again right before
        // the call, so a fenced worker never sends a provider call the new region did not decide.
        await holdFence(deps.db, token);
        await adapter.cancel(row.attempt.provider_job_id, Context.current().cancellationSignal, { model: row.attempt.provider_model });
        return { sent: true };
      });
    },
  };
}
