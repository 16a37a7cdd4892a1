// A capability of providers whose completed results stay readable only for a while (fal keeps a
// result 1 hour after completion, 6 minutes when it is 10 KB or more: docs/providers.md). It
// caps the poll schedule (activities/poll-provider.ts) by ProviderCapabilities.resultRetentionMs.
import type { ProviderCapabilities } from './types';

/** The longest poll interval is this share of the result retention (a quarter: three reads may fail). */
export const RETENTION_POLL_SHARE = 0.25;

/** The interval capped so that a completed result is read well inside its retention. */
export function withinRetention(intervalMs: number, capabilities: ProviderCapabilities): number {
  const retention = capabilities.resultRetentionMs;
  return retention === undefined ? intervalMs : Math.min(intervalMs, Math.max(1, Math.floor(retention * RETENTION_POLL_SHARE)));
}
