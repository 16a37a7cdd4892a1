// The poll fallback: read the job from the provider and write what it says into the inbox,
// the same path a callback takes. An attempt whose submit outcome is unknown is looked for by
// its correlation token instead (DESIGN.md §5 "Unknown outcome"), never resubmitted:
//   found                         → the event is recorded; applying it binds the job;
//   provably absent               → the attempt is REJECTED and a new attempt may follow;
//   not found, past the deadline  → the workflow escalates to MANUAL_REVIEW.
import { Context } from '@temporalio/activity';
import { and, eq, sql } from 'drizzle-orm';
import { holdFence, type FenceToken } from '../db/fence';
import { recordProviderEvent } from '../db/inbox';
import { generationTask, taskAttempt } from '../db/schema';
import { applyTaskEvent, lockTask } from '../db/tasks';
import { pollInterval, withDemandFloor, type PollPhase } from '../domain/backoff';
import { hedgedRead, LatencyWindow } from '../providers/resilience/hedge';
import { createCallbackTokens } from '../providers/callback-token';
import type { ProviderAdapter, ProviderJob } from '../providers/types';
import { createCallbackHealth } from './callback-health';
import { fenced, notFound, providerFor, withHeartbeat, type TaskActivityDeps } from './deps';
import { createPollDemand, pollRateFor } from './poll-demand';

export interface PollResult {
  /**
   * recorded / duplicate: a provider state went to the inbox (new or already there);
   * not-found: an unknown-outcome job is not visible yet; absent: proved never created, the
   * task is back in DISPATCHING; overdue: not found past the deadline (escalate);
   * nothing-to-poll: the attempt has nothing to ask about.
   */
  readonly result: 'recorded' | 'duplicate' | 'not-found' | 'absent' | 'overdue' | 'nothing-to-poll';
}

type AttemptRow = typeof taskAttempt.$inferSelect;

/** Whether this provider's tier lets a negative lookup prove that no job exists. */
const canProveAbsence = (adapter: ProviderAdapter) => adapter.capabilities.unknownOutcomeTier !== 'none';

