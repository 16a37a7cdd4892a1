// SUBMITTING: call the provider at most once per attempt (docs/design.md §5 "Submit").
// PREPARED → SUBMITTING is committed before the call; an attempt found in SUBMITTING on entry
// means an earlier execution died mid-call, so its outcome is unknown and the provider is
// never called again for it.
import { storableText } from '../db/storable';
import { Context } from '@temporalio/activity';
import { eq, sql } from 'drizzle-orm';
import { attemptCounts, casAttempt, claimForSubmit, unclaimUnsent } from '../db/attempts';
import type { Tx } from '../db/client';
import type { FenceToken } from '../db/fence';
import { ModePausedError } from '../db/modes';
import { inTaskTransaction, type TaskLock } from '../db/task-tx';
import { modeForbids } from '../domain/modes';
import { taskAttempt, type AttemptRow, type TaskRow } from '../db/schema';
import { applyTaskEvent, casTaskStatus } from '../db/tasks';
import { fullJitterDelay, nextPollInterval } from '../domain/backoff';
import type { TaskFacts } from '../domain/facts';
import { decide } from '../domain/task-machine';
import { callbackUrl, createCallbackTokens } from '../providers/callback-token';
import type { SubmitOutcome } from '../providers/types';
import { assertSubmitSwitchOpen, notFound, providerFor, toActivityFailure, withHeartbeat, type TaskActivityDeps } from './deps';
import type { BreakerTicket } from '../providers/resilience/circuit-breaker';
import { failedUncharged, finishTask } from '../db/settlement';
import { deadlineExceeded, pastDeadline } from './deadline';
import { recheckWait, roomFor, takeSlot } from '../db/slot-queue';
import { unsentBefore } from '../db/provider-control';
import { decidePace, paceWaitMs } from '../domain/create-pace';
import { attemptsLeft, createPaceOf, isThrottle } from './create-pace';
import { rerouteWaiting } from './slot-reroute';
import { providerInput } from './provider-input';
import { earlierJobEvidence } from '../db/job-evidence';
import type { InboxApply } from './apply-inbox';
import { parkOnSecondJob, takeBackEarlierJob } from './earlier-job';
import { gateCreateCap, liftCreateCap, markAttemptCapped, recordCapRefusal } from '../db/create-cap';
import { capResetAt, capWaitMs } from '../domain/create-cap';

/** A guard ticket taken by a claim, to give back if the claim does not stand. */
interface Admitted {
  readonly provider: string;
  readonly ticket: BreakerTicket;
  readonly attemptNo: number;
}

/**
 * Whether an attempt's outcome may move its task: only while it is the task's active attempt and
 * its own conditional update matched (a stale execution whose attempt moved on changes nothing).
 */
const drivesTask = (task: TaskRow, attemptId: string, moved: boolean): boolean => moved && task.active_attempt_id === attemptId;

export interface SubmitResult {
  readonly facts: TaskFacts;
  /** After a retryable rejection: wait this long before preparing the next attempt. */
  readonly retryInMs: number | null;
  /**
   * Waiting for a provider slot, or for the create pace: sleep until woken (a grant, a cancel), at
   * most this long. Absent in results recorded before the slot queue (docs/workflow-versioning.md).
   */
  readonly waitMs?: number | null;
}

