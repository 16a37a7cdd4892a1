// Hedged reads (docs/design.md §6): for an idempotent read only, when the first request is slower than
// the provider's observed p95, send one more and take whichever answers first. Never more than
// one hedge, never for a request that creates anything.

/** Keeps the last `size` latencies of one provider's reads. */
export class LatencyWindow {
  private readonly samples: number[] = [];
  constructor(
    private readonly size = 200,
    private readonly minSamples = 20,
  ) {}

  record(ms: number): void {
    this.samples.push(ms);
    if (this.samples.length > this.size) this.samples.shift();
  }

  /** The 95th percentile, or null until enough samples exist to trust it. */
  p95(): number | null {
    if (this.samples.length < this.minSamples) return null;
    const sorted = [...this.samples].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.95) - 1)] ?? null;
  }
}

export interface HedgedResult<T> {
  readonly value: T;
  /** Whether a second request was sent. */
  readonly hedged: boolean;
  /** Which request answered: 0 the first, 1 the hedge. */
  readonly winner: 0 | 1;
}

/**
 * Runs `read`; if it has not settled after `hedgeAfterMs` (null: never hedge), runs it once
 * more and resolves with the first success. The loser is aborted. Rejects only when every
 * request sent has failed (with the first request's error).
 */
export function hedgedRead<T>(read: (signal: AbortSignal) => Promise<T>, hedgeAfterMs: number | null, parent?: AbortSignal): Promise<HedgedResult<T>> {
  return new Promise((resolve, reject) => {
    const controllers: AbortController[] = [];
    let settled = false;
    let failed = 0;
    let firstError: unknown;
    let timer: NodeJS.Timeout | undefined;
    const onParentAbort = () => controllers.forEach((c) => c.abort(parent?.reason));
    parent?.addEventListener('abort', onParentAbort, { once: true });
    const finish = () => {
      settled = true;
      clearTimeout(timer);
      parent?.removeEventListener('abort', onParentAbort);
    };
    const launch = (index: 0 | 1) => {
      const controller = new AbortController();
      controllers.push(controller);
      read(parent ? AbortSignal.any([controller.signal, parent]) : controller.signal).then(
        (value) => {
          if (settled) return;
          finish();
          controllers.forEach((c) => c !== controller && c.abort(new Error('the other request answered first')));
          resolve({ value, hedged: controllers.length > 1, winner: index });
        },
        (err: unknown) => {
          if (settled) return;
          failed += 1;
          if (failed === 1) firstError = err;
          // A first request that fails before the hedge is due is not hedged: the caller retries.
          if (failed === controllers.length) {
            finish();
            reject(firstError);
          }
        },
      );
    };
    launch(0);
    if (hedgeAfterMs !== null) {
      timer = setTimeout(() => {
        if (!settled) launch(1);
      }, hedgeAfterMs);
    }
  });
}
