// The e2e benchmark's baseline: a bare workflow with the shape of a real task's history (the
// same activity types in the same order, the same number of wake signals and search-attribute
// upserts) but no-op activities. What Temporal and the worker cost on their own, measured on
// the same server with the same worker settings. Workflow sandbox code: no I/O.
import { condition, defineSignal, proxyActivities, proxyLocalActivities, setHandler, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import { SA_TASK_STATUS, wakeSignal } from '../../workflows/definitions';
import { withDemandFloor } from '../../domain/backoff';

export interface BareShape {
  /** Activity types, in the order a real task's history ran them; `local:<type>` ran as a local activity. */
  readonly activities: readonly string[];
  /** How many of them run before the workflow waits for the signals. */
  readonly waitAfter: number;
  /** Wake signals to wait for (the real history's count). */
  readonly signals: number;
  /** Search-attribute upserts, spread over the run (the real history's count). */
  readonly upserts: number;
}

type NoOp = (taskId: string, arg?: string) => Promise<{ ok: true }>;
const retry = { initialInterval: '1s', backoffCoefficient: 2, maximumInterval: '30s' };
const acts = proxyActivities<Record<string, NoOp>>({ startToCloseTimeout: '30s', retry });
/** The real workflow's local fact steps' options (workflows/generation.ts LOCAL_ACTIVITY_OPTIONS). */
const localActs = proxyLocalActivities<Record<string, NoOp>>({ startToCloseTimeout: '5s', scheduleToCloseTimeout: '10s', retry: { maximumAttempts: 1 } });
/** bench/lib/history.ts LOCAL_PREFIX (the sandbox imports no bench code). */
const LOCAL = 'local:';
/** Runs one step; a regular activity gets `arg` as its second argument when there is one (the no-op shape sends the task id alone). */
const run = (step: string, taskId: string, arg?: string) =>
  step.startsWith(LOCAL) ? localActs[step.slice(LOCAL.length)]!(taskId) : acts[step]!(taskId, ...(arg === undefined ? [] : [arg]));

/** The work floor's terminal callback: the provider's output URL (bench/workflows/floor-work.ts). */
export const floorOutputSignal = defineSignal<[string]>('floorOutput');

/**
 * A shape's steps in order, the upserts spread over them, waiting for `woken()` before step
 * `waitAt` (or at the end when it is past the last); `argOf` gives a step its second argument, if any.
 */
async function runShape(shape: BareShape, taskId: string, waitAt: number, woken: () => boolean, argOf: (step: string) => string | undefined): Promise<void> {
  let upserted = 0;
  const upsert = () => {
    if (upserted >= shape.upserts) return;
    upserted += 1;
    upsertSearchAttributes([{ key: SA_TASK_STATUS, value: `STEP_${upserted}` }]);
  };
  for (let i = 0; i < shape.activities.length; i++) {
    if (i === waitAt) await condition(woken);
    upsert();
    await run(shape.activities[i]!, taskId, argOf(shape.activities[i]!));
  }
  if (waitAt >= shape.activities.length) await condition(woken);
  while (upserted < shape.upserts) upsert();
}

export async function bareWorkflow(shape: BareShape, taskId: string): Promise<number> {
  let woken = 0;
  setHandler(wakeSignal, () => {
    woken += 1;
  });
  await runShape(
    shape,
    taskId,
    shape.waitAfter,
    () => woken >= shape.signals,
    () => undefined,
  );
  return woken;
}

/**
 * The e2e benchmark's work floor: the bare workflow's shape, but its `submitAttempt` submits to
 * the provider with a webhook to the floor worker, the wait ends on the provider's terminal
 * callback (its output URL), and `rescueOutput` downloads, stores, probes and thumbnails that
 * output (bench/workflows/floor-work.ts). Every other step stays a no-op: they are the product's
 * bookkeeping, which is what the ratio to this floor measures.
 */
export async function floorWorkflow(shape: BareShape, taskId: string): Promise<number> {
  let woken = 0;
  let outputUrl: string | null = null;
  setHandler(wakeSignal, () => {
    woken += 1;
  });
  setHandler(floorOutputSignal, (url) => {
    woken += 1;
    outputUrl = url;
  });
  // The rescue needs the output URL: when the calibrated history's signals landed after its last
  // activity (waitAfter past the rescue), the floor still waits for the output before the rescue.
  const rescueAt = shape.activities.indexOf('rescueOutput');
  await runShape(
    shape,
    taskId,
    rescueAt < 0 ? shape.waitAfter : Math.min(shape.waitAfter, rescueAt),
    () => outputUrl !== null,
    (step) => (step === 'submitAttempt' ? workflowInfo().workflowId : step === 'rescueOutput' ? (outputUrl ?? undefined) : undefined),
  );
  return woken;
}

/**
 * The open-tasks benchmark's baseline: a task waiting on its provider, bare. One upsert, then
 * forever: wait for a wake signal or the poll interval, a no-op poll activity, a no-op local apply
 * activity — the real wait loop's commands with nothing behind them. The interval is the real
 * one's: `pollMs` ±20 %, raised to the demand floor `floorMs` ±10 % when that is longer
 * (domain/backoff.ts, activities/poll-demand.ts).
 */
export async function barePollingWorkflow(pollMs: number, floorMs: number, taskId: string): Promise<number> {
  let woken = false;
  setHandler(wakeSignal, () => {
    woken = true;
  });
  upsertSearchAttributes([{ key: SA_TASK_STATUS, value: 'RUNNING' }]);
  for (let polls = 0; ; polls++) {
    woken = false;
    // ±20 % like the real poll interval, so polls do not line up.
    const jittered = withDemandFloor(Math.round(pollMs * (0.8 + Math.random() * 0.4)), floorMs, Math.random);
    if (!(await condition(() => woken, jittered))) await acts['pollProvider']!(taskId);
    // The real loop applies the inbox as a local activity ('lean-steps').
    await localActs['applyInbox']!(taskId);
    if (polls > 500) return polls;
  }
}