export function createSubmitActivities(deps: TaskActivityDeps, apply: InboxApply) {
  // One guard per worker process (deps): breaker state is local, the bulkhead count comes from facts.
  const guard = deps.providerGuard;
  const tokens = createCallbackTokens(deps.settings.callbackTokenSecret);
  const now = () => deps.clock.now();
  // A probe of a capped model holds the cap this long while its create is answered (docs/decisions/0070).
  const capProbeMs = deps.settings.submitSendWindowMs + 2 * deps.settings.providerCallTimeoutMs;
  const pollAt = () => new Date(now().getTime() + nextPollInterval(null, deps.settings.pollInitialMs, deps.settings.pollMaxMs, Math.random));

  /** SUBMITTING → SUBMIT_UNKNOWN; the task follows only when this attempt is active and its CAS took effect. */
  async function markUnknown(tx: Tx, token: FenceToken, task: TaskRow, attempt: AttemptRow, reason: string) {
    const moved = await casAttempt(
      tx,
      attempt.attempt_id,
      { from: 'SUBMITTING' },
      {
        submit_state: 'SUBMIT_UNKNOWN',
        unknown_since: now(),
        next_poll_at: pollAt(),
        last_error: storableText(reason.slice(0, 2000)),
      },
    );
    if (!drivesTask(task, attempt.attempt_id, moved)) return;
    await applyTaskEvent(
      tx,
      token,
      task,
      { type: 'SUBMIT_OUTCOME_UNKNOWN' },
      {
        sourceEvent: 'submit.unknown',
        actor: 'workflow',
        attemptId: attempt.attempt_id,
        detail: { reason },
      },
    );
  }

  /**
   * Phase 1: claim the attempt (PREPARED → SUBMITTING) under the fence, or learn there is nothing
   * to call. A guard ticket taken inside a transaction that then fails (or fails to commit) is
   * given back, so a lost claim cannot hold a half-open probe slot or a retry token.
   */
  async function claim(taskId: string) {
    const held: { admitted: Admitted | null } = { admitted: null };
    try {
      return await claimTx(taskId, (a) => {
        held.admitted = a;
      });
    } catch (err) {
      if (held.admitted) guard.release(held.admitted.provider, held.admitted.ticket, held.admitted.attemptNo);
      throw err;
    }
  }

  /** The claim's transaction; its token is the unit of work's (the record must commit under it too), its facts what a step without a call returns. */
  async function claimTx(taskId: string, onAdmitted: (a: Admitted | null) => void) {
    const { value, facts } = await inTaskTransaction(deps.db, deps.fence, taskId, (tx, lock) => claimLocked(tx, taskId, lock, onAdmitted), {
      facts: now,
      activeAttempt: true,
    });
    if (!facts) throw notFound(`task ${taskId}`);
    return { claimed: value, facts };
  }

  async function claimLocked(tx: Tx, taskId: string, lock: TaskLock, onAdmitted: (a: Admitted | null) => void) {
    const { token, mode, task, attempt } = lock;
    if (!task) throw notFound(`task ${taskId}`);
    if (task.status !== 'SUBMITTING' || !task.active_attempt_id) return null;
    if (!attempt) throw notFound(`attempt ${task.active_attempt_id}`);
    if (attempt.submit_state === 'SUBMITTING') {
      await markUnknown(tx, token, task, attempt, 'an earlier submit execution did not record its outcome');
      return null;
    }
    if (attempt.submit_state !== 'PREPARED') return null;
    // Once-only, decided where the money is spent: no new attempt while an earlier one has any
    // evidence of a job (docs/design.md §1, activities/earlier-job.ts).
    const earlier = await earlierJobEvidence(tx, taskId, attempt.attempt_no);
    if (earlier) {
      await takeBackEarlierJob(tx, lock, task, earlier, attempt, apply, now());
      return null;
    }
    if (task.cancel_requested_at) {
      // Cancelled before the provider was called: nothing to pay for, nothing to cancel there.
      await casAttempt(tx, attempt.attempt_id, { from: 'PREPARED' }, { submit_state: 'CANCELLED' });
      await finishTask(tx, token, task, {
        to: 'CANCELLED',
        charge: '0',
        sourceEvent: 'workflow.cancel-before-submit',
        actor: 'workflow',
        attemptId: attempt.attempt_id,
      });
      return null;
    }
    // The task's deadline, set at the API edge: a call that could not finish by then never starts.
    if (pastDeadline(task, now(), deps.settings.providerCallTimeoutMs)) {
      await casAttempt(
        tx,
        attempt.attempt_id,
        { from: 'PREPARED' },
        { submit_state: 'CANCELLED', last_error: 'deadline exceeded before the provider was called' },
      );
      await finishTask(tx, token, task, deadlineExceeded('workflow.deadline-before-submit', attempt.attempt_id));
      return null;
    }
    // A mode that forbids new cost stops here, before the attempt is claimed: it stays PREPARED.
    if (modeForbids(mode, 'submit')) throw new ModePausedError(mode, 'submit');
    const capabilities = providerFor(deps, attempt.provider).capabilities;
    // The model's daily allowance at the provider is spent: the attempt waits for the reset, unsent
    // and holding no slot; past the reset one claim probes it (docs/decisions/0070).
    if (capabilities.createCap) {
      const cap = await gateCreateCap(tx, attempt.provider, attempt.provider_model, now(), capProbeMs);
      if (cap.kind === 'wait') {
        await markAttemptCapped(tx, attempt.attempt_id, now(), cap.until);
        guard.capped(attempt.provider);
        return { kind: 'capped' as const, task, waitMs: capWaitMs(now(), cap.until, task.deadline_at, deps.settings.providerCallTimeoutMs) };
      }
    }
    // A waiter back after its fallback timer looks at its own row without the provider's lock and
    // keeps waiting for its grant, unless a slot is free for it (docs/providers.md "The slot queue").
    const look = await recheckWait(tx, attempt.attempt_id, attempt.provider, now(), deps.settings.slotQueue.grantTtlMs);
    if (look) {
      const limit = look.maxInFlight ?? capabilities.maxConcurrency ?? Number.POSITIVE_INFINITY;
      if (Number.isFinite(limit) && !roomFor(look, guard.effectiveLimit(attempt.provider, limit))) {
        const moved = await rerouteWaiting(deps, tx, task, attempt);
        if (moved) return { kind: 'rerouted' as const, task };
        return { kind: 'waiting' as const, task };
      }
    }
    // The breaker: an attempt that may not go now stays PREPARED (and retries after the delay).
    const pace = createPaceOf(deps.settings.createQuotas, attempt.provider, capabilities);
    const admission = await guard.admit(tx, attempt.provider, capabilities, attempt.attempt_no, { paced: pace !== null });
    const { ticket } = admission;
    onAdmitted({ provider: attempt.provider, ticket, attemptNo: attempt.attempt_no });
    // The provider's create pace (docs/decisions/0069): a claim that may not create now waits,
    // holding nothing (no slot, no place), and asks again after the claims that came before it.
    const paced = pace ? decidePace(pace, admission.pace) : null;
    if (pace && paced?.kind === 'wait') {
      onAdmitted(null);
      guard.paced(attempt.provider, admission, attempt.attempt_no);
      const before = await unsentBefore(tx, attempt);
      return { kind: 'paced' as const, task, waitMs: paceWaitMs(pace, paced.conformsInMs, before) };
    }
    // Then the bulkhead: a slot from the queue, or the attempt waits for one as a fact (slot_wait)
    // and its workflow sleeps until the grant wakes it (docs/providers.md "The slot queue").
    const slotted = Number.isFinite(admission.ceiling);
    if (slotted) {
      const q = deps.settings.slotQueue;
      const slot = await takeSlot(
        tx,
        {
          attemptId: attempt.attempt_id,
          taskId,
          provider: attempt.provider,
          tenantId: task.tenant_id,
          priority: task.priority,
          ceiling: admission.ceiling,
          policy: q.policy,
          grantTtlMs: q.grantTtlMs,
          tenantDefaults: q.tenantDefaults,
          locked: admission.locked,
        },
        now(),
      );
      if (slot.kind === 'waiting') {
        onAdmitted(null);
        guard.queued(attempt.provider, admission, attempt.attempt_no);
        // Never sent, so it may go where there is room now; the next claim takes that slot.
        const moved = await rerouteWaiting(deps, tx, task, attempt);
        if (moved) {
          Context.current().log.info('waiting attempt re-routed to a provider with room', {
            taskId,
            attemptId: attempt.attempt_id,
            from: attempt.provider,
            to: moved.provider,
          });
          return { kind: 'rerouted' as const, task };
        }
        return { kind: 'waiting' as const, task, slot };
      }
    }
    // A claim that calls a paced provider moves the pace on, in the claim's last statement.
    const move = paced?.kind === 'go' ? { provider: attempt.provider, tat: new Date(paced.tatMs) } : null;
    const sendBy = new Date(now().getTime() + deps.settings.submitSendWindowMs);
    await claimForSubmit(tx, attempt.attempt_id, now(), sendBy, move);
    return { kind: 'claimed' as const, task, attempt, ticket, token, sendBy };
  }

  /** Phase 3: record the outcome of the one call, under the claim's token; the facts after it. */
  async function record(
    token: FenceToken,
    taskId: string,
    attemptId: string,
    outcome: SubmitOutcome,
  ): Promise<{ retryInMs: number | null; waitMs: number | null; facts: TaskFacts }> {
    const { value, facts } = await inTaskTransaction(deps.db, deps.fence, taskId, (tx, lock) => recordLocked(tx, token, taskId, lock, attemptId, outcome), {
      token,
      facts: now,
      activeAttempt: true,
    });
    if (!facts) throw notFound(`task ${taskId}`);
    return typeof value === 'number' || value === null ? { retryInMs: value, waitMs: null, facts } : { retryInMs: null, waitMs: value.capWaitMs, facts };
  }

  /**
   * The provider refused the create for the model's spent daily allowance (docs/decisions/0070): no
   * job, and no rejection either. The attempt goes back to PREPARED, the same id (the provider keeps
   * no key of ours), to be claimed after the reset; the model is capped until then for every claim.
   */
  async function waitForCap(tx: Tx, task: TaskRow, attempt: AttemptRow, outcome: Extract<SubmitOutcome, { kind: 'rejected' }>) {
    const at = now();
    const until = capResetAt(at, outcome.retryAfterMs, deps.settings.capRecheckMs);
    await recordCapRefusal(tx, attempt.provider, attempt.provider_model, at, until, storableText(outcome.reason.slice(0, 2000)));
    const back = await casAttempt(
      tx,
      attempt.attempt_id,
      { from: 'SUBMITTING' },
      {
        submit_state: 'PREPARED',
        submit_started_at: null,
        send_by: null,
        capped_since: sql`coalesce(${taskAttempt.capped_since}, ${at})`,
        capped_until: until,
        last_error: storableText(outcome.reason.slice(0, 2000)),
      },
    );
    if (!drivesTask(task, attempt.attempt_id, back)) return null;
    return { capWaitMs: capWaitMs(at, until, task.deadline_at, deps.settings.providerCallTimeoutMs) };
  }

  async function recordLocked(
    tx: Tx,
    token: FenceToken,
    taskId: string,
    lock: TaskLock,
    attemptId: string,
    outcome: SubmitOutcome,
  ): Promise<number | { readonly capWaitMs: number } | null> {
    const { task, attempt: active } = lock;
    if (!task) throw notFound(`task ${taskId}`);
    // The claimed attempt is the active one unless the task moved on meanwhile (then read it).
    const [attempt] =
      active?.attempt_id === attemptId ? [active] : await tx.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId)).for('update');
    if (!attempt) throw notFound(`attempt ${attemptId}`);
    const from = task.status;
    const base = { taskId, from, expectedVersion: task.status_version, actor: 'workflow', attemptId };
    switch (outcome.kind) {
      case 'accepted': {
        const { job } = outcome;
        const bound = {
          provider_job_id: sql`coalesce(${taskAttempt.provider_job_id}, ${job.jobId})`,
          submit_finished_at: now(),
          provider_status: sql`coalesce(${taskAttempt.provider_status}, ${job.rawStatus})`,
        };
        const moved = await casAttempt(
          tx,
          attemptId,
          { from: ['SUBMITTING', 'SUBMIT_UNKNOWN'] },
          { ...bound, submit_state: 'SUBMITTED', next_poll_at: pollAt() },
        );
        if (!moved) {
          // The attempt moved on (a callback bound it, or it was proved absent): keep the job as
          // evidence on the attempt, never as a task event.
          await casAttempt(tx, attemptId, {}, bound);
          // An attempt set aside as never sent turns out to have a job: the task goes back to it
          // while its next attempt is unsent, else parks with both jobs (activities/earlier-job.ts).
          if (attempt.submit_state === 'REJECTED') {
            const evidence = { attemptId, providerJobId: job.jobId, description: `attempt ${attemptId} has provider job ${job.jobId}` };
            // The active attempt never sent (set aside, refused, or not claimed yet): the task goes back.
            if (!active || active.attempt_id === attemptId || ['PREPARED', 'REJECTED', 'CANCELLED'].includes(active.submit_state)) {
              const next = active && active.attempt_id !== attemptId && active.submit_state === 'PREPARED' ? active : null;
              await takeBackEarlierJob(tx, lock, task, evidence, next, apply, now());
            } else {
              await parkOnSecondJob(tx, token, task, attemptId, job.jobId);
            }
            return null;
          }
        }
        // A capped model's create went through: its allowance has room again (docs/decisions/0070).
        if (providerFor(deps, attempt.provider).capabilities.createCap) await liftCreateCap(tx, attempt.provider, attempt.provider_model);
        if (!drivesTask(task, attemptId, moved)) return null;
        const d = decide(from, { type: 'SUBMIT_ACCEPTED' });
        if (d.kind === 'move') {
          await casTaskStatus(tx, token, { ...base, to: d.to, sourceEvent: 'submit.accepted', detail: { provider_job_id: job.jobId } });
        }
        return null;
      }
      case 'unknown':
        await markUnknown(tx, token, task, attempt, outcome.reason);
        return null;
      case 'rejected': {
        if (outcome.capped) return waitForCap(tx, task, attempt, outcome);
        // A throttle refused the request for now, not the request itself: it is counted apart
        // from the rejections MAX_SUBMIT_ATTEMPTS bounds (docs/decisions/0057).
        const throttled = isThrottle(outcome);
        const moved = await casAttempt(
          tx,
          attemptId,
          { from: 'SUBMITTING' },
          {
            submit_state: 'REJECTED',
            submit_finished_at: now(),
            last_error: storableText(outcome.reason.slice(0, 2000)),
            ...(throttled ? { throttled: true } : {}),
          },
        );
        if (!drivesTask(task, attemptId, moved)) return null;
        const retryable = outcome.retryable && attemptsLeft(await attemptCounts(tx, taskId), deps.settings);
        const d = decide(from, { type: 'SUBMIT_REJECTED', retryable });
        if (d.kind !== 'move') return null;
        if (d.to === 'FAILED') {
          await finishTask(tx, token, task, failedUncharged('submit.rejected', 'PROVIDER_REJECTED', outcome.reason, attemptId));
          return null;
        }
        await casTaskStatus(tx, token, { ...base, to: d.to, sourceEvent: 'submit.rejected', detail: { status: outcome.status, reason: outcome.reason } });
        return outcome.retryAfterMs ?? fullJitterDelay(attempt.attempt_no, 1_000, 30_000, Math.random);
      }
    }
  }

  /** A claim that never sent: back to PREPARED when nothing else moved it (db/attempts.ts unclaimUnsent). */
  async function unsent(token: FenceToken, taskId: string, attemptId: string, sendBy: Date): Promise<void> {
    const { value } = await inTaskTransaction(deps.db, deps.fence, taskId, (tx) => unclaimUnsent(tx, attemptId, sendBy), { token });
    Context.current().log.warn('submit claim lapsed before the call: nothing sent', { taskId, attemptId, reclaimable: value });
  }

  /** How long a waiting workflow sleeps without a wake: the fallback, or less when its deadline comes first. */
  function waitFor(task: TaskRow): number {
    const fallback = deps.settings.slotQueue.waitFallbackMs;
    if (!task.deadline_at) return fallback;
    // Wake when a call could no longer finish by the deadline: the claim then fails it (DEADLINE_EXCEEDED).
    const untilDeadline = task.deadline_at.getTime() - deps.settings.providerCallTimeoutMs - now().getTime() + 50;
    return Math.max(1_000, Math.min(fallback, untilDeadline));
  }

  /** A create-pace wait, but no later than the moment a call could no longer finish by the deadline (the claim then fails it). */
  function paceWait(task: TaskRow, waitMs: number): number {
    if (!task.deadline_at) return waitMs;
    const untilDeadline = task.deadline_at.getTime() - deps.settings.providerCallTimeoutMs - now().getTime() + 50;
    return Math.max(1, Math.min(waitMs, untilDeadline));
  }

  async function submit(taskId: string): Promise<SubmitResult> {
    assertSubmitSwitchOpen(deps);
    // The claim may wait for the provider's control row lock: it heartbeats meanwhile, so only a
    // dead worker's claim is taken over (and DATABASE_LOCK_TIMEOUT_MS bounds the wait).
    const claimStarted = performance.now();
    const { claimed, facts } = await withHeartbeat(() => claim(taskId), 1_000);
    deps.claimTimes?.((performance.now() - claimStarted) / 1000);
    if (!claimed) return { facts, retryInMs: null, waitMs: null };
    if (claimed.kind === 'waiting') return { facts, retryInMs: null, waitMs: waitFor(claimed.task) };
    // The create pace lets it ask again then (a wake, a cancel, ends the sleep sooner).
    if (claimed.kind === 'paced') return { facts, retryInMs: null, waitMs: paceWait(claimed.task, claimed.waitMs) };
    // The model's daily allowance is spent: until its reset (a wake, e.g. a cancel, ends the sleep sooner).
    if (claimed.kind === 'capped') return { facts, retryInMs: null, waitMs: claimed.waitMs };
    // Re-routed while waiting: the workflow claims again at once, on the new provider.
    if (claimed.kind === 'rerouted') return { facts, retryInMs: null, waitMs: null };
    const { task, attempt, ticket, token, sendBy } = claimed;
    const adapter = providerFor(deps, attempt.provider);
    // The switch closed after the claim (a failover): never call. The attempt stays
    // SUBMITTING, so whoever runs next records the outcome as unknown and proves it absent.
    try {
      assertSubmitSwitchOpen(deps);
    } catch (err) {
      guard.release(attempt.provider, ticket, attempt.attempt_no);
      throw err;
    }
    const ctx = Context.current();
    const beat = setInterval(() => ctx.heartbeat({ phase: 'calling-provider' }), 1_000);
    let outcome: SubmitOutcome;
    const callStarted = Date.now();
    // Cancelled before the request could leave (a heartbeat timeout): the adapter answers a
    // retryable rejection without sending. That is our trouble, not the provider's.
    const cancelledBeforeCall = ctx.cancellationSignal.aborted;
    const request = {
      attemptId: attempt.attempt_id,
      model: attempt.provider_model,
      input: providerInput(task.request),
      // A keyed token, not the (public) attempt id: docs/decisions/0016.
      webhookUrl: callbackUrl(deps.settings.publicBaseUrl, attempt.provider, tokens.tokenFor(attempt.attempt_id)),
      deadlineAt: task.deadline_at,
      signal: ctx.cancellationSignal,
    };
    // The last check before money is spent, with nothing awaited between it and the call: an
    // execution that stalled since its claim (a pause, a long GC) past the send-by moment never
    // sends, since a retry may have concluded meanwhile that nothing was sent (docs/decisions/0063).
    if (now().getTime() >= sendBy.getTime()) {
      clearInterval(beat);
      guard.lapsed(attempt.provider, ticket, attempt.attempt_no);
      await unsent(token, taskId, attempt.attempt_id, sendBy);
      throw new Error(`the claim's send-by moment ${sendBy.toISOString()} passed before the provider was called; nothing was sent`);
    }
    try {
      outcome = await adapter.submit(request);
    } catch (err) {
      // An adapter must return a typed outcome; anything thrown is treated as unknown.
      outcome = { kind: 'unknown', reason: `adapter threw: ${(err as Error).message}` };
    } finally {
      clearInterval(beat);
      deps.routeStats.recordSubmitLatency(attempt.provider, Date.now() - callStarted);
    }
    if (cancelledBeforeCall) guard.release(attempt.provider, ticket, attempt.attempt_no);
    else if (outcome.kind === 'rejected' && outcome.capped) guard.capped(attempt.provider, { ticket, attemptNo: attempt.attempt_no });
    else guard.report(attempt.provider, ticket, outcome, attempt.attempt_no);
    ctx.log.info('provider submit outcome', { taskId, attemptId: attempt.attempt_id, outcome: outcome.kind });
    const recorded = await record(token, taskId, attempt.attempt_id, outcome);
    return { facts: recorded.facts, retryInMs: recorded.retryInMs, waitMs: recorded.waitMs };
  }

  return {
    /**
     * Submits the task's active attempt to its provider, at most once. With no free slot the
     * attempt waits in its provider's queue and the result says how long to sleep (a grant wakes
     * the workflow sooner).
     */
    async submitAttempt(taskId: string): Promise<SubmitResult> {
      try {
        return await submit(taskId);
      } catch (err) {
        throw toActivityFailure(err, deps.modePauseRetryMs);
      }
    },
  };
}
