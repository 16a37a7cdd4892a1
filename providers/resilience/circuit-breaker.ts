// A three-state circuit breaker per provider (docs/design.md §6): closed → open when the failure rate
// over a sliding window passes a threshold (with a minimum of requests); open → half-open after
// a cool-down; half-open lets a few probes through at once and closes after enough consecutive
// successes, or re-opens on a failure. After closing it recovers gradually: the share of calls
// it admits ramps from `recoveryStartShare` to 1 over `recoveryMs`, so a provider that just came
// back is not hit by the whole backlog at once. An operator setting (stored in Postgres by the
// caller) can force it open or closed, and a strict setting (the DEGRADED_PROVIDER mode) trips
// it at a lower failure rate and sends no half-open probes while it holds. Pure logic with an injected clock: the caller decides
// what counts as a failure (timeouts, 5xx, unknown outcomes — not a 4xx about our own input).

export type BreakerState = 'closed' | 'open' | 'half-open';
/** The operator's switch: null = automatic. */
export type BreakerForce = 'open' | 'closed' | null;

/** The breaker's settings when a caller gives none (ProviderGuard gives none: these are the product's). */
export const CIRCUIT_BREAKER_DEFAULTS = {
  windowMs: 30_000,
  buckets: 10,
  minimumRequests: 20,
  failureRateThreshold: 0.5,
  openMs: 30_000,
  halfOpenMaxProbes: 2,
  halfOpenSuccesses: 3,
  recoveryMs: 60_000,
  recoveryStartShare: 0.2,
} as const;

export interface CircuitBreakerOptions {
  /** Sliding window of the failure rate, ms (default 30 s) in `buckets` buckets (default 10). */
  readonly windowMs?: number;
  readonly buckets?: number;
  /** No trip below this many calls in the window (default 20). */
  readonly minimumRequests?: number;
  /** Trip at or above this failure share (default 0.5). */
  readonly failureRateThreshold?: number;
  /** How long it stays open before probing, ms (default 30 s). */
  readonly openMs?: number;
  /** Probes allowed in flight at once while half-open (default 2). */
  readonly halfOpenMaxProbes?: number;
  /** Consecutive probe successes that close it (default 3). */
  readonly halfOpenSuccesses?: number;
  /** A probe that never reports frees its place after this long, ms (default openMs). */
  readonly probeTimeoutMs?: number;
  /** Gradual recovery after closing: ramp duration (default 60 s) and starting share (default 0.2). */
  readonly recoveryMs?: number;
  readonly recoveryStartShare?: number;
  readonly now: () => number;
  /** Random source for the recovery ramp's admission (default Math.random). */
  readonly random?: () => number;
  /** Called on every state change (metrics, logs). */
  readonly onStateChange?: (from: BreakerState, to: BreakerState) => void;
}

/** Handed out by tryAcquire; give it back to onSuccess / onFailure. */
export interface BreakerTicket {
  readonly probe: boolean;
  readonly generation: number;
  readonly at: number;
}

export type BreakerDecision =
  | { readonly allowed: true; readonly ticket: BreakerTicket }
  | {
      readonly allowed: false;
      readonly reason: 'open' | 'forced-open' | 'probes-busy' | 'recovering' | 'strict';
      /** When it is worth asking again (ms from now). */
      readonly retryAfterMs: number;
    };

export interface BreakerSnapshot {
  readonly state: BreakerState;
  readonly forced: BreakerForce;
  /** The strict trip threshold in force (DEGRADED_PROVIDER), or null. */
  readonly strict: number | null;
  readonly requests: number;
  readonly failures: number;
  readonly failureRate: number;
  /** Share of calls admitted now (1 when closed and recovered, 0 when open). */
  readonly admittedShare: number;
  readonly openUntil: number | null;
}

