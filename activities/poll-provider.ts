// The poll fallback: read the job from the provider and write what it says into the inbox,
// the same path a callback takes. An attempt whose submit outcome is unknown is looked for by
// our key or the fingerprint of what we sent instead (docs/design.md §5 "Unknown outcome",
// docs/providers.md "Proof of absence"), never given a second attempt on a guess:
//   found                         → the event is recorded; applying it binds the job;
//   ambiguous                     → several jobs fit: the task parks in MANUAL_REVIEW with them;
//   not-found-proven              → (an 'exact-lookup' provider only) the attempt is REJECTED and
//                                   a new attempt may follow;
//   not found, unproven           → at a provider that refuses a duplicate key (`resendable`), the
//                                   same create is sent again with the same key
//                                   (activities/resend-unknown.ts): accepted, the job is recorded
//                                   as found; otherwise keep waiting; past the deadline the
//                                   workflow escalates.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { eq, sql } from 'drizzle-orm';
import { casAttempt } from '../db/attempts';
import type { Tx } from '../db/client';
import { FenceRejectedError, type FenceToken } from '../db/fence';
import { holdFenceForFacts, ModePausedError } from '../db/modes';
import { inTaskTransaction } from '../db/task-tx';
import { recordProviderEvent } from '../db/inbox';
import { AMBIGUOUS_LOOKUP_EVENT, jobEvidence } from '../db/job-evidence';
import { taskAttempt, type AttemptRow } from '../db/schema';
import { applyTaskEvent, lockTask } from '../db/tasks';
import { pollInterval, withDemandFloor, type PollPhase } from '../domain/backoff';
import type { TaskFacts } from '../domain/facts';
import { FINISHED_PROVIDER_JOB_STATES, GONE_AFTER_CANCEL } from '../domain/states';
import { withinRetention } from '../providers/result-retention';
import type { LookupResult, ProviderAdapter, ProviderJob } from '../providers/types';
import type { InboxApply } from './apply-inbox';
import { createCallbackHealth } from './callback-health';
import { escalate } from './escalate';
import { notFound, providerFor, readTaskStep, withHeartbeat, type TaskActivityDeps } from './deps';
import { classifyReadFailure, clearReadFailures, escalateAttempt, pastMaxRun, recordReadFailure } from './provider-reads';
import { lookupQueryFor, lookupUnknownSubmit } from './reconcile-lookup';
import { createResend } from './resend-unknown';

export interface PollResult {
  /**
   * recorded / duplicate: a provider state went to the inbox (new or already there);
   * not-found: an unknown-outcome job is not visible yet; absent: proved never created, the
   * task is back in DISPATCHING; overdue: not found past the deadline (escalate); parked: the
   * lookup was ambiguous and the task is in MANUAL_REVIEW with the candidates;
   * nothing-to-poll: the attempt has nothing to ask about; read-failed: the known job could not be
   * read (counted); escalated: the known job is gone, refused or past its maximum run time, and
   * the task is in MANUAL_REVIEW (activities/provider-reads.ts).
   */
  readonly result: 'recorded' | 'duplicate' | 'not-found' | 'absent' | 'overdue' | 'parked' | 'nothing-to-poll' | 'read-failed' | 'escalated';
}

/** The job a cancel removed at the provider: cancelled, as we asked. */
const goneAfterCancel = (jobId: string): ProviderJob => ({
  jobId,
  state: 'canceled',
  rawStatus: GONE_AFTER_CANCEL,
  updatedAt: null,
  outputUrl: null,
  error: 'the provider no longer has the job after our cancel',
  correlationToken: null,
  metrics: null,
});

/**
 * A poll's result, and — when the poll was asked to apply the inbox and read the job in the common
 * case (recorded or duplicate, nothing to bound) — the facts after that inbox step, which then ran
 * in the poll's own task transaction. Null: the caller runs the inbox step itself if it needs one.
 */
export interface PollOutcome {
  readonly polled: PollResult;
  readonly applied: TaskFacts | null;
}

/**
 * The poll itself, shared by the pollProvider activity and a wait's attempts
 * (activities/await-provider.ts): one callback-health view per worker.
 */
