// `npm run bench -- callback-latency`: how long a task takes from its provider's success
// callback being received to SUCCEEDED. Tasks are created at a steady, modest rate through the
// API; the simulator finishes each after a short generation and sends its signed `completed`
// webhook to the API (verify, inbox insert, wake signal); the worker applies it, rescues the
// tiny output (a 1-second 320×240 MP4, so the download is negligible) and probes it. Per task:
// the inbox row's received_at (source callback, state succeeded) → the task's terminal_at, both
// Postgres clocks. The poll fallback is pushed out (10 min) so every task ends by its callback.
// Baseline in the same run, on the same Temporal server and worker settings: a bare workflow
// waiting for one signal, then running no-op activities of the same types the real task runs
// after its callback; signal → completion from its history. Prints issue #19's goal row (p50
// real, bare, ratio: ≤ 300 ms and ≤ 3 × bare) and the counts from the last wake signal on
// (activity dispatches, local activities, workflow tasks, events); `--check` fails the run when a
// goal is missed (docs/performance.md, "Count budgets and checks").
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { fileLogger, sleep, startNodeProcess, waitUntil, type ManagedProcess } from '../harness';
import { configToEnv } from '../config/env';
import { SA_PROVIDER, SA_TASK_STATUS, SA_TENANT_ID, wakeSignal, workflowIdForTask } from '../workflows/definitions';
import type { bareWorkflow, BareShape } from './workflows/bare';
import { checkGoals } from './lib/budgets';
import { printProfile, summarizeProfiles } from './lib/cpuprofile';
import { LOCAL_PREFIX, activityTypeOf, afterLastSignal, type HistoryCounts, type StepStat } from './lib/history';
import { createTaskClient } from './lib/http';
import { createTaskOrThrow, waitForTerminal } from './lib/tasks';
import { describeCpu, measured } from './lib/measure';
import type { CpuUsage } from './lib/procstat';
import type { Reporter } from './lib/report';
import { ratio, round, sortNumbers, summarize, type LatencySummary } from './lib/stats';
import { startBenchWorld, type BenchWorld } from './lib/world';

export interface CallbackLatencyOptions {
  readonly tasks: number;
  /** Creates per second (open loop), so tasks do not queue behind each other. */
  readonly ratePerSecond: number;
  readonly warmupTasks: number;
  readonly generationMs: number;
  readonly timeoutS: number;
  readonly historySample: number;
  readonly skipBaseline: boolean;
  /** Profile the worker process (node --cpu-prof) and print where its CPU went. */
  readonly cpuProfile: boolean;
  /** Fail the run (exit 1) when a goal is missed. */
  readonly check: boolean;
}

interface Breakdown {
  readonly workflows: number;
  readonly totalMs: number;
  readonly activities: Record<string, StepStat>;
  readonly workflowTasks: StepStat;
  /** Summed over the workflows: the events from the last signal on. */
  readonly counts: Omit<HistoryCounts, 'signals'>;
}

interface PhaseResult {
  readonly mode: string;
  readonly measured: number;
  readonly latency: LatencySummary;
  readonly cpu: CpuUsage;
  readonly breakdown: Breakdown;
}

const GOAL_P50_MS = 300;
const GOAL_P99_MS = 1_000;
const GOAL_P50_BARE_RATIO = 3;
const BODY = (i: number) => ({ model: 'minimax/video-01', prompt: `bench callback-latency ${i}`, duration_seconds: 6, resolution: '720p' }) as const;