export class CircuitBreaker {
  private stateValue: BreakerState = 'closed';
  private forced: BreakerForce = null;
  private strictThreshold: number | null = null;
  private generation = 0;
  private openedAt = 0;
  private closedAt = Number.NEGATIVE_INFINITY;
  private probes: number[] = [];
  private probeSuccesses = 0;
  private readonly counts: { start: number; ok: number; fail: number }[] = [];
  private readonly o: Required<Omit<CircuitBreakerOptions, 'onStateChange' | 'random' | 'probeTimeoutMs'>> & {
    probeTimeoutMs: number;
    random: () => number;
    onStateChange?: (from: BreakerState, to: BreakerState) => void;
  };

  constructor(opts: CircuitBreakerOptions) {
    const d = CIRCUIT_BREAKER_DEFAULTS;
    const openMs = opts.openMs ?? d.openMs;
    this.o = {
      windowMs: opts.windowMs ?? d.windowMs,
      buckets: opts.buckets ?? d.buckets,
      minimumRequests: opts.minimumRequests ?? d.minimumRequests,
      failureRateThreshold: opts.failureRateThreshold ?? d.failureRateThreshold,
      openMs,
      halfOpenMaxProbes: opts.halfOpenMaxProbes ?? d.halfOpenMaxProbes,
      halfOpenSuccesses: opts.halfOpenSuccesses ?? d.halfOpenSuccesses,
      probeTimeoutMs: opts.probeTimeoutMs ?? openMs,
      recoveryMs: opts.recoveryMs ?? d.recoveryMs,
      recoveryStartShare: opts.recoveryStartShare ?? d.recoveryStartShare,
      now: opts.now,
      random: opts.random ?? Math.random,
      ...(opts.onStateChange ? { onStateChange: opts.onStateChange } : {}),
    };
  }

  /** The effective state (an elapsed cool-down turns open into half-open; the operator's switch wins). */
  get state(): BreakerState {
    if (this.forced === 'open') return 'open';
    if (this.forced === 'closed') return 'closed';
    if (this.stateValue === 'open' && this.o.now() - this.openedAt >= this.o.openMs) this.transition('half-open');
    return this.stateValue;
  }

  /** Apply the operator's switch (read from Postgres by the caller). Clearing it resumes automatic control. */
  setForced(force: BreakerForce): void {
    if (force === this.forced) return;
    const before = this.state;
    this.forced = force;
    if (force === null && before !== this.stateValue) this.o.onStateChange?.(before, this.state);
    else if (force !== null && before !== this.state) this.o.onStateChange?.(before, this.state);
  }

  /**
   * Strict while the DEGRADED_PROVIDER mode holds (set by the caller before each tryAcquire):
   * trip at `failureRateThreshold` (when lower than the usual one), and no half-open probes —
   * a tripped provider stays closed to new calls until the strict setting is lifted (null).
   */
  setStrict(failureRateThreshold: number | null): void {
    this.strictThreshold = failureRateThreshold;
    if (failureRateThreshold !== null && this.forced === null && this.stateValue === 'closed') this.tripIfUnhealthy();
  }

  tryAcquire(): BreakerDecision {
    const now = this.o.now();
    const state = this.state;
    if (this.forced === 'open') return { allowed: false, reason: 'forced-open', retryAfterMs: this.o.openMs };
    if (this.forced === 'closed') return this.admit(false, now);
    if (this.strictThreshold !== null && state !== 'closed') return { allowed: false, reason: 'strict', retryAfterMs: 5_000 };
    if (state === 'open') return { allowed: false, reason: 'open', retryAfterMs: Math.max(0, this.openedAt + this.o.openMs - now) };
    if (state === 'half-open') {
      this.probes = this.probes.filter((t) => now - t < this.o.probeTimeoutMs);
      if (this.probes.length >= this.o.halfOpenMaxProbes) return { allowed: false, reason: 'probes-busy', retryAfterMs: 1_000 };
      this.probes.push(now);
      return this.admit(true, now);
    }
    const share = this.admittedShare(now);
    if (share < 1 && this.o.random() >= share) return { allowed: false, reason: 'recovering', retryAfterMs: 1_000 };
    return this.admit(false, now);
  }

