// The one way a reconciler moves a task: make sure its workflow runs and wake it, so that the
// workflow re-reads its facts and the state machine decides (docs/design.md §3, §8). Shared by
// the scheduled reconcilers and `ops reconcile --apply`.
import type { GenerationFacade, TaskRef } from '../temporal/facade';
import type { ReconcileDeps, ReconcileFinding, ReconcileReport, ReconcileRunOptions } from './types';

/** started: no workflow ran, one does now; woken: signalled; closed: its workflow finished (reset it from the Temporal UI). */
export type Convergence = 'started' | 'woken' | 'closed' | 'not-woken';

export async function convergeTask(facade: GenerationFacade, task: TaskRef): Promise<Convergence> {
  const wf = await facade.describeTask(task.taskId);
  if (wf === null) {
    await facade.startGeneration(task);
    return 'started';
  }
  if (wf.status !== 'RUNNING') return 'closed';
  return (await facade.wakeTask(task.taskId)) ? 'woken' : 'not-woken';
}

export interface StuckTask {
  readonly task_id: string;
  readonly tenant_id: string;
  readonly provider: string;
  /** What makes it stuck, for the finding. */
  readonly detail: string;
}

/** Converges each task (or, on a dry run, only lists it): one finding per task; changed counts starts and wakes. */
export async function convergeTasks(deps: ReconcileDeps, opts: ReconcileRunOptions, kind: string, tasks: readonly StuckTask[]): Promise<ReconcileReport> {
  const findings: ReconcileFinding[] = [];
  let changed = 0;
  for (const t of tasks) {
    if (opts.dryRun) {
      findings.push({ kind, taskId: t.task_id, detail: t.detail });
      continue;
    }
    try {
      const c = await convergeTask(deps.facade, { taskId: t.task_id, tenantId: t.tenant_id, provider: t.provider });
      if (c === 'started' || c === 'woken') changed += 1;
      const done = {
        started: 'workflow started',
        woken: 'workflow woken',
        closed: 'its workflow is closed: reset it from the Temporal UI',
        'not-woken': 'the wake signal failed',
      }[c];
      findings.push({ kind, taskId: t.task_id, detail: `${t.detail}; ${done}` });
    } catch (err) {
      findings.push({ kind, taskId: t.task_id, detail: `${t.detail}; could not reach its workflow: ${(err as Error).message}` });
    }
  }
  return { examined: tasks.length, findings, changed };
}
