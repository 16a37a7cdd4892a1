// Backoff and jitter. Pure: the random source is a parameter (Math.random in activities,
// the workflow's deterministic Math.random inside the sandbox, a fixed sequence in tests).

export type RandomSource = () => number;

/** "Full jitter" exponential backoff: uniform in [0, min(cap, base·2^n)). n starts at 0. */
export function fullJitterDelay(n: number, baseMs: number, capMs: number, random: RandomSource): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.max(0, n));
  return Math.floor(random() * ceiling);
}

/**
 * The next poll interval: the previous one doubled, capped, with ±20 % jitter so that many
 * tasks submitted together do not poll in lockstep.
 */
export function nextPollInterval(previousMs: number | null, initialMs: number, maxMs: number, random: RandomSource): number {
  const base = previousMs === null ? initialMs : Math.min(maxMs, Math.max(initialMs, previousMs * 2));
  const jitter = 0.8 + random() * 0.4;
  return Math.max(1, Math.min(maxMs, Math.round(base * jitter)));
}

/** Parses an HTTP Retry-After value (seconds or an HTTP date) into milliseconds from `now`. */
export function parseRetryAfter(value: string | null | undefined, now: Date): number | null {
  if (!value) return null;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  if (Number.isNaN(at)) return null;
  return Math.max(0, at - now.getTime());
}