export function createPollActivities(deps: TaskActivityDeps) {
  const tokens = createCallbackTokens(deps.settings.callbackTokenSecret);
  const callbacks = createCallbackHealth({ db: deps.db, clock: deps.clock, windowMs: deps.settings.callbackHealthyWindowMs });
  const pace = { initialMs: deps.settings.pollInitialMs, maxMs: deps.settings.pollMaxMs, healthyFactor: deps.settings.pollHealthyFactor };
  const demand = createPollDemand({
    db: deps.db,
    clock: deps.clock,
    rateOf: (provider) => pollRateFor(deps, provider),
    share: deps.settings.pollQuotaShare,
  });
  const latencies = new Map<string, LatencyWindow>();
  const latencyOf = (provider: string) => {
    let w = latencies.get(provider);
    if (!w) latencies.set(provider, (w = new LatencyWindow()));
    return w;
  };

  async function markProvedAbsent(token: FenceToken, taskId: string, attempt: AttemptRow, reason: string) {
    await deps.db.transaction(async (tx) => {
      await holdFence(tx, token);
      const task = await lockTask(tx, taskId);
      if (!task) throw notFound(`task ${taskId}`);
      const moved = await tx
        .update(taskAttempt)
        .set({ submit_state: 'REJECTED', last_error: reason, submit_finished_at: sql`now()`, status_version: sql`${taskAttempt.status_version} + 1` })
        .where(and(eq(taskAttempt.attempt_id, attempt.attempt_id), eq(taskAttempt.submit_state, 'SUBMIT_UNKNOWN'), sql`${taskAttempt.provider_job_id} IS NULL`))
        .returning({ id: taskAttempt.attempt_id });
      if (moved.length === 0 || task.active_attempt_id !== attempt.attempt_id) return;
      await applyTaskEvent(tx, token, task, { type: 'SUBMIT_PROVED_ABSENT' }, {
        sourceEvent: 'reconcile.proved-absent',
        actor: 'workflow',
        attemptId: attempt.attempt_id,
        detail: { reason },
      });
    });
  }

  return {
    async pollProvider(taskId: string): Promise<PollResult> {
      return withHeartbeat(() => fenced(deps, async (token) => {
        const [row] = await deps.db
          .select({ task: generationTask, attempt: taskAttempt })
          .from(generationTask)
          .innerJoin(taskAttempt, eq(taskAttempt.attempt_id, generationTask.active_attempt_id))
          .where(eq(generationTask.task_id, taskId));
        if (!row) throw notFound(`active attempt of task ${taskId}`);
        const { attempt } = row;
        const adapter = providerFor(deps, attempt.provider);
        const signal = Context.current().cancellationSignal;
        const now = deps.clock.now();
        const unknown = !attempt.provider_job_id && attempt.submit_state === 'SUBMIT_UNKNOWN';
        if (!attempt.provider_job_id && !unknown) return { result: 'nothing-to-poll' as const };

        const submittedAt = attempt.submit_started_at ?? attempt.created_at;
        let job: ProviderJob | null;
        let lookupFailed: string | null = null;
        if (attempt.provider_job_id) {
          // An idempotent read: hedged once when slower than this provider's p95.
          const jobId = attempt.provider_job_id;
          const window = latencyOf(attempt.provider);
          const started = Date.now();
          job = (await hedgedRead((s) => adapter.getJob(jobId, s, { model: attempt.provider_model }), window.p95(), signal)).value;
          window.record(Date.now() - started);
        } else {
          try {
            const since = new Date(submittedAt.getTime() - 60_000);
            job = await adapter.findByCorrelationToken(attempt.attempt_id, since, signal);
            // A listing matches the token riding on the job: its callback URL's keyed token
            // (docs/decisions/0013); attempts submitted before it carry the attempt id, tried first.
            if (!job && adapter.capabilities.unknownOutcomeTier === 'list-by-token') {
              job = await adapter.findByCorrelationToken(tokens.tokenFor(attempt.attempt_id), since, signal);
            }
          } catch (err) {
            // A failed lookup proves nothing either way; the deadline still runs.
            job = null;
            lookupFailed = (err as Error).message;
            Context.current().log.warn('reconciliation lookup failed', { taskId, error: lookupFailed });
          }
        }

        const previous =
          attempt.next_poll_at && attempt.last_polled_at ? attempt.next_poll_at.getTime() - attempt.last_polled_at.getTime() : null;
        const phase: PollPhase = unknown ? 'reconciling' : row.task.status === 'CANCEL_REQUESTED' ? 'cancelling' : 'waiting';
        const healthy = phase === 'waiting' && (await callbacks.healthy(attempt.provider));
        // Never sooner than the provider's quota lets every waiting job be read in turn.
        const interval = withDemandFloor(pollInterval(previous, phase, healthy, pace, Math.random), await demand.floorMs(attempt.provider), Math.random);
        await deps.db
          .update(taskAttempt)
          .set({ last_polled_at: now, next_poll_at: new Date(now.getTime() + interval) })
          .where(eq(taskAttempt.attempt_id, attempt.attempt_id));

        if (!job) {
          const age = now.getTime() - submittedAt.getTime();
          // The provider has had time to create the job and the listing still reaches back to
          // our submit: a miss is proof. Past the listing window a miss proves nothing.
          if (!lookupFailed && canProveAbsence(adapter) && age >= deps.settings.unknownProofDelayMs && age < adapter.capabilities.listingWindowMs) {
            await markProvedAbsent(token, taskId, attempt, `no job carries token ${attempt.attempt_id} ${Math.round(age / 1000)} s after submit`);
            return { result: 'absent' as const };
          }
          const since = attempt.unknown_since ?? submittedAt;
          const overdue = now.getTime() - since.getTime() > deps.settings.unknownOutcomeDeadlineMs;
          return { result: overdue ? ('overdue' as const) : ('not-found' as const) };
        }
        const inboxId = await recordProviderEvent(deps.db, {
          provider: attempt.provider,
          job,
          providerEventId: null,
          source: unknown ? 'reconcile' : 'poll',
          attemptId: attempt.attempt_id,
          taskId,
          receivedRegion: deps.fence.region,
          signatureValid: true,
          raw: { polled_at: now.toISOString(), status: job.rawStatus },
        });
        return { result: inboxId ? ('recorded' as const) : ('duplicate' as const) };
      }));
    },
  };
}
