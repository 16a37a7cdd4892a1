// One Temporal Schedule per reconciler: visible, pausable and triggerable in the Temporal UI
// (Schedules), overlap policy SKIP (a run still going skips the next), its action the reconciler
// workflow on the reconcile queue. Created idempotently by the worker at start and by
// `npm run dev`; an existing Schedule gets the configured interval and action but keeps its
// paused state and note (an operator's pause survives a deploy).
import { ScheduleAlreadyRunning, ScheduleNotFoundError, ScheduleOverlapPolicy, type Client } from '@temporalio/client';
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
    args: [{ reconciler: name }] as Parameters<typeof reconcileWorkflow>,
    taskQueue: queues.reconcile(taskQueueBase),
    // Each run's id: the Schedule appends its time; the prefix names the reconciler.
    workflowId: `${scheduleIdFor(taskQueueBase, name)}-run`,
    workflowRunTimeout: '30 minutes',
  };
}

/** Creates each Schedule, or updates an existing one's interval and action; returns the ids. */
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
  return ids;
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
