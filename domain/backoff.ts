// Backoff and jitter. Pure: the random source is a parameter (Math.random in activities,
// the workflow's deterministic Math.random inside the sandbox, a fixed sequence in tests).

export type RandomSource = () => number;

/** "Full jitter" exponential backoff: uniform in [0, min(cap, base·2^n)). n starts at 0. */
export function fullJitterDelay(n: number, baseMs: number, capMs: number, random: RandomSource): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.max(0, n));
  return Math.floor(random() * ceiling);
}

/**
 * A retry delay of `ms` plus up to half again, so that the many steps told to wait the same
 * time (a paused mode, a fence change, a provider guard's refusal) do not all return at once.
 */
export function plusUpToHalf(ms: number, random: RandomSource): number {
  return Math.round(ms * (1 + random() / 2));
}

/**
 * The next poll interval: the previous one doubled, capped, with ±20 % jitter so that many
 * tasks submitted together do not poll in lockstep.
 */
export function nextPollInterval(previousMs: number | null, initialMs: number, maxMs: number, random: RandomSource): number {
  const base = previousMs === null ? initialMs : Math.min(maxMs, Math.max(initialMs, previousMs * 2));
  return pollJitter(base, maxMs, random);
}

/** A poll interval `base` with ±20 % jitter, at least 1 ms and at most `capMs`. */
function pollJitter(base: number, capMs: number, random: RandomSource): number {
  return Math.max(1, Math.min(capMs, Math.round(base * (0.8 + random() * 0.4))));
}

/**
 * What a poll waits for, which sets its pace: `waiting` for a known job to change (queued or
 * running at the provider), `cancelling` (a cancel was asked for), `reconciling` (the submit
 * outcome is unknown: the lookup searches for the job by its correlation token).
 */
export type PollPhase = 'waiting' | 'cancelling' | 'reconciling';

export interface PollPace {
  readonly initialMs: number;
  readonly maxMs: number;
  /** While the provider's callbacks are healthy, a waiting poll's interval and cap are this many times longer (≥ 1). */
  readonly healthyFactor: number;
}

/**
 * The interval until the next poll, by phase (docs/design.md §5 "Polling"): the
 * previous interval doubled, at least `initialMs`, at most `maxMs`, with ±20 % jitter. While
 * the provider's callbacks are healthy a `waiting` poll is only the safety net under a callback
 * that will most likely come first, so its interval and cap are `healthyFactor` times longer;
 * when callbacks stop being healthy the next interval drops back under `maxMs` at once.
 * `cancelling` and `reconciling` polls are never stretched: some providers do not call back on
 * a cancel, and a job we cannot find yet sends no callback we could count on, while the
 * unknown-outcome proof and deadline (docs/timeouts.md) depend on the lookups happening.
 */
export function pollInterval(previousMs: number | null, phase: PollPhase, callbacksHealthy: boolean, pace: PollPace, random: RandomSource): number {
  const factor = phase === 'waiting' && callbacksHealthy ? Math.max(1, pace.healthyFactor) : 1;
  const floor = pace.initialMs * factor;
  const cap = Math.max(floor, pace.maxMs * factor);
  const base = previousMs === null ? floor : Math.min(cap, Math.max(floor, previousMs * 2));
  return pollJitter(base, cap, random);
}

/**
 * An interval raised to the demand floor (activities/poll-demand.ts) when the floor is longer,
 * with ±10 % jitter so that jobs stretched together do not come due together.
 */
export function withDemandFloor(intervalMs: number, floorMs: number, random: RandomSource): number {
  if (floorMs <= intervalMs) return intervalMs;
  return Math.round(floorMs * (0.9 + random() * 0.2));
}
