// The plug-in contract of the scheduled reconcilers (docs/design.md §8). A reconciler re-collects
// evidence and lets the state machine converge: it wakes or starts a task's workflow through the
// facade, or closes a fact with the same idempotent, fenced write the workflow would have made; it
// never forces a success. It must be safe beside everything else (a second run, the relay, the
// workflow itself): every change it makes is idempotent or a compare-and-set. With `dryRun` it
// only looks. Adding one: write `{ name, run }` and put it in the list in reconcilers/index.ts.
import type { Db } from '../db/client';
import type { Logger } from '../observability/logger';
import type { ObjectStorage } from '../storage/s3';
import type { GenerationFacade } from '../temporal/facade';

// A run's findings and report are plain data (domain/reconcile-report.ts): storage/'s checks build
// them too, below this folder.
import type { ReconcileCursor, ReconcileFinding, ReconcileReport } from '../domain/reconcile-report';
export type { ReconcileFinding, ReconcileReport };

export interface ReconcileRunOptions {
  readonly dryRun: boolean;
  /** At most this many rows, tasks or objects per run; the rest waits for the next run. */
  readonly limit: number;
  /** The cursor the last run (not a dry run) left; null: start from the beginning. */
  readonly cursor?: ReconcileCursor | null;
}

/** Thresholds and retention windows, from config/env.ts (reconcilers/settings.ts). */
export interface ReconcileSettings {
  /** A row or task waits this long on its normal path before a reconciler acts on it. */
  readonly graceSeconds: number;
  /** SUBMITTED/RUNNING this long without change counts as long running. */
  readonly longRunningSeconds: number;
  readonly retention: {
    readonly inboxDays: number;
    readonly outboxHours: number;
    readonly spoolDeadLetterDays: number;
    readonly reconcileRunDays: number;
    /** Ended webhook deliveries (with their attempts), their events and idle target back-offs. */
    readonly webhookDays: number;
    /** Rows deleted per statement. */
    readonly batch: number;
  };
  /** This host's callback spool directory (api/spool.ts spoolDirFor). */
  readonly spoolDir: string;
  /** A tenant's output retention when it has none of its own (OUTPUT_RETENTION_DAYS; 0 keeps forever). */
  readonly outputRetentionDays: number;
}

export interface ReconcileDeps {
  readonly db: Db;
  readonly facade: GenerationFacade;
  /** The region fence every fact write holds (db/fence.ts). */
  readonly fence: { readonly scope: string; readonly region: string };
  readonly storage: ObjectStorage;
  /** The fallback bucket's storage (S3_FALLBACK_*), null when there is none (docs/decisions/0029). */
  readonly fallbackStorage: ObjectStorage | null;
  readonly settings: ReconcileSettings;
  readonly logger: Logger;
}

export interface Reconciler {
  /** Also the Schedule's id suffix (`reconcile-<name>`) and the metrics label: lower-case, no spaces. */
  readonly name: string;
  run(deps: ReconcileDeps, opts: ReconcileRunOptions): Promise<ReconcileReport>;
}