async function breakdown(bw: BenchWorld, workflowIds: string[], sample: number): Promise<Breakdown> {
  const counts = { events: 0, activityDispatches: 0, localActivityMarkers: 0, workflowTasks: 0, timers: 0, upserts: 0 };
  const acc: Breakdown = { workflows: 0, totalMs: 0, activities: {}, workflowTasks: { count: 0, queueMs: 0, runMs: 0 }, counts };
  let workflows = 0;
  let totalMs = 0;
  const step = Math.max(1, Math.floor(workflowIds.length / Math.max(1, sample)));
  for (let i = 0; i < workflowIds.length && workflows < sample; i += step) {
    const a = afterLastSignal(await bw.world.client.workflow.getHandle(workflowIds[i]!).fetchHistory());
    if (a.totalMs === null) continue;
    workflows++;
    totalMs += a.totalMs;
    for (const [name, s] of Object.entries(a.activities)) {
      const t = (acc.activities[name] ??= { count: 0, queueMs: 0, runMs: 0 });
      t.count += s.count;
      t.queueMs += s.queueMs;
      t.runMs += s.runMs;
    }
    acc.workflowTasks.count += a.workflowTasks.count;
    acc.workflowTasks.queueMs += a.workflowTasks.queueMs;
    acc.workflowTasks.runMs += a.workflowTasks.runMs;
    for (const k of Object.keys(counts) as (keyof typeof counts)[]) counts[k] += a.counts?.[k] ?? 0;
  }
  return { ...acc, workflows, totalMs };
}

/** Creates `n` tasks at `rate` per second; returns their ids (creates that fail stop the run). */
async function createAtRate(apiUrl: string, apiKey: string, n: number, rate: number, prefix: string, onProgress: (done: number) => void): Promise<string[]> {
  const http = createTaskClient(apiUrl, 8, { timeoutMs: 30_000 });
  const vidorch = http.as(apiKey);
  const ids: string[] = [];
  const t0 = performance.now();
  const pending: Promise<void>[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const due = t0 + (i * 1000) / rate;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      pending.push(
        createTaskOrThrow(vidorch, `${prefix}-${i}`, BODY(i)).then((id) => {
          ids.push(id);
        }),
      );
      if ((i + 1) % Math.max(1, Math.round(rate)) === 0) onProgress(i + 1);
    }
    await Promise.all(pending);
  } finally {
    http.close();
  }
  return ids;
}

async function runReal(
  bw: BenchWorld,
  o: CallbackLatencyOptions,
  rep: Reporter,
  apiUrl: string,
  pids: { api: number; worker: number },
): Promise<PhaseResult & { byCallback: number }> {
  const [tenant] = await bw.createTenants(1);
  const prefix = `cl-${randomUUID().slice(0, 8)}`;
  rep.log(`callback-latency: warm-up, ${o.warmupTasks} task(s)`);
  const warm = await createAtRate(apiUrl, tenant!.apiKey, o.warmupTasks, o.ratePerSecond, `${prefix}-warm`, () => undefined);
  await waitForTerminal(bw, warm, { timeoutS: 120, tag: 'callback-latency warm-up', rep });

  let ids: string[] = [];
  const m = await measured(
    { cpuGroups: async () => ({ api: [pids.api], worker: [pids.worker], postgres: await bw.backendPids(), temporal: bw.temporalPids() }) },
    async () => {
      ids = await createAtRate(apiUrl, tenant!.apiKey, o.tasks, o.ratePerSecond, prefix, (n) => rep.log(`[callback-latency real] ${n}/${o.tasks} created`));
      await waitForTerminal(bw, ids, { timeoutS: o.timeoutS, tag: 'callback-latency real', rep });
    },
  );
  // The success callback's arrival → the task's terminal time. A task whose success came by a
  // poll (none, with the poll pushed out) has no such row and is left out, and counted.
  const { rows } = await bw.world.db.pool.query<{ ms: number }>(
    `SELECT extract(epoch FROM (t.terminal_at - i.received_at)) * 1000 AS ms
     FROM generation_task t
     JOIN LATERAL (SELECT min(received_at) AS received_at FROM callback_inbox
                   WHERE task_id = t.task_id AND source = 'callback' AND event_type = 'succeeded') i ON i.received_at IS NOT NULL
     WHERE t.task_id = ANY($1::uuid[]) AND t.status = 'SUCCEEDED'`,
    [ids],
  );
  return {
    mode: 'real: callback received → SUCCEEDED',
    measured: rows.length,
    byCallback: rows.length,
    latency: summarize(sortNumbers(rows.map((r) => Number(r.ms)))),
    cpu: m.cpu,
    breakdown: await breakdown(bw, ids.map(workflowIdForTask), o.historySample),
  };
}

