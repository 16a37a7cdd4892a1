// When to retry a call that was rejected before acceptance (docs/design.md §6): full-jitter
// exponential backoff, never sooner than the provider's Retry-After, and never past the
// deadline set at the edge (a retry that cannot finish in time is not worth starting).
import { fullJitterDelay, type RandomSource } from '../../domain/backoff';

export interface RetryDelayInput {
  /** 0 for the first retry. */
  readonly retry: number;
  readonly baseMs: number;
  readonly capMs: number;
  /** The provider's Retry-After, in ms, when it sent one. */
  readonly retryAfterMs?: number | null;
  readonly random: RandomSource;
}

/**
 * Full jitter in [0, min(cap, base·2^n)); with a Retry-After the delay is at least that long
 * (plus up to one base of jitter so clients told the same moment do not return together).
 */
export function retryDelay(i: RetryDelayInput): number {
  const jitter = fullJitterDelay(i.retry, i.baseMs, i.capMs, i.random);
  if (i.retryAfterMs === null || i.retryAfterMs === undefined) return jitter;
  return Math.max(i.retryAfterMs + Math.floor(i.random() * i.baseMs), jitter);
}

export type RetryVerdict =
  | { readonly retry: true; readonly delayMs: number }
  | { readonly retry: false; readonly reason: 'not-retryable' | 'attempts-exhausted' | 'deadline' | 'budget' };

export interface RetryPlanInput extends RetryDelayInput {
  /** Only rejected-before-acceptance outcomes are retried; an unknown outcome never is. */
  readonly retryable: boolean;
  readonly maxRetries: number;
  /** Absolute deadline (ms since epoch) from the edge, and the time now. */
  readonly deadlineAt: number | null;
  readonly now: number;
  /** Expected duration of the retried call itself, ms (it must also fit before the deadline). */
  readonly callMs?: number;
  /** Takes a token from the retry budget (called last, only when everything else allows a retry). */
  readonly takeBudget?: () => boolean;
}

/** Decides one retry: retryable, attempts left, fits before the deadline, and the budget agrees. */
export function planRetry(i: RetryPlanInput): RetryVerdict {
  if (!i.retryable) return { retry: false, reason: 'not-retryable' };
  if (i.retry >= i.maxRetries) return { retry: false, reason: 'attempts-exhausted' };
  const delayMs = retryDelay(i);
  if (i.deadlineAt !== null && i.now + delayMs + (i.callMs ?? 0) >= i.deadlineAt) return { retry: false, reason: 'deadline' };
  if (i.takeBudget && !i.takeBudget()) return { retry: false, reason: 'budget' };
  return { retry: true, delayMs };
}
