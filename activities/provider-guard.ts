// Call-side resilience at the one place a provider job can be created (docs/design.md §6): the
// operator's switch, a per-process circuit breaker, a retry budget, and a bulkhead whose
// in-flight count is read from attempt facts under the provider's control row lock — so it
// holds across every worker process and is rebuilt from facts after any restart. After such a
// rebuild (this guard's start, or the provider's breaker closing again) the bulkhead's ceiling
// ramps up from a floor instead of letting the whole limit through at once (docs/design.md §6).
import { ApplicationFailure } from '@temporalio/common';
import type { DbOrTx } from '../db/client';
import { readClaimControl } from '../db/provider-control';
import { plusUpToHalf } from '../domain/backoff';
import { FailureType } from '../domain/errors';
import { MODE_POLICIES } from '../domain/modes';
import { SYSTEM_MODES, type SystemMode } from '../domain/states';
import { allowedSlots, type RampOptions } from '../providers/resilience/bulkhead';
import { CircuitBreaker, type CircuitBreakerOptions, type BreakerSnapshot, type BreakerTicket } from '../providers/resilience/circuit-breaker';
import { RetryBudget } from '../providers/resilience/retry-budget';
import type { ProviderCapabilities, SubmitOutcome } from '../providers/types';

/** The settings config/env.ts exposes (config/services.ts `providerGuardSettings`); their defaults live there. */
export interface ProviderGuardSettings {
  /** The bulkhead's ramp after a rebuild (BULKHEAD_RAMP_*); `durationMs: 0` turns it off. */
  readonly bulkheadRamp: Required<RampOptions>;
  /** DEGRADED_PROVIDER: a provider's breaker trips at this failure rate (DEGRADED_PROVIDER_FAILURE_RATE) and sends no probes. */
  readonly degradedFailureRate: number;
}

export interface ProviderGuardOptions extends ProviderGuardSettings {
  readonly now: () => number;
  /** Breaker tuning for every provider (tests shorten it). */
  readonly breaker?: Omit<CircuitBreakerOptions, 'now' | 'onStateChange'>;
  /** Share of first attempts that may be followed by a retry attempt (default 0.1), over a window. */
  readonly retryBudget?: { readonly ratio?: number; readonly minRetriesPerSecond?: number; readonly windowMs?: number };
  readonly onStateChange?: (provider: string, from: string, to: string) => void;
}

/** What a provider outcome means for the breaker: only the provider's own trouble counts as failure. */
export function breakerVerdict(outcome: SubmitOutcome): 'success' | 'failure' {
  if (outcome.kind === 'accepted') return 'success';
  if (outcome.kind === 'unknown') return 'failure';
  // 429 and 5xx-before-send are the provider's trouble; another 4xx is ours (a bad request).
  return outcome.retryable ? 'failure' : 'success';
}

const unavailable = (message: string, retryAfterMs: number) =>
  ApplicationFailure.create({
    type: FailureType.ProviderUnavailable,
    message,
    // Jittered, so refused claims do not all come back at the same instant.
    nextRetryDelay: Math.max(500, plusUpToHalf(retryAfterMs, Math.random)),
  });

/** Which guard refused a claim, and why (the labels of vidorch_provider_refusals_total). */
export type RefusalGuard = 'breaker' | 'bulkhead' | 'retry_budget' | 'pace' | 'send_by' | 'daily_cap';
export type RefusalCounts = Readonly<Record<string, number>>;

/** What admit() granted: the breaker's ticket and the bulkhead's limit and ceiling now (Infinity: none). */
export interface Admission {
  readonly ticket: BreakerTicket;
  readonly limit: number;
  /** The limit, or below it while ramping after a rebuild. */
  readonly ceiling: number;
  /** The claim holds the provider's control row lock (taken by admit's read): takeSlot need not take it. */
  readonly locked: boolean;
  /** The provider's create pace as the read found it (domain/create-pace.ts): the database's clock and the TAT. */
  readonly pace: { readonly nowMs: number; readonly tatMs: number | null };
}

export interface BulkheadSnapshot {
  /** The configured limit last read at an admission (provider_control.max_in_flight or the adapter's). */
  readonly limit: number;
  /** The ceiling now, while ramping after a rebuild (else the limit). */
  readonly effectiveLimit: number;
  /** When the ramp started (this guard's start or the breaker's last close), epoch ms. */
  readonly rebuiltAt: number;
}

export interface ProviderResilienceSnapshot {
  readonly breaker: BreakerSnapshot;
  readonly retriesAvailable: number;
  /** Null until a finite limit was seen. */
  readonly bulkhead: BulkheadSnapshot | null;
  /** Refusals by this process since it started, keyed "guard/reason" (e.g. "bulkhead/ramp"). */
  readonly refusals: RefusalCounts;
  /** Provider calls this process reported since it started, by the breaker's verdict ("success", "failure"). */
  readonly calls: RefusalCounts;
}

