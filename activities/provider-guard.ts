// Call-side resilience at the one place a provider job can be created (seed 001): the
// operator's switch, a per-process circuit breaker, and a bulkhead whose in-flight count is
// read from attempt facts under the provider's control row lock — so it holds across every
// worker process and is rebuilt from facts after any restart.
import { ApplicationFailure } from '@temporalio/common';
import { sql } from 'drizzle-orm';
import type { DbOrTx } from '../db/client';
import { providerControl } from '../db/schema';
import { FailureType } from '../domain/errors';
import { CircuitBreaker, type BreakerForce, type BreakerSnapshot, type BreakerTicket } from '../providers/resilience/circuit-breaker';
import { RetryBudget } from '../providers/resilience/retry-budget';
import type { ProviderCapabilities, SubmitOutcome } from '../providers/types';

export interface ProviderGuardOptions {
  readonly now: () => number;
  /** Breaker tuning for every provider (tests shorten it). */
  readonly breaker?: { readonly openMs?: number; readonly minimumRequests?: number; readonly failureRateThreshold?: number };
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
    nextRetryDelay: Math.max(500, Math.round(retryAfterMs * (1 + Math.random() / 2))),
  });

/** Every guard of this process, for the worker's /metrics. */
const liveGuards = new Set<ProviderGuard>();

export interface ProviderResilienceSnapshot {
  readonly breaker: BreakerSnapshot;
  readonly retriesAvailable: number;
}

/** Breaker and retry-budget state per provider across this process's guards (one per worker). */
export function resilienceSnapshots(): Record<string, ProviderResilienceSnapshot> {
  const out: Record<string, ProviderResilienceSnapshot> = {};
  for (const g of liveGuards) Object.assign(out, g.snapshots());
  return out;
}

export class ProviderGuard {
  private readonly breakers = new Map<string, CircuitBreaker>();
  private readonly budgets = new Map<string, RetryBudget>();

  budget(provider: string): RetryBudget {
    let b = this.budgets.get(provider);
    if (!b) this.budgets.set(provider, (b = new RetryBudget({ now: this.opts.now, ...(this.opts.retryBudget ?? {}) })));
    return b;
  }
  constructor(private readonly opts: ProviderGuardOptions) {
    liveGuards.add(this);
  }

  breaker(provider: string): CircuitBreaker {
    let b = this.breakers.get(provider);
    if (!b) {
      b = new CircuitBreaker({
        now: this.opts.now,
        ...(this.opts.breaker ?? {}),
        onStateChange: (from, to) => this.opts.onStateChange?.(provider, from, to),
      });
      this.breakers.set(provider, b);
    }
    return b;
  }

  snapshots(): Record<string, ProviderResilienceSnapshot> {
    return Object.fromEntries(
      [...this.breakers].map(([p, b]) => [p, { breaker: b.snapshot(), retriesAvailable: this.budget(p).snapshot().available }]),
    );
  }

  /**
   * Inside the claim transaction, before PREPARED → SUBMITTING: may this attempt call the
   * provider now? Throws a retryable ProviderUnavailable (with the delay worth waiting) if not.
   */
  async admit(tx: DbOrTx, provider: string, capabilities: ProviderCapabilities, attemptNo = 1): Promise<BreakerTicket> {
    await tx.insert(providerControl).values({ provider }).onConflictDoNothing();
    // The in-memory breaker first (cheap), then the bulkhead count under the row lock.
    const { rows } = await tx.execute(sql`SELECT breaker_force, max_in_flight FROM provider_control WHERE provider = ${provider}`);
    const control = rows[0] as { breaker_force: BreakerForce; max_in_flight: number | null } | undefined;
    const breaker = this.breaker(provider);
    breaker.setForced(control?.breaker_force ?? null);
    const decision = breaker.tryAcquire();
    if (!decision.allowed) throw unavailable(`${provider} circuit ${decision.reason}`, decision.retryAfterMs);
    const ticket = decision.ticket;
    // A later attempt is a retry: it spends the provider's retry budget, so a storm of proven
    // rejections cannot multiply the load (seed 001). Out of budget, it waits rather than fails.
    if (attemptNo > 1 && !this.budget(provider).tryRetry()) {
      breaker.release(ticket);
      throw unavailable(`${provider} retry budget spent`, 5_000);
    }
    const limit = control?.max_in_flight ?? capabilities.maxConcurrency ?? Number.POSITIVE_INFINITY;
    if (Number.isFinite(limit)) {
      await tx.execute(sql`SELECT 1 FROM provider_control WHERE provider = ${provider} FOR UPDATE`);
      const { rows: counted } = await tx.execute(sql`
        SELECT count(*)::int AS n FROM task_attempt
        WHERE provider = ${provider} AND submit_state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN')`);
      const inFlight = (counted[0] as { n: number }).n;
      if (inFlight >= limit) {
        breaker.release(ticket);
        if (attemptNo > 1) this.budget(provider).refund();
        throw unavailable(`${provider} bulkhead full: ${inFlight} of ${limit} jobs in flight`, 2_000);
      }
    }
    if (attemptNo === 1) this.budget(provider).recordRequest();
    return ticket;
  }

  report(provider: string, ticket: BreakerTicket, outcome: SubmitOutcome, attemptNo = 1): void {
    const b = this.breaker(provider);
    if (breakerVerdict(outcome) === 'success') b.onSuccess(ticket);
    else b.onFailure(ticket);
    // A retry the provider accepted refills the budget: after an outage the backlog drains at
    // the provider's pace instead of the budget's trickle, while failing retries still cannot.
    if (attemptNo > 1 && outcome.kind === 'accepted') this.budget(provider).refund();
  }
}
