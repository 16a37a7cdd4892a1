// What a provider says about a running job's progress, in one shape for every provider
// (docs/events.md "Progress"). Each field is filled only where the provider's API gives it:
// Runway's task `progress` (0..1), fal's queue status `queue_position` and `logs`, Replicate's
// prediction `logs`. Pure: the adapters build it, apply-inbox stores it on the attempt.

/** The last lines of a provider's logs we keep and show: enough to see what the model is doing. */
export const PROGRESS_LOG_MAX_CHARS = 2_000;

export interface ProviderProgress {
  /** Fraction done, 0..1 (Runway `progress`); null when the provider does not say. */
  readonly fraction: number | null;
  /** Place in the provider's queue, 0 = next (fal `queue_position`); null when not queued or not said. */
  readonly queue_position: number | null;
  /** The tail of the provider's logs (fal `logs[].message` lines, Replicate `logs`); null when none. */
  readonly logs: string | null;
}

/** The tail of `text` within PROGRESS_LOG_MAX_CHARS, cut at a line start when it can be. */
export function logTail(text: string | null | undefined): string | null {
  if (!text) return null;
  const trimmed = text.replace(/\s+$/, '');
  if (trimmed.length === 0) return null;
  if (trimmed.length <= PROGRESS_LOG_MAX_CHARS) return trimmed;
  const tail = trimmed.slice(-PROGRESS_LOG_MAX_CHARS);
  const nl = tail.indexOf('\n');
  return nl >= 0 && nl < tail.length - 1 ? tail.slice(nl + 1) : tail;
}

/** A progress from what the provider said, or null when it said nothing worth showing. */
export function providerProgress(p: { fraction?: number | null; queuePosition?: number | null; logs?: string | null }): ProviderProgress | null {
  const fraction = typeof p.fraction === 'number' && Number.isFinite(p.fraction) ? Math.min(1, Math.max(0, p.fraction)) : null;
  const queue = typeof p.queuePosition === 'number' && Number.isInteger(p.queuePosition) && p.queuePosition >= 0 ? p.queuePosition : null;
  const logs = logTail(p.logs);
  if (fraction === null && queue === null && logs === null) return null;
  return { fraction, queue_position: queue, logs };
}