interface ProviderState {
  readonly breaker: CircuitBreaker;
  readonly budget: RetryBudget;
  /** Start of the bulkhead's current ramp. */
  rebuiltAt: number;
  lastLimit: number | null;
  readonly refusals: Record<string, number>;
  readonly calls: Record<string, number>;
}

/** Counts one refusal (or wait) of a claim, keyed "guard/reason". */
function count(s: ProviderState, guard: RefusalGuard, reason: string): void {
  const key = `${guard}/${reason}`;
  s.refusals[key] = (s.refusals[key] ?? 0) + 1;
}

const modeOf = (value: unknown): SystemMode =>
  typeof value === 'string' && (SYSTEM_MODES as readonly string[]).includes(value) ? (value as SystemMode) : 'NORMAL';

/**
 * One per worker process, built in its composition root (config/services.ts buildActivityDeps)
 * and passed to the submit activities and the worker's /metrics (`snapshots()`).
 */
export class ProviderGuard {
  private readonly providers = new Map<string, ProviderState>();
  private readonly startedAt: number;
  private readonly ramp: RampOptions;

  constructor(private readonly opts: ProviderGuardOptions) {
    this.startedAt = opts.now();
    this.ramp = opts.bulkheadRamp;
  }

  private state(provider: string): ProviderState {
    const known = this.providers.get(provider);
    if (known) return known;
    const breaker = new CircuitBreaker({
      now: this.opts.now,
      ...(this.opts.breaker ?? {}),
      onStateChange: (from, to) => {
        // The provider is back after being open: whatever it runs for others (or for jobs we
        // gave up on) is unknown, so the bulkhead ramps up again.
        if (to === 'closed') state.rebuiltAt = this.opts.now();
        this.opts.onStateChange?.(provider, from, to);
      },
    });
    const state: ProviderState = {
      breaker,
      budget: new RetryBudget({ now: this.opts.now, ...(this.opts.retryBudget ?? {}) }),
      rebuiltAt: this.startedAt,
      lastLimit: null,
      refusals: {},
      calls: {},
    };
    this.providers.set(provider, state);
    return state;
  }

  breaker(provider: string): CircuitBreaker {
    return this.state(provider).breaker;
  }

  budget(provider: string): RetryBudget {
    return this.state(provider).budget;
  }

  /** The bulkhead's ceiling now for `limit` (below it while ramping after a rebuild). */
  effectiveLimit(provider: string, limit: number): number {
    return allowedSlots(limit, this.state(provider).rebuiltAt, this.opts.now(), this.ramp);
  }

  snapshots(): Record<string, ProviderResilienceSnapshot> {
    return Object.fromEntries(
      [...this.providers].map(([p, s]) => [
        p,
        {
          breaker: s.breaker.snapshot(),
          retriesAvailable: s.budget.snapshot().available,
          bulkhead: s.lastLimit === null ? null : { limit: s.lastLimit, effectiveLimit: this.effectiveLimit(p, s.lastLimit), rebuiltAt: s.rebuiltAt },
          refusals: { ...s.refusals },
          calls: { ...s.calls },
        },
      ]),
    );
  }

  private refuse(s: ProviderState, guard: RefusalGuard, reason: string, message: string, retryAfterMs: number): ApplicationFailure {
    count(s, guard, reason);
    return unavailable(message, retryAfterMs);
  }