  /**
   * Gives back a ticket whose call never happened (the caller was stopped by something else,
   * e.g. a full bulkhead): frees a probe slot and records nothing, success or failure.
   */
  release(ticket: BreakerTicket): void {
    if (ticket.probe && ticket.generation === this.generation) this.dropProbe(ticket);
  }

  onSuccess(ticket: BreakerTicket): void {
    this.record(true);
    if (!ticket.probe || ticket.generation !== this.generation || this.stateValue !== 'half-open') return;
    this.dropProbe(ticket);
    this.probeSuccesses++;
    if (this.probeSuccesses >= this.o.halfOpenSuccesses) this.transition('closed');
  }

  onFailure(ticket: BreakerTicket): void {
    this.record(false);
    if (this.forced !== null) return;
    if (ticket.probe && ticket.generation === this.generation && this.stateValue === 'half-open') {
      this.transition('open');
      return;
    }
    if (this.stateValue !== 'closed') return;
    this.tripIfUnhealthy();
  }

  snapshot(): BreakerSnapshot {
    const now = this.o.now();
    const state = this.state;
    const { requests, failures } = this.window();
    const admittedShare = state === 'open' ? 0 : state === 'half-open' ? 0 : this.forced === 'closed' ? 1 : this.admittedShare(now);
    return {
      state,
      forced: this.forced,
      strict: this.strictThreshold,
      requests,
      failures,
      failureRate: requests === 0 ? 0 : failures / requests,
      admittedShare,
      openUntil: state === 'open' && this.forced === null ? this.openedAt + this.o.openMs : null,
    };
  }

  private tripIfUnhealthy(): void {
    const { requests, failures } = this.window();
    const threshold = Math.min(this.o.failureRateThreshold, this.strictThreshold ?? 1);
    if (requests >= this.o.minimumRequests && failures / requests >= threshold) this.transition('open');
  }

  private admit(probe: boolean, at: number): BreakerDecision {
    // `at` is the instant stored in `probes`: dropProbe finds the slot by it.
    return { allowed: true, ticket: { probe, generation: this.generation, at } };
  }

  private admittedShare(now: number): number {
    const elapsed = now - this.closedAt;
    if (elapsed >= this.o.recoveryMs) return 1;
    const s = this.o.recoveryStartShare;
    return s + ((1 - s) * Math.max(0, elapsed)) / this.o.recoveryMs;
  }

  private dropProbe(ticket: BreakerTicket): void {
    const i = this.probes.indexOf(ticket.at);
    if (i >= 0) this.probes.splice(i, 1);
  }

  private transition(to: BreakerState): void {
    const from = this.stateValue;
    if (from === to) return;
    this.stateValue = to;
    this.generation++;
    this.probes = [];
    this.probeSuccesses = 0;
    const now = this.o.now();
    if (to === 'open') this.openedAt = now;
    if (to === 'closed') {
      this.closedAt = now;
      this.counts.length = 0; // a fresh window: old failures must not re-trip a recovered provider
    }
    this.o.onStateChange?.(from, to);
  }

  private record(ok: boolean): void {
    const now = this.o.now();
    const size = this.o.windowMs / this.o.buckets;
    const start = Math.floor(now / size) * size;
    let last = this.counts[this.counts.length - 1];
    if (!last || last.start !== start) {
      last = { start, ok: 0, fail: 0 };
      this.counts.push(last);
    }
    if (ok) last.ok++;
    else last.fail++;
    while (this.counts.length > 0 && (this.counts[0] as { start: number }).start <= now - this.o.windowMs) this.counts.shift();
  }

  private window(): { requests: number; failures: number } {
    const now = this.o.now();
    let ok = 0;
    let fail = 0;
    for (const b of this.counts) {
      if (b.start <= now - this.o.windowMs) continue;
      ok += b.ok;
      fail += b.fail;
    }
    return { requests: ok + fail, failures: fail };
  }
}
