// The one activity of the reconciler workflow (workflows/reconcile.ts): run the named reconciler
// and record the run. Runs on the reconcile queue (temporal/queues.ts), in the active region's
// workers only (workers/main.ts runs it under the region supervisor).
import { heartbeat } from '@temporalio/activity';
import { reconcilerNamed } from '../reconcilers';
import { runReconciler, type RunSummary } from '../reconcilers/run';
import type { Reconciler, ReconcileDeps } from '../reconcilers/types';
import type { ReconcileRunMetrics } from '../observability/metrics';

export interface ReconcileActivityDeps extends ReconcileDeps {
  readonly reconcilers: readonly Reconciler[];
  /** RECONCILE_BATCH_LIMIT */
  readonly limit: number;
  /** The worker's reconciler metrics (observability/metrics.ts registerReconcileMetrics). */
  readonly onRun?: (run: ReconcileRunMetrics) => void;
}

export function createReconcileActivities(deps: ReconcileActivityDeps) {
  return {
    /** Runs one reconciler (not a dry run); returns the run's summary (its findings are in reconcile_run). */
    async runReconciler(name: string): Promise<RunSummary> {
      const reconciler = reconcilerNamed(name, deps.reconcilers);
      const beat = setInterval(() => heartbeat(), 5_000);
      const started = Date.now();
      try {
        const { report: _report, ...summary } = await runReconciler(deps, reconciler, { dryRun: false, limit: deps.limit, actor: 'schedule' });
        deps.onRun?.({
          reconciler: name,
          finishedAt: new Date(),
          durationMs: summary.durationMs,
          findings: summary.findings,
          changed: summary.changed,
          failed: false,
        });
        return summary;
      } catch (err) {
        deps.onRun?.({ reconciler: name, finishedAt: new Date(), durationMs: Date.now() - started, findings: 0, changed: 0, failed: true });
        throw err;
      } finally {
        clearInterval(beat);
      }
    },
  };
}
export type ReconcileActivities = ReturnType<typeof createReconcileActivities>;
