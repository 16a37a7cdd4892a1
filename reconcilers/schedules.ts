// One Temporal Schedule per reconciler: visible, pausable and triggerable in the Temporal UI
// (Schedules), overlap policy SKIP (a run still going skips the next), its action the reconciler
// workflow on the generation queue, its activity on the reconcile queue (one workflow thread per
// worker process: docs/performance.md, "Worker memory"). Created idempotently by the worker at
// start and by `npm run dev`; an existing Schedule gets the configured interval and action but
// keeps its paused state and note (an operator's pause survives a deploy).
import { ScheduleAlreadyRunning, ScheduleNotFoundError, ScheduleOverlapPolicy, WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { reconcileWorkflow } from '../workflows/reconcile';
import { queues } from '../temporal/queues';

export const scheduleIdFor = (taskQueueBase: string, reconciler: string): string => `${taskQueueBase}-reconcile-${reconciler}`;

export interface ScheduleSpecInput {
  readonly name: string;
  readonly intervalMs: number;
}

function action(taskQueueBase: string, name: string) {
  return {
    type: 'startWorkflow' as const,
    workflowType: 'reconcileWorkflow',
    args: [{ reconciler: name, activityQueue: queues.reconcile(taskQueueBase) }] as Parameters<typeof reconcileWorkflow>,
    taskQueue: queues.generation(taskQueueBase),
    // Each run's id: the Schedule appends its time; the prefix names the reconciler.
    workflowId: `${scheduleIdFor(taskQueueBase, name)}-run`,
    workflowRunTimeout: '30 minutes',
  };
}

/**
 * Creates each Schedule, or updates an existing one's interval and action; then ends the
 * reconciler runs left on the reconcile queue. Returns the ids.
 */
export async function ensureReconcileSchedules(client: Client, taskQueueBase: string, specs: readonly ScheduleSpecInput[]): Promise<string[]> {
  const ids: string[] = [];
  for (const s of specs) {
    const scheduleId = scheduleIdFor(taskQueueBase, s.name);
    const spec = { intervals: [{ every: s.intervalMs }] };
    try {
      await client.schedule.create({
        scheduleId,
        spec,
        action: action(taskQueueBase, s.name),
        policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '1 minute' },
        state: { note: `reconciler ${s.name} (docs/runbooks/reconcilers.md)` },
      });
    } catch (err) {
      if (!(err instanceof ScheduleAlreadyRunning)) throw err;
      await client.schedule.getHandle(scheduleId).update((prev) => ({
        ...prev,
        spec,
        action: action(taskQueueBase, s.name),
        policies: { ...prev.policies, overlap: ScheduleOverlapPolicy.SKIP },
      }));
    }
    ids.push(scheduleId);
  }
  await endRunsOnReconcileQueue(client, taskQueueBase);
  return ids;
}

/**
 * Runs started before the action moved to the generation queue run their workflow on the
 * reconcile queue, where no worker polls for workflows any more: left alone, such a run would
 * hold its Schedule (overlap SKIP) until its 30-minute run timeout. Terminated instead, so the
 * next interval runs the reconciler again, on the generation queue. Safe whatever the run was
 * doing: a reconciler is a sweep whose every write is idempotent and fenced, and a second run
 * beside it is safe too (docs/runbooks/reconcilers.md, "Deploys"). Found by a visibility query,
 * so runs an operator triggered (which their Schedule does not track) are ended too.
 */
async function endRunsOnReconcileQueue(client: Client, taskQueueBase: string): Promise<void> {
  const query = `WorkflowType = 'reconcileWorkflow' AND TaskQueue = '${queues.reconcile(taskQueueBase)}' AND ExecutionStatus = 'Running'`;
  for await (const run of client.workflow.list({ query })) {
    try {
      await client.workflow
        .getHandle(run.workflowId, run.runId)
        .terminate('the reconciler workflows run on the generation queue now (docs/runbooks/reconcilers.md, "Deploys")');
    } catch (err) {
      // Finished meanwhile: nothing left to end.
      if (!(err instanceof WorkflowNotFoundError)) throw err;
    }
  }
}

/** Triggers a run now (as the Temporal UI's "Trigger" does); refused (skipped) while one is running. */
export async function triggerReconciler(client: Client, taskQueueBase: string, name: string): Promise<void> {
  try {
    await client.schedule.getHandle(scheduleIdFor(taskQueueBase, name)).trigger();
  } catch (err) {
    if (err instanceof ScheduleNotFoundError) throw new Error(`no Schedule for reconciler ${name}: start a worker (it creates them) or run npm run dev`);
    throw err;
  }
}

export interface ScheduleState {
  readonly name: string;
  readonly scheduleId: string;
  readonly paused: boolean;
  readonly note: string | null;
  readonly intervalMs: number | null;
  readonly nextRunAt: Date | null;
  readonly running: number;
}

export async function describeSchedules(client: Client, taskQueueBase: string, names: readonly string[]): Promise<ScheduleState[]> {
  const out: ScheduleState[] = [];
  for (const name of names) {
    const scheduleId = scheduleIdFor(taskQueueBase, name);
    try {
      const d = await client.schedule.getHandle(scheduleId).describe();
      const every = d.spec.intervals?.[0]?.every;
      out.push({
        name,
        scheduleId,
        paused: d.state.paused,
        note: d.state.note ?? null,
        intervalMs: typeof every === 'number' ? every : null,
        nextRunAt: d.info.nextActionTimes[0] ?? null,
        running: d.info.runningActions.length,
      });
    } catch (err) {
      if (!(err instanceof ScheduleNotFoundError)) throw err;
      out.push({ name, scheduleId, paused: false, note: 'no Schedule', intervalMs: null, nextRunAt: null, running: 0 });
    }
  }
  return out;
}
