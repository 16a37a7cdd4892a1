// Latency figures: an append-only sample of milliseconds, summarised with nearest-rank
// percentiles (no interpolation, so p99 of 100 samples is the 99th value, a real observation).

export class Samples {
  private data = new Float64Array(1024);
  private n = 0;

  add(ms: number): void {
    if (this.n === this.data.length) {
      const bigger = new Float64Array(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    this.data[this.n++] = ms;
  }

  get count(): number {
    return this.n;
  }

  /** A sorted copy of the samples. */
  sorted(): Float64Array {
    return this.data.slice(0, this.n).sort();
  }

  summary(): LatencySummary {
    return summarize(this.sorted());
  }
}

export interface LatencySummary {
  readonly count: number;
  readonly mean: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
}

/** Nearest-rank percentile of an ascending array; NaN when empty. */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function summarize(sorted: ArrayLike<number>): LatencySummary {
  let sum = 0;
  for (let i = 0; i < sorted.length; i++) sum += sorted[i]!;
  return {
    count: sorted.length,
    mean: sorted.length ? sum / sorted.length : Number.NaN,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted.length ? sorted[sorted.length - 1]! : Number.NaN,
  };
}

/** Sorts numbers ascending (numeric, unlike Array#sort's default). */
export function sortNumbers(values: Iterable<number>): Float64Array {
  return Float64Array.from(values).sort();
}

/** Rounds to `digits` decimals (for tables and JSON). */
export function round(x: number, digits = 1): number {
  if (!Number.isFinite(x)) return x;
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** a / b, or NaN when b is not a positive number. */
export function ratio(a: number, b: number): number {
  return b > 0 && Number.isFinite(a) ? a / b : Number.NaN;
}
