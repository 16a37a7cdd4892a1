// Reconciler settings from the one Config (config/env.ts).
import { spoolDirFor } from '../storage/spool-files';
import type { Config } from '../config/env';
import type { ReconcileSettings } from './types';

export function reconcileSettings(config: Config): ReconcileSettings {
  return {
    graceSeconds: Math.round(config.RECONCILE_GRACE_MS / 1000),
    longRunningSeconds: Math.round(config.RECONCILE_LONG_RUNNING_MS / 1000),
    retention: {
      inboxDays: config.RETENTION_INBOX_DAYS,
      outboxHours: config.RETENTION_OUTBOX_HOURS,
      spoolDeadLetterDays: config.RETENTION_SPOOL_DEAD_LETTER_DAYS,
      reconcileRunDays: config.RETENTION_RECONCILE_RUN_DAYS,
      webhookDays: config.RETENTION_WEBHOOK_DAYS,
      batch: config.RETENTION_BATCH,
    },
    spoolDir: spoolDirFor(config.CALLBACK_SPOOL_DIR, config.DATABASE_URL),
    outputRetentionDays: config.OUTPUT_RETENTION_DAYS,
  };
}

/** Each reconciler's Schedule interval; one without a setting of its own gets RECONCILE_DEFAULT_INTERVAL_MS. */
export function reconcileIntervalMs(config: Config, name: string): number {
  const intervals: Record<string, number> = {
    outbox: config.RECONCILE_OUTBOX_INTERVAL_MS,
    provider: config.RECONCILE_PROVIDER_INTERVAL_MS,
    callbacks: config.RECONCILE_CALLBACKS_INTERVAL_MS,
    output: config.RECONCILE_OUTPUT_INTERVAL_MS,
    // Thumbnails the follow-up did not make come back on the output reconciler's pace.
    thumbnails: config.RECONCILE_OUTPUT_INTERVAL_MS,
    billing: config.RECONCILE_BILLING_INTERVAL_MS,
    retention: config.RETENTION_INTERVAL_MS,
  };
  return intervals[name] ?? config.RECONCILE_DEFAULT_INTERVAL_MS;
}
