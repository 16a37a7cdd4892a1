// A provider's allowance of creates for a period (Runway: each tier's generations a day per model,
// a 429 on create when spent) and when to ask again (docs/decisions/0070). Pure: the clock is a
// parameter.

const DAY_MS = 86_400_000;

/** The next UTC midnight strictly after `now`. */
export function nextUtcMidnight(now: Date): Date {
  return new Date((Math.floor(now.getTime() / DAY_MS) + 1) * DAY_MS);
}

/**
 * When a spent allowance is worth asking about again: the provider's own `Retry-After` when its
 * answer carries one; otherwise the next UTC midnight, but never later than `recheckMs` from now.
 * Runway documents "generations in a 24-hour window" and no reset moment, so a window that rolls
 * frees room before midnight: one create (the probe) finds out every `recheckMs` at most.
 */
export function capResetAt(now: Date, retryAfterMs: number | null, recheckMs: number): Date {
  if (retryAfterMs !== null && retryAfterMs > 0) return new Date(now.getTime() + retryAfterMs);
  return new Date(Math.min(nextUtcMidnight(now).getTime(), now.getTime() + recheckMs));
}

/**
 * How long a claim that found the allowance spent sleeps: until the reset, but not past the moment a
 * call could no longer finish by the task's deadline (its next claim then fails it
 * DEADLINE_EXCEEDED), and at least a second.
 */
export function capWaitMs(now: Date, cappedUntil: Date, deadlineAt: Date | null, callTimeoutMs: number): number {
  const untilReset = cappedUntil.getTime() - now.getTime();
  const untilDeadline = deadlineAt ? deadlineAt.getTime() - callTimeoutMs - now.getTime() + 50 : Number.POSITIVE_INFINITY;
  return Math.max(1_000, Math.ceil(Math.min(untilReset, untilDeadline)));
}
