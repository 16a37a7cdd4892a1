// A closed-loop load generator: `concurrency` lanes, each sending its next request as soon as
// the previous one finished. Requests completing during the warm-up are not counted; the
// measured window is the `durationMs` after it. Bounded in time (warm-up + duration) and in
// count (maxRequests). Prints one progress line a second.
import { Samples, round, sortNumbers, percentile, type LatencySummary } from './stats';

export interface RequestOutcome {
  readonly ok: boolean;
  /** HTTP status or an error word ('timeout', 'ECONNRESET', …): counted per value. */
  readonly status: string;
}

export interface LoadOptions {
  readonly label: string;
  readonly concurrency: number;
  readonly warmupMs: number;
  readonly durationMs: number;
  /** Hard cap on requests started (warm-up included). */
  readonly maxRequests?: number;
  /** Sends request number `seq` (0-based, unique across lanes). */
  readonly request: (seq: number) => Promise<RequestOutcome>;
  readonly progress?: (line: string) => void;
}

export interface LoadResult {
  readonly label: string;
  readonly concurrency: number;
  /** Length of the measured window, seconds. */
  readonly seconds: number;
  readonly ok: number;
  readonly errors: number;
  /** Successful requests per second in the measured window. */
  readonly rate: number;
  /** Latency of successful requests in the window, ms. */
  readonly latency: LatencySummary;
  readonly statuses: Record<string, number>;
  readonly warmupRequests: number;
  /** Requests started in total (warm-up included). */
  readonly started: number;
}

export async function closedLoop(opts: LoadOptions): Promise<LoadResult> {
  const maxRequests = opts.maxRequests ?? 2_000_000;
  const t0 = performance.now();
  const measureFrom = t0 + opts.warmupMs;
  const measureTo = measureFrom + opts.durationMs;
  const samples = new Samples();
  const statuses: Record<string, number> = {};
  let seq = 0;
  let ok = 0;
  let errors = 0;
  let warmup = 0;
  // Per-second progress window.
  let secOk = 0;
  let secErr = 0;
  let secLat: number[] = [];

  const tick = setInterval(() => {
    const now = performance.now();
    const phase = now < measureFrom ? 'warm-up' : 'measure';
    const elapsed = ((now - t0) / 1000).toFixed(0).padStart(3);
    const s = sortNumbers(secLat);
    opts.progress?.(
      `[${opts.label}] ${elapsed}s ${phase.padEnd(7)} ${String(secOk).padStart(6)}/s  p50 ${fmt(percentile(s, 50))}  p99 ${fmt(percentile(s, 99))}  errors ${secErr}`,
    );
    secOk = 0;
    secErr = 0;
    secLat = [];
  }, 1_000);

  async function lane(): Promise<void> {
    while (seq < maxRequests && performance.now() < measureTo) {
      const mine = seq++;
      const start = performance.now();
      let outcome: RequestOutcome;
      try {
        outcome = await opts.request(mine);
      } catch (err) {
        outcome = { ok: false, status: errorWord(err) };
      }
      const end = performance.now();
      const ms = end - start;
      if (outcome.ok) {
        secOk++;
        secLat.push(ms);
      } else secErr++;
      if (end < measureFrom) {
        warmup++;
        continue;
      }
      if (end > measureTo) continue;
      statuses[outcome.status] = (statuses[outcome.status] ?? 0) + 1;
      if (outcome.ok) {
        ok++;
        samples.add(ms);
      } else errors++;
    }
  }

  try {
    await Promise.all(Array.from({ length: opts.concurrency }, () => lane()));
  } finally {
    clearInterval(tick);
  }
  const seconds = Math.min(opts.durationMs, Math.max(0, performance.now() - measureFrom)) / 1000;
  return {
    label: opts.label,
    concurrency: opts.concurrency,
    seconds: round(seconds, 2),
    ok,
    errors,
    rate: seconds > 0 ? ok / seconds : 0,
    latency: samples.summary(),
    statuses,
    warmupRequests: warmup,
    started: seq,
  };
}

function fmt(ms: number): string {
  return Number.isFinite(ms) ? `${ms.toFixed(1).padStart(6)}ms` : '     -  ';
}

function errorWord(err: unknown): string {
  const e = err as { code?: string; message?: string };
  return e.code ?? (e.message === 'timeout' ? 'timeout' : 'error');
}
