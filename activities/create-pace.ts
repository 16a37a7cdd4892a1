// What a provider's limits on creating jobs mean for a task's submits (docs/decisions/0069): the
// pace every worker's claims share (domain/create-pace.ts), and a throttle kept apart from the
// rejections that use up a task's attempts.
import { createPaceFor, type CreatePace } from '../domain/create-pace';
import type { AttemptCounts } from '../db/attempts';
import type { ProviderCapabilities, SubmitOutcome } from '../providers/types';

/** The pace of `provider`'s creates: the configured quota, else the adapter's documented one; null: not paced. */
export function createPaceOf(quotas: Readonly<Record<string, number>>, provider: string, capabilities: ProviderCapabilities): CreatePace | null {
  const quota = quotas[provider] ?? capabilities.createsPerSecond;
  return quota === undefined ? null : createPaceFor(quota);
}

/**
 * A throttle: the provider refused the create for now (HTTP 429 and retryable: Replicate's
 * documented throttle, Kling's 1302/1303, fal's and Runway's 429), not the request itself. No job
 * was created, and another attempt after the reset may be accepted.
 */
export function isThrottle(outcome: SubmitOutcome): boolean {
  return outcome.kind === 'rejected' && outcome.retryable && outcome.status === 429;
}

type AttemptLimits = { readonly maxSubmitAttempts: number; readonly maxThrottledSubmits: number };

/** Which bound these attempts have spent, if any: each kind of attempt has its own. */
export function spentBound(counts: AttemptCounts, limits: AttemptLimits): 'rejections' | 'throttles' | null {
  if (counts.counted >= limits.maxSubmitAttempts) return 'rejections';
  if (counts.throttled > limits.maxThrottledSubmits) return 'throttles';
  return null;
}

/** Whether the task may make another attempt after these. */
export const attemptsLeft = (counts: AttemptCounts, limits: AttemptLimits): boolean => spentBound(counts, limits) === null;
