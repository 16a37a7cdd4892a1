// The action of every reconciler Schedule (reconcilers/schedules.ts): one activity that runs the
// named reconciler. Its history holds the name and a small summary; the findings are in
// Postgres (reconcile_run). A failed run is retried a few times, then the workflow fails and the
// Schedule's next run tries again.
import { proxyActivities } from '@temporalio/workflow';
import type { ReconcileActivities } from '../activities/reconcile';
import type { RunSummary } from '../reconcilers/run';

const { runReconciler } = proxyActivities<ReconcileActivities>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '30 seconds',
  retry: { initialInterval: '5 seconds', backoffCoefficient: 2, maximumAttempts: 3 },
});

export interface ReconcileInput {
  readonly reconciler: string;
}

export async function reconcileWorkflow(input: ReconcileInput): Promise<RunSummary> {
  return runReconciler(input.reconciler);
}
