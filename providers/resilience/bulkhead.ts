// A bulkhead per provider (and per provider account): a global in-flight ceiling counted from
// attempt facts (SUBMITTING / SUBMITTED / RUNNING in Postgres), so it survives restarts and a
// lost cache is rebuilt from the facts. After a rebuild the ceiling ramps up slowly instead of
// jumping to the limit (docs/design.md §6: never refill a semaphore at once — the provider's real
// concurrency may already be in use by attempts we cannot see yet).
//
// Across processes the count-and-claim must be atomic: the caller runs `acquire` while holding a
// per-provider row lock (SELECT … FOR UPDATE) in the transaction that moves the attempt to
// SUBMITTING. Within one process, reservations cover the gap between counting and claiming.

export interface RampOptions {
  /** Ceiling right after a rebuild, as a share of the limit (default 0.2, at least 1 slot). */
  readonly startShare?: number;
  /** Time to reach the full limit, ms (default 60 s; 0 = no ramp). */
  readonly durationMs?: number;
  /** The ceiling never ramps below this many slots (default 1; never above the limit). */
  readonly minSlots?: number;
}

/** The ceiling at `now`, given the limit and when the count was last rebuilt (null = never: full limit). */
export function allowedSlots(limit: number, rebuiltAt: number | null, now: number, ramp: RampOptions = {}): number {
  if (limit <= 0) return 0;
  if (rebuiltAt === null) return limit;
  const duration = ramp.durationMs ?? 60_000;
  const elapsed = Math.max(0, now - rebuiltAt);
  if (elapsed >= duration) return limit;
  const start = ramp.startShare ?? 0.2;
  const share = start + ((1 - start) * elapsed) / duration;
  const floor = Math.min(limit, Math.max(1, ramp.minSlots ?? 1));
  return Math.max(floor, Math.min(limit, Math.floor(limit * share)));
}

export interface BulkheadOptions {
  /** In-flight limit (the provider's capabilities.maxConcurrency, or an account's share of it). */
  readonly limit: number;
  /** Attempts in flight according to the facts. */
  readonly inFlight: () => Promise<number> | number;
  readonly now: () => number;
  readonly ramp?: RampOptions;
}

export type BulkheadDecision =
  { readonly admitted: true; readonly release: () => void } | { readonly admitted: false; readonly inFlight: number; readonly allowed: number };

export class Bulkhead {
  private rebuiltAt: number | null = null;
  private reserved = 0;
  private queue: Promise<void> = Promise.resolve();
  /** Rejections so far (metrics). */
  rejected = 0;

  constructor(private readonly opts: BulkheadOptions) {}

  /** The local count was lost and rebuilt from facts: ramp up from here. */
  markRebuilt(at: number = this.opts.now()): void {
    this.rebuiltAt = at;
  }

  allowed(): number {
    return allowedSlots(this.opts.limit, this.rebuiltAt, this.opts.now(), this.opts.ramp);
  }

  /**
   * Takes a slot when the facts (plus this process's reservations not yet visible in them)
   * leave room under the ceiling. Call `release` once the attempt's state is committed (it
   * is then counted by the facts) or when the submit was abandoned.
   */
  async acquire(): Promise<BulkheadDecision> {
    // One decision at a time in this process: count, compare and reserve without interleaving.
    const turn = this.queue.then(() => this.decide());
    this.queue = turn.then(
      () => undefined,
      () => undefined,
    );
    return turn;
  }

  private async decide(): Promise<BulkheadDecision> {
    const counted = await this.opts.inFlight();
    const allowed = this.allowed();
    if (counted + this.reserved >= allowed) {
      this.rejected++;
      return { admitted: false, inFlight: counted + this.reserved, allowed };
    }
    this.reserved++;
    let released = false;
    return {
      admitted: true,
      release: () => {
        if (released) return;
        released = true;
        this.reserved--;
      },
    };
  }
}
