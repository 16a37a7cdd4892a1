// Where a workflow's time goes, from its event history: per activity type the queue wait
// (scheduled → started) and the run time (started → completed), workflow tasks likewise, and
// the counts that give a history its shape (signals, search-attribute upserts, timers).
import type { History } from '@temporalio/common/lib/proto-utils';

type HistoryEvent = NonNullable<History['events']>[number];

export interface StepStat {
  count: number;
  /** Sum of scheduled → started, ms. */
  queueMs: number;
  /** Sum of started → completed, ms. */
  runMs: number;
}

export interface HistoryStats {
  readonly workflows: number;
  readonly events: number;
  readonly activities: Record<string, StepStat>;
  readonly workflowTasks: StepStat;
  readonly signals: number;
  readonly upserts: number;
  readonly timers: number;
  /** Activity types in scheduling order (of the last history analysed); local ones prefixed LOCAL_PREFIX. */
  readonly activityOrder: string[];
  /** How many activities were scheduled before the last signal arrived (last history). */
  readonly waitAfter: number;
  /** First event → last event, ms, summed. */
  readonly wallMs: number;
}

const ms = (e: HistoryEvent): number => {
  const t = e.eventTime;
  return t ? Number(t.seconds ?? 0) * 1000 + (t.nanos ?? 0) / 1e6 : 0;
};

export function emptyStats(): HistoryStats {
  return {
    workflows: 0,
    events: 0,
    activities: {},
    workflowTasks: { count: 0, queueMs: 0, runMs: 0 },
    signals: 0,
    upserts: 0,
    timers: 0,
    activityOrder: [],
    waitAfter: 0,
    wallMs: 0,
  };
}

/** In `activityOrder`, a step that ran as a local activity (a marker in the history, no dispatch). */
export const LOCAL_PREFIX = 'local:';

/** The activity type a step of `activityOrder` registers under (local or not). */
export const activityTypeOf = (step: string): string => (step.startsWith(LOCAL_PREFIX) ? step.slice(LOCAL_PREFIX.length) : step);

/** The activity type of a local activity's marker event, else null. */
function localActivityType(e: HistoryEvent): string | null {
  const marker = e.markerRecordedEventAttributes;
  if (marker?.markerName !== 'core_local_activity') return null;
  const data = marker.details?.['data']?.payloads?.[0]?.data;
  if (!data) return null;
  const parsed = JSON.parse(Buffer.from(data).toString('utf8')) as { activity_type?: string };
  return parsed.activity_type ?? null;
}

/** Adds one history to `acc` (mutates and returns a new object for the scalar fields). */
export function addHistory(acc: HistoryStats, history: History): HistoryStats {
  const events = history.events ?? [];
  const byId = new Map<string, HistoryEvent>();
  const activityName = new Map<string, string>();
  const order: string[] = [];
  let signals = 0;
  let upserts = 0;
  let timers = 0;
  let waitAfter = 0;
  for (const e of events) {
    const id = String(e.eventId);
    byId.set(id, e);
    const sched = e.activityTaskScheduledEventAttributes;
    if (sched) {
      const name = sched.activityType?.name ?? '?';
      activityName.set(id, name);
      order.push(name);
    }
    const local = localActivityType(e);
    if (local) order.push(`${LOCAL_PREFIX}${local}`);
    if (e.workflowExecutionSignaledEventAttributes) {
      signals++;
      waitAfter = order.length;
    }
    if (e.upsertWorkflowSearchAttributesEventAttributes) upserts++;
    if (e.timerStartedEventAttributes) timers++;
    const done = e.activityTaskCompletedEventAttributes ?? e.activityTaskFailedEventAttributes ?? e.activityTaskTimedOutEventAttributes;
    if (done) {
      const schedId = String(done.scheduledEventId);
      const name = activityName.get(schedId) ?? '?';
      const s = byId.get(schedId);
      const st = byId.get(String(done.startedEventId));
      const stat = (acc.activities[name] ??= { count: 0, queueMs: 0, runMs: 0 });
      stat.count++;
      if (s && st) {
        stat.queueMs += ms(st) - ms(s);
        stat.runMs += ms(e) - ms(st);
      }
    }
    const wftDone = e.workflowTaskCompletedEventAttributes;
    if (wftDone) {
      const s = byId.get(String(wftDone.scheduledEventId));
      const st = byId.get(String(wftDone.startedEventId));
      acc.workflowTasks.count++;
      if (s && st) {
        acc.workflowTasks.queueMs += ms(st) - ms(s);
        acc.workflowTasks.runMs += ms(e) - ms(st);
      }
    }
  }
  const first = events[0];
  const last = events[events.length - 1];
  return {
    ...acc,
    workflows: acc.workflows + 1,
    events: acc.events + events.length,
    signals: acc.signals + signals,
    upserts: acc.upserts + upserts,
    timers: acc.timers + timers,
    activityOrder: order,
    waitAfter,
    wallMs: acc.wallMs + (first && last ? ms(last) - ms(first) : 0),
  };
}

