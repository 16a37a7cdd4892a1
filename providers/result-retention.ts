// A capability of providers whose completed results stay readable only for a while (fal keeps a
// result 1 hour after completion, 6 minutes when it is 10 KB or more: docs/providers.md). It
// widens ProviderCapabilities where the poll schedule reads it (activities/poll-provider.ts).
import type { ProviderCapabilities } from './types';

declare module './types' {
  interface ProviderCapabilities {
    /**
     * How long a completed job's result can still be read, in ms; absent: as long as the job.
     * Polls of such a provider come at most RETENTION_POLL_SHARE of it apart, so the first read
     * after completion falls well inside it.
     */
    readonly resultRetentionMs?: number;
  }
}

/** The longest poll interval is this share of the result retention (a quarter: three reads may fail). */
export const RETENTION_POLL_SHARE = 0.25;

/** The interval capped so that a completed result is read well inside its retention. */
export function withinRetention(intervalMs: number, capabilities: ProviderCapabilities): number {
  const retention = capabilities.resultRetentionMs;
  return retention === undefined ? intervalMs : Math.min(intervalMs, Math.max(1, Math.floor(retention * RETENTION_POLL_SHARE)));
}
