// Replicate's documented account limits (https://replicate.com/docs/topics/predictions/rate-limits):
// creating predictions at 600 requests a minute, every other endpoint at 3,000 a minute, "short
// bursts of requests above the default rate limits" tolerated, and over them a 429 whose body is
// `{"detail":"Request was throttled. Your rate limit resets in ~30s."}` (no Retry-After header is
// documented). The simulator enforces them so that a client which would be throttled by the real
// account is throttled here too. How long a burst may run is not published: BURST_SECONDS is our
// choice (a bucket holding that many seconds of the rate), and the other providers publish no
// request rate at all, so the simulator enforces none for them (docs/providers.md).

export interface ReplicateRateLimits {
  /** POST /v1/predictions and POST /v1/models/{owner}/{name}/predictions, requests a minute. */
  readonly createPerMinute: number;
  /** Every other /v1 endpoint (reads, listings, cancels), requests a minute. */
  readonly otherPerMinute: number;
  /** How many seconds of the rate a burst may use up before requests are throttled (undocumented). */
  readonly burstSeconds: number;
}

const BURST_SECONDS = 10;

export const REPLICATE_DOCUMENTED_LIMITS: ReplicateRateLimits = { createPerMinute: 600, otherPerMinute: 3_000, burstSeconds: BURST_SECONDS };

/** `off`, or `creates,others` a minute (SIMULATOR_REPLICATE_RATE_LIMITS). */
export function replicateLimitsFromSetting(setting: string): ReplicateRateLimits | false {
  if (setting === 'off') return false;
  const m = /^([1-9]\d*),([1-9]\d*)$/.exec(setting);
  if (!m) throw new Error(`replicate rate limits: expected "off" or "creates,others" a minute, got ${JSON.stringify(setting)}`);
  return { createPerMinute: Number(m[1]), otherPerMinute: Number(m[2]), burstSeconds: BURST_SECONDS };
}

export type ReplicateRequestClass = 'create' | 'other';
/** Requests throttled, per class. */
export type ThrottleCounts = Record<ReplicateRequestClass, number>;

/** One token bucket: refills at `perMinute`, holds `burstSeconds` of it. */
class Bucket {
  private tokens: number;
  private at: number;
  private readonly perMs: number;
  private readonly capacity: number;

  constructor(perMinute: number, burstSeconds: number, now: number) {
    this.perMs = perMinute / 60_000;
    this.capacity = Math.max(1, this.perMs * burstSeconds * 1_000);
    this.tokens = this.capacity;
    this.at = now;
  }

  /** Takes one token; when there is none, the milliseconds until there will be one. */
  take(now: number): number | null {
    this.tokens = Math.min(this.capacity, this.tokens + (now - this.at) * this.perMs);
    this.at = now;
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return null;
    }
    return (1 - this.tokens) / this.perMs;
  }

  refill(now: number): void {
    this.tokens = this.capacity;
    this.at = now;
  }
}

export class ReplicateRateLimiter {
  private readonly buckets: Record<ReplicateRequestClass, Bucket>;
  private readonly counts: ThrottleCounts = { create: 0, other: 0 };

  constructor(
    limits: ReplicateRateLimits,
    private readonly now: () => number = Date.now,
  ) {
    const t = now();
    this.buckets = {
      create: new Bucket(limits.createPerMinute, limits.burstSeconds, t),
      other: new Bucket(limits.otherPerMinute, limits.burstSeconds, t),
    };
  }

  /** Null when the request may pass; otherwise the documented throttle detail. */
  check(kind: ReplicateRequestClass): string | null {
    const waitMs = this.buckets[kind].take(this.now());
    if (waitMs === null) return null;
    this.counts[kind] += 1;
    return `Request was throttled. Your rate limit resets in ~${Math.max(1, Math.ceil(waitMs / 1_000))}s.`;
  }

  /** Requests throttled so far, per class. */
  throttled(): ThrottleCounts {
    return { ...this.counts };
  }

  /** Full buckets and zero counts (the simulator's reset). */
  reset(): void {
    const t = this.now();
    this.buckets.create.refill(t);
    this.buckets.other.refill(t);
    this.counts.create = 0;
    this.counts.other = 0;
  }
}
