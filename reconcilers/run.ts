// Runs one reconciler and records the run (reconcile_run): the audit of what the scheduled
// reconcilers changed, the source of `ops reconcile status` and of the reconciler metrics.
import { randomUUID } from 'node:crypto';
import { and, desc, eq } from 'drizzle-orm';
import type { Db } from '../db/client';
import { reconcileRun, type ReconcileRunRow } from '../db/schema';
import type { ReconcileCursor } from '../domain/reconcile-report';
import type { Reconciler, ReconcileDeps, ReconcileReport, ReconcileRunOptions } from './types';

/** Findings stored per run; the total is kept beside them. */
export const STORED_FINDINGS = 200;

export interface RunSummary {
  readonly runId: string;
  readonly reconciler: string;
  readonly examined: number;
  readonly changed: number;
  readonly findings: number;
  readonly durationMs: number;
}

export async function runReconciler(
  deps: ReconcileDeps,
  reconciler: Reconciler,
  opts: ReconcileRunOptions & { actor: string },
): Promise<RunSummary & { report: ReconcileReport }> {
  const started = new Date();
  let report: ReconcileReport | null = null;
  let error: Error | null = null;
  // A paging reconciler goes on where the last real run stopped (a dry run looks at the same
  // page, and leaves the cursor where it was).
  let cursor: ReconcileCursor | null = null;
  try {
    cursor = await lastCursor(deps.db, reconciler.name);
    report = await reconciler.run(deps, { dryRun: opts.dryRun, limit: opts.limit, cursor });
  } catch (err) {
    error = err as Error;
  }
  const finished = new Date();
  const runId = randomUUID();
  const findings = report?.findings ?? [];
  await deps.db.insert(reconcileRun).values({
    run_id: runId,
    reconciler: reconciler.name,
    actor: opts.actor,
    dry_run: opts.dryRun,
    started_at: started,
    finished_at: finished,
    examined: report?.examined ?? 0,
    changed: report?.changed ?? 0,
    findings: findings.slice(0, STORED_FINDINGS),
    findings_total: findings.length,
    error: error ? error.message.slice(0, 2000) : null,
    // A failed or dry run keeps the cursor it started from; a finished one moves it on.
    cursor: report && !opts.dryRun ? (report.cursor ?? null) : cursor,
  });
  if (error) throw error;
  deps.logger.info(
    { reconciler: reconciler.name, examined: report!.examined, changed: report!.changed, findings: findings.length, dryRun: opts.dryRun },
    'reconciler ran',
  );
  return {
    runId,
    reconciler: reconciler.name,
    examined: report!.examined,
    changed: report!.changed,
    findings: findings.length,
    durationMs: finished.getTime() - started.getTime(),
    report: report!,
  };
}

/** The cursor of the reconciler's latest run that was not a dry run (null: none, or a full pass ended there). */
async function lastCursor(db: Db, reconciler: string): Promise<ReconcileCursor | null> {
  const [last] = await db
    .select({ cursor: reconcileRun.cursor })
    .from(reconcileRun)
    .where(and(eq(reconcileRun.reconciler, reconciler), eq(reconcileRun.dry_run, false)))
    .orderBy(desc(reconcileRun.started_at))
    .limit(1);
  return last?.cursor ?? null;
}

/** The latest run of each reconciler (scheduled or triggered; dry runs left out unless asked). */
export async function latestRuns(db: Db, opts: { includeDryRuns?: boolean } = {}): Promise<ReconcileRunRow[]> {
  return db
    .selectDistinctOn([reconcileRun.reconciler])
    .from(reconcileRun)
    .where(opts.includeDryRuns ? undefined : eq(reconcileRun.dry_run, false))
    .orderBy(reconcileRun.reconciler, desc(reconcileRun.started_at));
}