async function runBare(bw: BenchWorld, o: CallbackLatencyOptions, rep: Reporter, shape: BareShape, maxActivities: number): Promise<PhaseResult> {
  const queue = `bench-cl-bare-${randomUUID().slice(0, 8)}`;
  const worker: ManagedProcess = startNodeProcess(
    'bare-worker',
    'bench/workflows/bare-worker.ts',
    { ...configToEnv(bw.world.config), LOG_LEVEL: 'warn', WORKER_MAX_CONCURRENT_ACTIVITIES: String(maxActivities) },
    { args: [queue, [...new Set(shape.activities.map(activityTypeOf))].join(',')], log: fileLogger(path.join(bw.logDir, 'bare-worker.log')) },
  );
  try {
    await waitUntil(async () => worker.recentOutput().some((l) => l.includes('bare worker polling')), {
      process: worker,
      timeoutMs: 120_000,
      what: 'the bare worker',
    });
    const client = bw.world.client;
    const tenantId = randomUUID();
    const start = async (i: number) => {
      const workflowId = `bare-cl-${i}-${randomUUID()}`;
      const handle = await client.workflow.start<typeof bareWorkflow>('bareWorkflow', {
        taskQueue: queue,
        workflowId,
        args: [shape, workflowId],
        typedSearchAttributes: [
          { key: SA_TASK_STATUS, value: 'SUBMITTED' },
          { key: SA_TENANT_ID, value: tenantId },
          { key: SA_PROVIDER, value: 'replicate' },
        ],
      });
      return handle;
    };
    // Warm-up, then one signal per workflow at the real run's pace (each started ahead, waiting).
    for (let i = 0; i < o.warmupTasks; i++) await (await start(-1 - i)).signal(wakeSignal);
    const handles: Awaited<ReturnType<typeof start>>[] = [];
    for (let i = 0; i < o.tasks; i++) handles.push(await start(i));
    await sleep(2_000);
    const ids = handles.map((h) => h.workflowId);
    const m = await measured({ cpuGroups: async () => ({ worker: [worker.pid], temporal: bw.temporalPids() }) }, async () => {
      const t0 = performance.now();
      for (let i = 0; i < handles.length; i++) {
        const wait = t0 + (i * 1000) / o.ratePerSecond - performance.now();
        if (wait > 0) await sleep(wait);
        await handles[i]!.signal(wakeSignal);
        if ((i + 1) % Math.max(1, Math.round(o.ratePerSecond)) === 0) rep.log(`[callback-latency bare] ${i + 1}/${o.tasks} signalled`);
      }
      const deadline = Date.now() + o.timeoutS * 1000;
      for (;;) {
        const { count } = await client.workflow.count(`TaskQueue = "${queue}" AND ExecutionStatus != "Running"`);
        if (count >= o.tasks + o.warmupTasks || Date.now() > deadline) break;
        await sleep(500);
      }
    });
    const b = await breakdown(bw, ids, Math.max(o.tasks, o.historySample));
    const all: number[] = [];
    for (const id of ids) {
      const a = afterLastSignal(await client.workflow.getHandle(id).fetchHistory());
      if (a.totalMs !== null) all.push(a.totalMs);
    }
    return { mode: 'bare: signal → completed (no-op activities)', measured: all.length, latency: summarize(sortNumbers(all)), cpu: m.cpu, breakdown: b };
  } finally {
    await worker.stop('SIGTERM', 10_000);
  }
}