export interface AfterSignal {
  /** Last signal → workflow completed, ms (null when the history has no signal or no completion). */
  readonly totalMs: number | null;
  /** Activities scheduled after the last signal: queue (scheduled → started) and run, ms. */
  readonly activities: Record<string, StepStat>;
  /** Workflow tasks after the last signal, likewise. */
  readonly workflowTasks: StepStat;
  /** The events from the last signal on, counted (null without a signal). */
  readonly counts: HistoryCounts | null;
}

/**
 * Where the time between the last signal (a callback's wake) and the workflow's completion
 * went: per activity type scheduled after it, and the workflow tasks in between.
 */
export function afterLastSignal(history: History): AfterSignal {
  const events = history.events ?? [];
  let from = -1;
  events.forEach((e, i) => {
    if (e.workflowExecutionSignaledEventAttributes) from = i;
  });
  const out: AfterSignal = { totalMs: null, activities: {}, workflowTasks: { count: 0, queueMs: 0, runMs: 0 }, counts: null };
  if (from < 0) return out;
  const tail = events.slice(from);
  const stats = addHistory(emptyStats(), { events: tail });
  const done = tail.find((e) => e.workflowExecutionCompletedEventAttributes);
  return {
    totalMs: done ? ms(done) - ms(tail[0]!) : null,
    activities: stats.activities,
    workflowTasks: stats.workflowTasks,
    counts: historyCounts({ events: tail }),
  };
}

/** What one history cost Temporal, counted from its events. */
export interface HistoryCounts {
  readonly events: number;
  /** Regular activities scheduled (each a dispatch through a task queue). */
  readonly activityDispatches: number;
  /** Local activities, one MarkerRecorded event each (they run inside a workflow task). */
  readonly localActivityMarkers: number;
  /** Workflow tasks completed, failed or timed out (each a dispatch to a worker and back). */
  readonly workflowTasks: number;
  readonly signals: number;
  readonly timers: number;
  readonly upserts: number;
}

/** The marker name the SDK's core gives a local activity's result. */
const LOCAL_ACTIVITY_MARKER = 'core_local_activity';

export function historyCounts(history: History): HistoryCounts {
  const c = { events: 0, activityDispatches: 0, localActivityMarkers: 0, workflowTasks: 0, signals: 0, timers: 0, upserts: 0 };
  for (const e of history.events ?? []) {
    c.events++;
    if (e.activityTaskScheduledEventAttributes) c.activityDispatches++;
    if (e.markerRecordedEventAttributes?.markerName === LOCAL_ACTIVITY_MARKER) c.localActivityMarkers++;
    if (e.workflowTaskCompletedEventAttributes || e.workflowTaskFailedEventAttributes || e.workflowTaskTimedOutEventAttributes) c.workflowTasks++;
    if (e.workflowExecutionSignaledEventAttributes) c.signals++;
    if (e.timerStartedEventAttributes) c.timers++;
    if (e.upsertWorkflowSearchAttributesEventAttributes) c.upserts++;
  }
  return c;
}

export interface CountSpread {
  readonly mean: number;
  readonly min: number;
  readonly max: number;
}

/** Mean, min and max of each count over several histories (NaN when there are none). */
export function spreadOf<K extends string>(rows: readonly Readonly<Record<K, number>>[], keys: readonly K[]): Record<K, CountSpread> {
  const out = {} as Record<K, CountSpread>;
  for (const k of keys) {
    const xs = rows.map((r) => r[k]);
    out[k] = xs.length
      ? { mean: xs.reduce((a, b) => a + b, 0) / xs.length, min: Math.min(...xs), max: Math.max(...xs) }
      : { mean: Number.NaN, min: Number.NaN, max: Number.NaN };
  }
  return out;
}
