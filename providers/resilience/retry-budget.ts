// A retry budget (docs/design.md §6): retries may be at most `ratio` of the first attempts seen in a
// sliding window, plus a small floor so a quiet provider can still retry at all. Unlike a
// per-call retry count, it bounds amplification when the provider fails for everyone:
// calls ≤ requests · (1 + ratio) + minRetriesPerSecond · window.

/** The budget's settings when a caller gives none (ProviderGuard gives none: these are the product's). */
export const RETRY_BUDGET_DEFAULTS = { ratio: 0.1, minRetriesPerSecond: 0.1, windowMs: 10_000, buckets: 10 } as const;

export interface RetryBudgetOptions {
  /** Share of first attempts that may be retried (default 0.1). */
  readonly ratio?: number;
  /** Retries always allowed per second of window, even with no traffic (default 0.1 = 1 per 10 s). */
  readonly minRetriesPerSecond?: number;
  /** Window over which requests earn retries, ms (default 10 s). */
  readonly windowMs?: number;
  readonly buckets?: number;
  readonly now: () => number;
}

export interface RetryBudgetSnapshot {
  readonly requests: number;
  readonly retries: number;
  /** Retries still allowed in the current window. */
  readonly available: number;
}

export class RetryBudget {
  private readonly ratio: number;
  private readonly minPerSecond: number;
  private readonly windowMs: number;
  private readonly bucketMs: number;
  private readonly bucketsList: { start: number; requests: number; retries: number }[] = [];

  constructor(private readonly opts: RetryBudgetOptions) {
    this.ratio = opts.ratio ?? RETRY_BUDGET_DEFAULTS.ratio;
    this.minPerSecond = opts.minRetriesPerSecond ?? RETRY_BUDGET_DEFAULTS.minRetriesPerSecond;
    this.windowMs = opts.windowMs ?? RETRY_BUDGET_DEFAULTS.windowMs;
    this.bucketMs = this.windowMs / (opts.buckets ?? RETRY_BUDGET_DEFAULTS.buckets);
    if (this.ratio < 0 || this.minPerSecond < 0 || this.windowMs <= 0) throw new RangeError('retry budget: invalid options');
  }

  /** Record a first attempt (not a retry): it earns `ratio` of a retry. */
  recordRequest(): void {
    this.bucket().requests++;
  }

  /** Take one retry from the budget; false means "do not retry" (fail the call or degrade). */
  tryRetry(): boolean {
    if (this.available() < 1) return false;
    this.bucket().retries++;
    return true;
  }

  /** A retry that succeeded gives its retry back: a provider that takes work again refills the budget. */
  refund(): void {
    const b = this.bucket();
    if (b.retries > 0) b.retries--;
    else b.requests += Math.ceil(1 / Math.max(this.ratio, 1e-9));
  }

  snapshot(): RetryBudgetSnapshot {
    const { requests, retries } = this.totals();
    return { requests, retries, available: Math.max(0, Math.floor(this.available())) };
  }

  private available(): number {
    const { requests, retries } = this.totals();
    return requests * this.ratio + this.minPerSecond * (this.windowMs / 1000) - retries;
  }

  private bucket() {
    const now = this.opts.now();
    const start = Math.floor(now / this.bucketMs) * this.bucketMs;
    let last = this.bucketsList[this.bucketsList.length - 1];
    if (!last || last.start !== start) {
      last = { start, requests: 0, retries: 0 };
      this.bucketsList.push(last);
    }
    this.prune(now);
    return last;
  }

  private prune(now: number): void {
    while (this.bucketsList.length > 0 && (this.bucketsList[0] as { start: number }).start <= now - this.windowMs) this.bucketsList.shift();
  }

  private totals(): { requests: number; retries: number } {
    this.prune(this.opts.now());
    let requests = 0;
    let retries = 0;
    for (const b of this.bucketsList) {
      requests += b.requests;
      retries += b.retries;
    }
    return { requests, retries };
  }
}
