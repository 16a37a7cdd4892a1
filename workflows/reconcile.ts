// The action of every reconciler Schedule (reconcilers/schedules.ts): one activity that runs the
// named reconciler. Its history holds the name and a small summary; the findings are in
// Postgres (reconcile_run). A failed run is retried a few times, then the workflow fails and the
// Schedule's next run tries again.
import { type ActivityOptions, proxyActivities } from '@temporalio/workflow';
import type { ReconcileActivities } from '../activities/reconcile';
import type { RunSummary } from '../reconcilers/run';

const options: ActivityOptions = {
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '30 seconds',
  retry: { initialInterval: '5 seconds', backoffCoefficient: 2, maximumAttempts: 3 },
};
/** On the workflow's own queue: runs started before the workflow moved to the generation queue. */
const { runReconciler } = proxyActivities<ReconcileActivities>(options);

export interface ReconcileInput {
  readonly reconciler: string;
  /**
   * The queue the activity runs on (the reconcile queue's activity-only worker) while the
   * workflow runs on the generation queue's worker, so a worker process has one workflow thread.
   * Absent in runs started before that move: their activity stays on their own queue.
   */
  readonly activityQueue?: string;
}

export async function reconcileWorkflow(input: ReconcileInput): Promise<RunSummary> {
  if (input.activityQueue === undefined) return runReconciler(input.reconciler);
  return proxyActivities<ReconcileActivities>({ ...options, taskQueue: input.activityQueue }).runReconciler(input.reconciler);
}