  /**
   * Inside the claim transaction, before PREPARED → SUBMITTING: may this attempt call the
   * provider now, as far as the breaker and the retry budget go? Throws a retryable
   * ProviderUnavailable (with the delay worth waiting) if not. The bulkhead is the slot queue's
   * (db/slot-queue.ts takeSlot): the answer carries the ceiling it must use. The system mode comes
   * from the transaction's MODE_SETTING (left by assertModeAllows).
   */
  async admit(tx: DbOrTx, provider: string, capabilities: ProviderCapabilities, attemptNo = 1, opts: { readonly paced?: boolean } = {}): Promise<Admission> {
    const s = this.state(provider);
    // An adapter with a limit always has a finite one (the operator's replaces it): its claim
    // takes a slot under the control row's lock, so this read takes the lock (no second trip for
    // it); so does a paced provider's, whose create pace is the row's. Without either, the read
    // stays a plain read: such claims never serialise.
    const locked = Number.isFinite(capabilities.maxConcurrency ?? Number.POSITIVE_INFINITY) || opts.paced === true;
    const control = await readClaimControl(tx, provider, { lock: locked });
    const breaker = s.breaker;
    breaker.setForced(control?.breaker_force ?? null);
    const strict = MODE_POLICIES[modeOf(control?.mode)].providers === 'healthy';
    breaker.setStrict(strict ? this.opts.degradedFailureRate : null);
    const decision = breaker.tryAcquire();
    if (!decision.allowed) {
      const why = decision.reason === 'strict' ? `not healthy (${control?.mode ?? 'DEGRADED_PROVIDER'} admits healthy providers only)` : decision.reason;
      throw this.refuse(s, 'breaker', decision.reason, `${provider} circuit ${why}`, decision.retryAfterMs);
    }
    const ticket = decision.ticket;
    // A later attempt is a retry: it spends the provider's retry budget, so a storm of proven
    // rejections cannot multiply the load (docs/design.md §6). Out of budget, it waits rather than fails.
    if (attemptNo > 1 && !s.budget.tryRetry()) {
      breaker.release(ticket);
      throw this.refuse(s, 'retry_budget', 'spent', `${provider} retry budget spent`, 5_000);
    }
    const limit = control?.max_in_flight ?? capabilities.maxConcurrency ?? Number.POSITIVE_INFINITY;
    if (Number.isFinite(limit)) s.lastLimit = limit;
    const pace = { nowMs: control?.db_now.getTime() ?? this.opts.now(), tatMs: control?.create_tat?.getTime() ?? null };
    return { ticket, limit, ceiling: Number.isFinite(limit) ? this.effectiveLimit(provider, limit) : limit, locked, pace };
  }

  /**
   * An admitted attempt found no free slot and waits in the queue: give back what admit() took
   * (as release()) and count the refusal ("bulkhead/full", or "bulkhead/ramp" below the limit).
   */
  queued(provider: string, admission: Admission, attemptNo = 1): void {
    const s = this.state(provider);
    this.release(provider, admission.ticket, attemptNo);
    count(s, 'bulkhead', admission.ceiling < admission.limit ? 'ramp' : 'full');
  }

  /**
   * An admitted attempt may not create now by the provider's create pace and waits, holding nothing:
   * give back what admit() took (as release()) and count it ("pace/wait").
   */
  paced(provider: string, admission: Admission, attemptNo: number): void {
    this.release(provider, admission.ticket, attemptNo);
    count(this.state(provider), 'pace', 'wait');
  }

  /**
   * A claimed attempt reached its call after its send-by moment and sent nothing (docs/decisions/0063):
   * give back what admit() took (as release()) and count it ("send_by/lapsed"), so a worker too
   * busy to make its calls in time shows on /metrics.
   */
  lapsed(provider: string, ticket: BreakerTicket, attemptNo: number): void {
    this.release(provider, ticket, attemptNo);
    count(this.state(provider), 'send_by', 'lapsed');
  }

  /**
   * The provider's daily allowance of creates for the model is spent (docs/decisions/0070): a claim
   * that waits for the reset before admission ("daily_cap/waiting"), or a create it refused
   * ("daily_cap/refused", given back as release(): the provider's answer is no trouble of its own,
   * so the breaker does not count it).
   */
  capped(provider: string, refused?: { readonly ticket: BreakerTicket; readonly attemptNo: number }): void {
    if (refused) this.release(provider, refused.ticket, refused.attemptNo);
    count(this.state(provider), 'daily_cap', refused ? 'refused' : 'waiting');
  }

  /**
   * An admitted attempt that will not call the provider after all (its claim transaction failed,
   * or the submit switch closed before the call): give back the breaker's probe slot and, for a
   * retry, the budget's token. Nothing is recorded as a success or a failure.
   */
  release(provider: string, ticket: BreakerTicket, attemptNo = 1): void {
    const s = this.state(provider);
    s.breaker.release(ticket);
    if (attemptNo > 1) s.budget.refund();
  }

  report(provider: string, ticket: BreakerTicket, outcome: SubmitOutcome, attemptNo = 1): void {
    const s = this.state(provider);
    const verdict = breakerVerdict(outcome);
    s.calls[verdict] = (s.calls[verdict] ?? 0) + 1;
    // A first attempt earns the retry budget when it calls, not at each claim: a claim that waits
    // for a slot or the create pace and comes back would otherwise count twice.
    if (attemptNo === 1) s.budget.recordRequest();
    if (verdict === 'success') s.breaker.onSuccess(ticket);
    else s.breaker.onFailure(ticket);
    // A retry the provider accepted refills the budget: after an outage the backlog drains at
    // the provider's pace instead of the budget's trickle, while failing retries still cannot.
    if (attemptNo > 1 && outcome.kind === 'accepted') s.budget.refund();
  }
}
