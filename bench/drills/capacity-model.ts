// The capacity model (docs/design.md §10): a backlog B served at rate μ while work keeps
// arriving at rate λ drains in B / (μ − λ), and never when μ ≤ λ. Pure: the temporal-outage
// drill and the drain benchmark feed it samples they measured.

export interface DrainFigures {
  /** Backlog when the service came back. */
  readonly backlog: number;
  /** Service rate: the best sustained over a window of the drain (per second). */
  readonly mu: number;
  /** Arrival rate during the drain (per second). */
  readonly lambda: number;
  /** B / (μ − λ) in seconds; null when μ ≤ λ (the model says it never drains). */
  readonly predictedSeconds: number | null;
  /** Seconds from the restart until the backlog was gone; null when it was not. */
  readonly measuredSeconds: number | null;
}

/** One sample of a drain: seconds since the restart and a cumulative count (e.g. rows published). */
export interface DrainSample {
  readonly t: number;
  readonly done: number;
}

/**
 * μ as the best rate sustained over any `windowSeconds` of the samples that end by `endSeconds`:
 * what the system does once warm (the first seconds after a restart are reconnects and cold
 * caches, and the tail has too little work left to show the rate). 0 with fewer than a window.
 */
export function peakRate(samples: readonly DrainSample[], windowSeconds: number, endSeconds = Infinity): number {
  let best = 0;
  for (const s0 of samples) {
    const later = samples.find((s) => s.t >= s0.t + windowSeconds && s.t <= endSeconds);
    if (later) best = Math.max(best, (later.done - s0.done) / (later.t - s0.t));
  }
  return best;
}

/** B / (μ − λ), or null when the backlog cannot drain (μ ≤ λ). */
export function predictedDrainSeconds(backlog: number, mu: number, lambda: number): number | null {
  if (backlog <= 0) return 0;
  return mu > lambda ? backlog / (mu - lambda) : null;
}

export function drainFigures(backlog: number, mu: number, lambda: number, measuredSeconds: number | null): DrainFigures {
  return { backlog, mu, lambda, predictedSeconds: predictedDrainSeconds(backlog, mu, lambda), measuredSeconds };
}

/** Measured / predicted drain time: 1 = the model held; null when either is missing. */
export function drainRatio(d: DrainFigures): number | null {
  if (d.measuredSeconds === null || d.predictedSeconds === null || d.predictedSeconds === 0) return null;
  return d.measuredSeconds / d.predictedSeconds;
}