export async function runCallbackLatency(o: CallbackLatencyOptions, rep: Reporter): Promise<void> {
  const maxActivities = 50;
  const bw = await startBenchWorld(
    'callback-latency',
    {
      SIMULATOR_GENERATION_MS: String(o.generationMs),
      // The poll fallback far out: every task must end by its callback.
      POLL_INITIAL_MS: '600000',
      POLL_MAX_MS: '600000',
      WORKER_MAX_CONCURRENT_ACTIVITIES: String(maxActivities),
    },
    (l) => rep.log(`callback-latency: ${l}`),
  );
  try {
    const api = await bw.startApi('api');
    const worker = await bw.startWorker('worker-0', { PUBLIC_BASE_URL: api.url }, { cpuProfile: o.cpuProfile });
    const real = await runReal(bw, o, rep, api.url, { api: api.proc.pid, worker: worker.proc.pid });
    rep.log(`callback-latency: cpu (real) ${describeCpu(real.cpu)}`);
    await worker.proc.stop('SIGTERM', 10_000);
    const profile = worker.profileDir ? summarizeProfiles(worker.profileDir) : null;
    const phases: PhaseResult[] = [real];
    if (!o.skipBaseline) {
      // The bare workflow runs what the real one ran after its last wake, as no-ops.
      const after = Object.keys(real.breakdown.activities);
      const dispatched = ['applyInbox', 'rescueOutput', 'processMedia'].filter((n) => after.includes(n));
      // Under the 'lean-steps' patch the inbox apply after a wake is a local activity (a marker,
      // not a dispatch): the bare workflow runs it as a local no-op too.
      const localAfter = real.breakdown.workflows ? real.breakdown.counts.localActivityMarkers / real.breakdown.workflows : 0;
      const order = [...(localAfter >= 0.5 && !dispatched.includes('applyInbox') ? [`${LOCAL_PREFIX}applyInbox`] : []), ...dispatched];
      const shape: BareShape = { activities: dispatched.length ? order : after, waitAfter: 0, signals: 1, upserts: 2 };
      rep.log(`callback-latency: bare shape after the signal: ${shape.activities.join(' → ')}, ${shape.upserts} upserts`);
      const bare = await runBare(bw, o, rep, shape, maxActivities);
      rep.log(`callback-latency: cpu (bare) ${describeCpu(bare.cpu)}`);
      phases.push(bare);
    }
    const bare = phases[1];
    rep.table(
      `callback-latency: ${o.tasks} tasks at ${o.ratePerSecond}/s, generation ${o.generationMs} ms, 1 worker × ${maxActivities} activity slots (ratio = p50 / bare p50)`,
      ['mode', 'measured', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'ratio p50', 'ratio p99', 'cores: api', 'worker', 'postgres', 'temporal', 'machine busy'],
      phases.map((p) => [
        p.mode,
        p.measured,
        round(p.latency.p50, 0),
        round(p.latency.p90, 0),
        round(p.latency.p99, 0),
        round(p.latency.max, 0),
        round(ratio(p.latency.p50, bare?.latency.p50 ?? NaN), 2),
        round(ratio(p.latency.p99, bare?.latency.p99 ?? NaN), 2),
        round(p.cpu.cores['api'] ?? 0, 2),
        round(p.cpu.cores['worker'] ?? 0, 2),
        round(p.cpu.cores['postgres'] ?? 0, 2),
        round(p.cpu.cores['temporal'] ?? 0, 2),
        `${p.cpu.machineBusyCores.toFixed(2)}/${p.cpu.machineCores}`,
      ]),
    );
    const names = [...new Set(phases.flatMap((p) => Object.keys(p.breakdown.activities)))];
    const cell = (p: PhaseResult | undefined, s: StepStat | undefined, f: 'queueMs' | 'runMs') =>
      p && s && p.breakdown.workflows ? round(s[f] / p.breakdown.workflows, 1) : null;
    rep.table(
      `callback-latency: where the time after the signal goes, mean ms per workflow (${real.breakdown.workflows} real, ${bare?.breakdown.workflows ?? 0} bare histories; signal event → completed event)`,
      ['step', 'real queue', 'real run', 'bare queue', 'bare run'],
      [
        ...names.map((n) => [
          n,
          cell(real, real.breakdown.activities[n], 'queueMs'),
          cell(real, real.breakdown.activities[n], 'runMs'),
          cell(bare, bare?.breakdown.activities[n], 'queueMs'),
          cell(bare, bare?.breakdown.activities[n], 'runMs'),
        ]),
        [
          'workflow tasks',
          cell(real, real.breakdown.workflowTasks, 'queueMs'),
          cell(real, real.breakdown.workflowTasks, 'runMs'),
          cell(bare, bare?.breakdown.workflowTasks, 'queueMs'),
          cell(bare, bare?.breakdown.workflowTasks, 'runMs'),
        ],
        [
          'signal → completed (history)',
          round(real.breakdown.totalMs / Math.max(1, real.breakdown.workflows), 1),
          null,
          bare ? round(bare.breakdown.totalMs / Math.max(1, bare.breakdown.workflows), 1) : null,
          null,
        ],
      ],
    );
    const p50Ratio = ratio(real.latency.p50, bare?.latency.p50 ?? NaN);
    const goals = [
      {
        name: 'p50 callback received → SUCCEEDED',
        target: `≤ ${GOAL_P50_MS} ms`,
        measured: `${round(real.latency.p50, 0)} ms`,
        met: real.latency.p50 <= GOAL_P50_MS,
      },
      {
        name: 'p50 real ÷ bare floor (signal → completed)',
        target: `≤ ${GOAL_P50_BARE_RATIO} ×`,
        measured: bare ? `${round(real.latency.p50, 0)} ms ÷ ${round(bare.latency.p50, 0)} ms = ${round(p50Ratio, 2)} ×` : 'no baseline',
        met: p50Ratio <= GOAL_P50_BARE_RATIO,
      },
      { name: 'p99 callback → SUCCEEDED', target: `≤ ${GOAL_P99_MS} ms`, measured: `${round(real.latency.p99, 0)} ms`, met: real.latency.p99 <= GOAL_P99_MS },
      { name: 'every task ended by its callback', target: `${o.tasks}`, measured: `${real.byCallback}`, met: real.byCallback === o.tasks },
    ];
    printProfile(rep, 'callback-latency: worker process', profile);
    // Not budgeted: how much comes after the last signal moves with when it lands (a loaded
    // machine coalesces the success's wake into an earlier one: 1.73 dispatches instead of 2).
    const per = (p: PhaseResult | undefined, k: keyof Breakdown['counts']) =>
      p && p.breakdown.workflows ? p.breakdown.counts[k] / p.breakdown.workflows : NaN;
    const afterSignal = Object.fromEntries(
      (['activityDispatches', 'localActivityMarkers', 'workflowTasks', 'events', 'upserts', 'timers'] as const).map((k) => [k, round(per(real, k), 3)]),
    );
    rep.table(
      `callback-latency: from the last wake signal to completion, per task (${real.breakdown.workflows} real, ${bare?.breakdown.workflows ?? 0} bare histories)`,
      ['count', 'real', 'bare'],
      (['activityDispatches', 'localActivityMarkers', 'workflowTasks', 'events', 'upserts', 'timers'] as const).map((k) => [
        k,
        round(per(real, k), 2),
        round(per(bare, k), 2),
      ]),
    );
    rep.goals(goals);
    checkGoals(rep, 'callback-latency', goals, o.check);
    rep.result({
      bench: 'callback-latency',
      options: o,
      phases: phases.map((p) => ({
        mode: p.mode,
        measured: p.measured,
        latency: Object.fromEntries((Object.entries(p.latency) as [string, number][]).map(([k, v]) => [k, round(v, 1)])),
        ratioP50: round(ratio(p.latency.p50, bare?.latency.p50 ?? NaN), 3),
        ratioP99: round(ratio(p.latency.p99, bare?.latency.p99 ?? NaN), 3),
        cores: Object.fromEntries(Object.entries(p.cpu.cores).map(([k, v]) => [k, round(v, 2)])),
        machineBusyCores: round(p.cpu.machineBusyCores, 2),
        afterSignal: p.breakdown,
      })),
      workerProfile: profile,
      afterSignal,
      goals,
    });
  } finally {
    await bw.close();
  }
}