export function createPollSteps(deps: TaskActivityDeps) {
  const callbacks = createCallbackHealth({ db: deps.db, clock: deps.clock, windowMs: deps.settings.callbackHealthyWindowMs });
  const pace = { initialMs: deps.settings.pollInitialMs, maxMs: deps.settings.pollMaxMs, healthyFactor: deps.settings.pollHealthyFactor };
  const demand = deps.pollDemand;
  // The writes after the provider call: the fence and the mode again (the call took a while, and
  // an operator narrowing the mode leaves the epoch where it was: db/modes.ts holdFenceForFacts).
  const inFactFence = <T>(token: FenceToken, work: (tx: Tx) => Promise<T>): Promise<T> =>
    deps.db.transaction(async (tx) => {
      await holdFenceForFacts(tx, token);
      return work(tx);
    });
  const resendUnknown = createResend(deps);

  /** Returns false (and writes nothing) when the task is no longer waiting on this unknown outcome or a job was heard of. */
  async function markProvedAbsent(token: FenceToken, taskId: string, attempt: AttemptRow, reason: string): Promise<boolean> {
    return deps.db.transaction(async (tx) => {
      await holdFenceForFacts(tx, token);
      const task = await lockTask(tx, taskId);
      if (!task) throw notFound(`task ${taskId}`);
      // A miss proves nothing against a callback or an earlier hit for this token (db/job-evidence.ts);
      // and a parked task (MANUAL_REVIEW) is not re-dispatched by a poll: an operator decides.
      if (task.status !== 'SUBMIT_UNKNOWN' || (await jobEvidence(tx, attempt.attempt_id))) return false;
      const moved = await casAttempt(
        tx,
        attempt.attempt_id,
        { from: 'SUBMIT_UNKNOWN', where: sql`${taskAttempt.provider_job_id} IS NULL` },
        { submit_state: 'REJECTED', last_error: reason, submit_finished_at: sql`now()` },
      );
      if (!moved || task.active_attempt_id !== attempt.attempt_id) return false;
      await applyTaskEvent(
        tx,
        token,
        task,
        { type: 'SUBMIT_PROVED_ABSENT' },
        {
          sourceEvent: 'reconcile.proved-absent',
          actor: 'workflow',
          attemptId: attempt.attempt_id,
          detail: { reason },
        },
      );
      return true;
    });
  }

  /** Several provider jobs fit an unknown submit: park the task in MANUAL_REVIEW with them as the evidence. */
  async function parkAmbiguous(token: FenceToken, taskId: string, attemptId: string, lookup: Extract<LookupResult, { kind: 'ambiguous' }>) {
    await escalate(deps, token, taskId, {
      sourceEvent: AMBIGUOUS_LOOKUP_EVENT,
      attemptId,
      detail: { reason: lookup.evidence.slice(0, 2000), candidate_job_ids: lookup.jobs.slice(0, 50).map((j) => j.jobId) },
      // Only while the outcome is still unknown: a callback may have bound the job meanwhile.
      when: async (tx, task) => {
        if (task.active_attempt_id !== attemptId || task.status !== 'SUBMIT_UNKNOWN') return false;
        const [attempt] = await tx.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId)).for('update');
        return !!attempt && !attempt.provider_job_id;
      },
    });
  }

  /** Past the provider's maximum run time with the job still in flight (or unreadable): the evidence, else null. */
  const overrunOf = (attempt: AttemptRow, adapter: ProviderAdapter, job: ProviderJob | null, now: Date) =>
    !job || !FINISHED_PROVIDER_JOB_STATES.includes(job.state) ? pastMaxRun(deps, adapter, attempt, now) : null;

  /** Whether boundKnownJobRead has anything to do after this read of a known job. */
  const needsBound = (attempt: AttemptRow, adapter: ProviderAdapter, job: ProviderJob | null, readFailed: { err: unknown } | null, now: Date) =>
    readFailed !== null || attempt.read_failures > 0 || overrunOf(attempt, adapter, job, now) !== null;

  /**
   * After a read of a known job: past the provider's maximum run time, a job still in flight (or
   * unreadable) parks the task; a failed read is counted (parking at the limit); a good read
   * clears the count. Returns the poll's result when the read ends the poll here.
   */
  async function boundKnownJobRead(
    token: FenceToken,
    taskId: string,
    attempt: AttemptRow,
    adapter: ProviderAdapter,
    job: ProviderJob | null,
    readFailed: { err: unknown } | null,
    now: Date,
  ): Promise<'escalated' | 'read-failed' | null> {
    const overrun = overrunOf(attempt, adapter, job, now);
    if (overrun && (await escalateAttempt(deps, token, taskId, attempt.attempt_id, overrun))) return 'escalated';
    if (!readFailed) {
      await clearReadFailures(deps, token, attempt);
      return null;
    }
    const escalated = await recordReadFailure(deps, token, taskId, attempt, readFailed.err);
    Context.current().log.warn('provider read failed', { taskId, error: classifyReadFailure(readFailed.err).message, escalated });
    return escalated ? 'escalated' : 'read-failed';
  }

  return {
    /** Reads the job and records what it says; with `apply`, also applies the inbox in the same transaction (PollOutcome). */
    async poll(taskId: string, apply: InboxApply | null): Promise<PollOutcome> {
      const only = (polled: PollResult): PollOutcome => ({ polled, applied: null });
      return withHeartbeat(() =>
        readTaskStep(deps, taskId, async ({ token, mode, task, attempt }): Promise<PollOutcome> => {
          if (!task || !attempt) throw notFound(`active attempt of task ${taskId}`);
          const adapter = providerFor(deps, attempt.provider);
          const signal = Context.current().cancellationSignal;
          const now = deps.clock.now();
          const unknown = !attempt.provider_job_id && attempt.submit_state === 'SUBMIT_UNKNOWN';
          if (!attempt.provider_job_id && !unknown) return only({ result: 'nothing-to-poll' });

          const submittedAt = attempt.submit_started_at ?? attempt.created_at;
          const previous = attempt.next_poll_at && attempt.last_polled_at ? attempt.next_poll_at.getTime() - attempt.last_polled_at.getTime() : null;
          let job: ProviderJob | null;
          let lookup: LookupResult | null = null;
          let lookupFailed: string | null = null;
          let readFailed: { err: unknown } | null = null;
          if (attempt.provider_job_id) {
            // One status read per poll: a poll is what the provider's poll queue admits against its
            // query quota (docs/providers.md "Poll queues and pacing"), so a slow read is not sent twice.
            const jobId = attempt.provider_job_id;
            try {
              job = await adapter.getJob(jobId, signal, { model: attempt.provider_model });
            } catch (err) {
              if (signal.aborted) throw err;
              if (task.status === 'CANCEL_REQUESTED' && (err as Error).name === 'ProviderNotFound') {
                // A job we asked to cancel that the provider no longer knows was cancelled (Runway:
                // "aborted and deleted tasks will not be able to be fetched again", docs/providers.md),
                // and is not charged: a 404 says nothing of what the provider billed.
                job = goneAfterCancel(jobId);
              } else {
                // Counted and bounded below (activities/provider-reads.ts), never retried forever.
                job = null;
                readFailed = { err };
              }
            }
          } else {
            try {
              // Bounded, so a long list walk never outlasts the activity and the deadline check below runs.
              const budget = AbortSignal.any([signal, AbortSignal.timeout(deps.settings.reconcileLookupBudgetMs)]);
              lookup = await lookupUnknownSubmit(deps.db, adapter, attempt, lookupQueryFor(attempt, task.request, now, budget));
              job = lookup.kind === 'found' ? lookup.job : null;
            } catch (err) {
              // A failed lookup proves nothing either way; the deadline still runs.
              job = null;
              lookupFailed = (err as Error).message;
              Context.current().log.warn('reconciliation lookup failed', { taskId, error: lookupFailed });
            }
            // A miss that proves nothing, at a provider that refuses a second create with our key:
            // the provider settles it when the same create is sent again (docs/decisions/0064).
            if (lookup?.kind === 'not-found-unproven') {
              const resent = await resendUnknown({ token, mode, task, attempt, adapter, now, previousIntervalMs: previous, signal });
              if (resent.kind === 'accepted') {
                job = resent.job;
                lookup = { kind: 'found', job, by: 'key' };
              }
            }
          }

          const phase: PollPhase = unknown ? 'reconciling' : task.status === 'CANCEL_REQUESTED' ? 'cancelling' : 'waiting';
          const healthy = phase === 'waiting' && (await callbacks.healthy(attempt.provider));
          // Never sooner than the provider's quota lets every waiting job be read in turn.
          // A provider that keeps results only for a while is read inside that window, even over its quota.
          const paced = withDemandFloor(pollInterval(previous, phase, healthy, pace, Math.random), await demand.floorMs(attempt.provider), Math.random);
          const interval = withinRetention(paced, adapter.capabilities);
          const polled = (tx: Tx) =>
            tx
              .update(taskAttempt)
              .set({ last_polled_at: now, next_poll_at: new Date(now.getTime() + interval) })
              .where(eq(taskAttempt.attempt_id, attempt.attempt_id));
          const event = (found: ProviderJob) => ({
            provider: attempt.provider,
            job: found,
            providerEventId: null,
            source: unknown ? ('reconcile' as const) : ('poll' as const),
            attemptId: attempt.attempt_id,
            taskId,
            receivedRegion: deps.fence.region,
            signatureValid: true,
            raw: { polled_at: now.toISOString(), status: found.rawStatus },
          });

          // A waiting task's poll: the job read, nothing to bound (activities/provider-reads.ts).
          // The next poll time and the inbox row go in one task transaction under the token read.
          if (job && !(attempt.provider_job_id && needsBound(attempt, adapter, job, readFailed, now))) {
            const found = job;
            const record = (tx: Tx) => polled(tx).then(() => recordProviderEvent(tx, event(found)));
            const result = (inboxId: string | null): PollResult => ({ result: inboxId ? 'recorded' : 'duplicate' });
            // A read of a known job may also apply the inbox in that transaction
            // (docs/decisions/0051). A lookup's hit never does: its inbox row is the evidence that
            // a job exists (db/job-evidence.ts) and must stay even if applying it fails.
            if (apply && attempt.provider_job_id) {
              try {
                const { value, facts } = await inTaskTransaction(
                  deps.db,
                  deps.fence,
                  taskId,
                  async (tx, lock) => {
                    const recorded = await record(tx);
                    if (!lock.task) throw notFound(`task ${taskId}`);
                    // The attempt as the opening locked it, before this poll's own update, which
                    // set only the poll times the inbox step never reads.
                    await apply(tx, lock.task, lock);
                    return recorded;
                  },
                  { token, activeAttempt: true, facts: () => deps.clock.now() },
                );
                if (!facts) throw notFound(`task ${taskId}`);
                return { polled: result(value), applied: facts };
              } catch (err) {
                if (err instanceof FenceRejectedError || err instanceof ModePausedError || err instanceof ApplicationFailure) throw err;
                // The inbox step failed and took the read back with it: the read is recorded on its
                // own, as a poll that does not apply records it, and the failure goes on (a retry,
                // or a task parked with the row to show for it).
                await inTaskTransaction(deps.db, deps.fence, taskId, record, { token }).catch((again: unknown) => {
                  Context.current().log.warn('could not record the read after its inbox step failed', { taskId, error: (again as Error).message });
                });
                throw err;
              }
            }
            const { value: inboxId } = await inTaskTransaction(deps.db, deps.fence, taskId, record, { token });
            return only(result(inboxId));
          }

          await inFactFence(token, polled);
          if (attempt.provider_job_id) {
            const parked = await boundKnownJobRead(token, taskId, attempt, adapter, job, readFailed, now);
            if (parked) return only({ result: parked });
          }
          if (!job) {
            if (lookup?.kind === 'ambiguous') {
              await parkAmbiguous(token, taskId, attempt.attempt_id, lookup);
              return only({ result: 'parked' });
            }
            const age = now.getTime() - submittedAt.getTime();
            // Only the documented not-found answer of an exact lookup is proof, once the provider
            // has had time to create the job and while it still keeps jobs that old.
            const proof = lookup?.kind === 'not-found-proven' && adapter.capabilities.absenceProof === 'exact-lookup' ? lookup.evidence : null;
            if (proof && age >= deps.settings.unknownProofDelayMs && age < adapter.capabilities.listingWindowMs) {
              if (await markProvedAbsent(token, taskId, attempt, `${proof}, ${Math.round(age / 1000)} s after submit`)) {
                return only({ result: 'absent' });
              }
            }
            const since = attempt.unknown_since ?? submittedAt;
            const overdue = now.getTime() - since.getTime() > deps.settings.unknownOutcomeDeadlineMs;
            return only({ result: overdue ? 'overdue' : 'not-found' });
          }
          const found = job;
          const inboxId = await inFactFence(token, (tx) => recordProviderEvent(tx, event(found)));
          return only({ result: inboxId ? 'recorded' : 'duplicate' });
        }),
      );
    },
  };
}

export function createPollActivities(steps: ReturnType<typeof createPollSteps>) {
  return {
    async pollProvider(taskId: string): Promise<PollResult> {
      return (await steps.poll(taskId, null)).polled;
    },
  };
}
