// The poll fallback: read the job from the provider and write what it says into the inbox,
// the same path a callback takes. An attempt with an unknown submit outcome is looked for by
// its correlation token instead (never resubmitted).
import { Context } from '@temporalio/activity';
import { eq } from 'drizzle-orm';
import { recordProviderEvent } from '../db/inbox';
import { generationTask, taskAttempt } from '../db/schema';
import { nextPollInterval } from '../domain/backoff';
import type { ProviderJob } from '../providers/types';
import { fenced, notFound, providerFor, type TaskActivityDeps } from './deps';

export interface PollResult {
  /** 'recorded': a provider state was written to the inbox; 'not-found': an unknown-outcome job was not (yet) found. */
  /** 'overdue': not found and past the unknown-outcome deadline; the workflow escalates. */
  readonly result: 'recorded' | 'duplicate' | 'not-found' | 'overdue' | 'nothing-to-poll';
}

export function createPollActivities(deps: TaskActivityDeps) {
  return {
    async pollProvider(taskId: string): Promise<PollResult> {
      return fenced(deps, async () => {
        const [row] = await deps.db
          .select({ task: generationTask, attempt: taskAttempt })
          .from(generationTask)
          .innerJoin(taskAttempt, eq(taskAttempt.attempt_id, generationTask.active_attempt_id))
          .where(eq(generationTask.task_id, taskId));
        if (!row) throw notFound(`active attempt of task ${taskId}`);
        const { task, attempt } = row;
        const adapter = providerFor(deps, task.provider);
        const signal = Context.current().cancellationSignal;
        let job: ProviderJob | null;
        if (attempt.provider_job_id) {
          job = await adapter.getJob(attempt.provider_job_id, signal);
        } else if (attempt.submit_state === 'SUBMIT_UNKNOWN' || attempt.submit_state === 'SUBMITTING') {
          const since = new Date((attempt.submit_started_at ?? attempt.created_at).getTime() - 60_000);
          job = await adapter.findByCorrelationToken(attempt.attempt_id, since, signal);
        } else {
          return { result: 'nothing-to-poll' as const };
        }
        const now = deps.clock.now();
        const previous =
          attempt.next_poll_at && attempt.last_polled_at
            ? attempt.next_poll_at.getTime() - attempt.last_polled_at.getTime()
            : null;
        const interval = nextPollInterval(previous, deps.settings.pollInitialMs, deps.settings.pollMaxMs, Math.random);
        await deps.db
          .update(taskAttempt)
          .set({ last_polled_at: now, next_poll_at: new Date(now.getTime() + interval) })
          .where(eq(taskAttempt.attempt_id, attempt.attempt_id));
        if (!job) {
          const since = attempt.unknown_since ?? attempt.submit_started_at;
          const overdue = since !== null && now.getTime() - since.getTime() > deps.settings.unknownOutcomeDeadlineMs;
          return { result: overdue ? ('overdue' as const) : ('not-found' as const) };
        }
        const inboxId = await recordProviderEvent(deps.db, {
          provider: task.provider,
          job,
          providerEventId: null,
          source: attempt.provider_job_id ? 'poll' : 'reconcile',
          attemptId: attempt.attempt_id,
          taskId,
          receivedRegion: deps.fence.region,
          signatureValid: true,
          raw: { polled_at: now.toISOString(), status: job.rawStatus },
        });
        return { result: inboxId ? ('recorded' as const) : ('duplicate' as const) };
      });
    },
  };
}

