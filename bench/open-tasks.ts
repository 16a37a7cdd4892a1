// `npm run bench -- open-tasks`: N tasks (default 10,000) waiting on their provider at once —
// a generation that takes hours, every task polling at the slowest interval (POLL_INITIAL_MS =
// POLL_MAX_MS = --poll-ms) — and what that costs while nothing else happens: worker RSS and
// CPU, Temporal's and Postgres's CPU, history length per task (describe on a sample, at the
// start and end of the idle window), and the poll load the provider sees (status reads counted
// by the simulator) against the provider's configured query quota, which it must not exceed,
// and no request throttled by the simulated account's documented limits (600 creates and 3,000
// others a minute).
// The operator bulkhead (provider_control.max_in_flight) is raised to N so every task reaches
// the provider. Baseline in the same run, on the same Temporal server with the same worker
// settings: N bare workflows running the real wait loop's commands (wait for a signal or the
// poll interval, no-op poll and apply activities; bench/workflows/bare.ts). Each phase settles for
// two of its longest poll intervals before its window, so both are measured in the state a long
// wait keeps (Pace.settleMs); a ratio is printed
// only when both phases' loops polled during their windows. Prints issue #19's goal rows — worker
// RSS and worker + Temporal CPU, each ÷ the bare wait loops', ≤ 1.0 — and `--check` fails the run
// when one is missed or not measured (docs/performance.md, "Count budgets and checks").
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileLogger, sleep, startWorkerProcess, waitUntil, type ManagedProcess } from '../harness';
import { configToEnv, type Config } from '../config/env';
import { activitySettings, buildProviders } from '../config/services';
import { demandFloorMs, pollQuotaFor, pollRateFor } from '../activities/poll-demand';
import { SA_PROVIDER, SA_TASK_STATUS, SA_TENANT_ID, workflowIdForTask } from '../workflows/definitions';
import type { barePollingWorkflow } from './workflows/bare';
import { createTaskClient } from './lib/http';
import { createTask } from './lib/tasks';
import type { ThrottleCounts } from '../providers/simulator/rate-limits';
import { parseMetrics } from './lib/scrape';
import { describeCpu, measured, topStatements } from './lib/measure';
import { hrtimeUs, printProfile, summarizeProfiles, type ProfileWindow } from './lib/cpuprofile';
import { processRss, type CpuUsage } from './lib/procstat';
import type { Reporter } from './lib/report';
import { checkGoals } from './lib/budgets';
import { ratio, round } from './lib/stats';
import type { PgCounts } from './lib/pg-counts';
import { MEMORY_PRELOAD, startBenchWorld, type BenchWorld } from './lib/world';
import { breakdown, MEMORY_COLUMNS, memoryNote, memoryRow, readMemorySnapshot, type MemorySnapshot } from './lib/memory';

export interface OpenTasksOptions {
  readonly tasks: number;
  readonly createConcurrency: number;
  /** The poll interval every task settles at (POLL_INITIAL_MS = POLL_MAX_MS). */
  readonly pollMs: number;
  readonly generationMs: number;
  /** Measured idle seconds once every task waits on the provider. */
  readonly idleSeconds: number;
  readonly historySample: number;
  /** Give up bringing tasks to the provider after this long. */
  readonly timeoutS: number;
  /** Worker env over the config defaults (WORKER_MAX_CACHED_WORKFLOWS, …). */
  readonly workerEnv: Record<string, string>;
  readonly skipBaseline: boolean;
  /** Fail the run (exit 1) when a goal of issue #19 is missed. */
  readonly check: boolean;
  /** Profile both workers (node --cpu-prof) and print where their CPU went in their idle windows. */
  readonly cpuProfile?: boolean;
}

interface IdleResult {
  readonly mode: string;
  readonly open: number;
  readonly rssStartMb: number;
  readonly rssMaxMb: number;
  readonly rssEndMb: number;
  /** Where the worker's memory was (bench/lib/memory-preload.mjs): before the tasks, at the window's highest RSS, at its end. */
  readonly memory: { readonly start: MemorySnapshot | null; readonly peak: MemorySnapshot | null; readonly end: MemorySnapshot | null };
  readonly cpu: CpuUsage;
  /** Polls during the window: provider status reads (real), pollProvider runs (bare). */
  readonly pollsInWindow: number;
  /** Seconds the phase ran with every loop waiting before its window (one poll interval at least). */
  readonly settleSeconds: number;
  /** Polls per second over the window, and the best 10 s window. */
  readonly pollsPerSecond: number | null;
  readonly pollsPeak10s: number | null;
  readonly historyStart: number;
  readonly historyEnd: number;
  readonly historyMax: number;
  readonly sampled: number;
  readonly windowSeconds: number;
  /** The window on the profiles' clock (bench/lib/cpuprofile.ts). */
  readonly span: ProfileWindow;
  /** The database's counts in the window (bench/lib/pg-counts.ts; real phase only). */
  readonly queries: PgCounts | null;
}

/**
 * How both phases' loops are paced, from the product's own settings: the poll queue's rate
 * (activities/poll-demand.ts pollRateFor: below the quota by the limiter's bursts) and the demand
 * floor its wait loops settle at (N jobs read in turn at rate × POLL_QUOTA_SHARE) when that is
 * longer than the poll interval. The bare loops get the same rate and the same floor, so both
 * phases poll alike.
 */
interface Pace {
  /** The account's query quota the product polls within: POLL_QUEUE_RATES when set, else the adapter's. */
  readonly quota: number;
  readonly queueRate: number;
  /** 0 when the demand fits the queue's rate at its share. */
  readonly floorMs: number;
  /** A loop's mean interval between polls: the floor, or the poll interval when longer. */
  readonly cycleMs: number;
  /**
   * How long a phase runs, once its last loop waits, before its window: twice the longest
   * interval (the poll interval +20 %, the floor +10 %) and 10 s for the last workflow tasks, so
   * every loop is in the state it keeps for the rest of a long job. A bare loop is after its
   * first poll; a real task after its second: its first read finds the job running and moves it
   * from SUBMITTED to RUNNING, which ends that wait (the workflow applies it and times the next
   * one), and from the next wait's first read on its polls are the retries of one activity
   * (docs/decisions/0050-waits-in-activity-retries.md). A window before that measures the
   * once-per-task start of the wait, not the waiting; the history lengths at its start and end
   * show which it caught (a real task in its steady state adds no events).
   */
  readonly settleMs: number;
  /**
   * The window: `--idle`, and at least one cycle, so that every loop polls about once in it
   * whichever part of a poll wave it starts in (the loops start within a minute of each other,
   * and the queue's rate spreads their first polls into waves).
   */
  readonly windowSeconds: number;
}

function paceOf(o: OpenTasksOptions, config: Config, open: number): Pace {
  const deps = { providers: buildProviders(config), settings: activitySettings(config) };
  const quota = pollQuotaFor(deps, 'replicate') ?? NaN;
  const queueRate = pollRateFor(deps, 'replicate') ?? NaN;
  const floorMs = Number.isFinite(queueRate) ? demandFloorMs(open, queueRate, config.POLL_QUOTA_SHARE) : 0;
  const cycleMs = Math.max(o.pollMs, floorMs);
  return {
    quota,
    queueRate,
    floorMs: floorMs > o.pollMs ? floorMs : 0,
    cycleMs,
    settleMs: 2 * Math.ceil(Math.max(o.pollMs * 1.2, floorMs * 1.1)) + 10_000,
    windowSeconds: Math.max(o.idleSeconds, Math.ceil(cycleMs / 1000)),
  };
}

const BODY = (i: number) => ({ model: 'minimax/video-01', prompt: `bench open-tasks ${i}`, duration_seconds: 6, resolution: '720p' }) as const;
const mb = (b: number | null) => (b ?? 0) / 2 ** 20;

async function historyLengths(bw: BenchWorld, ids: string[], sample: number): Promise<number[]> {
  const out: number[] = [];
  const step = Math.max(1, Math.floor(ids.length / Math.max(1, sample)));
  for (let i = 0; i < ids.length && out.length < sample; i += step) {
    // A busy dev server answers a describe now and then with a transient error (its namespace
    // cache timing out): asked again, a few times, before the run gives up.
    for (let attempt = 1; ; attempt++) {
      try {
        out.push((await bw.world.client.workflow.getHandle(ids[i]!).describe()).historyLength);
        break;
      } catch (err) {
        if (attempt >= 5) throw err;
        await sleep(1_000 * attempt);
      }
    }
  }
  return out;
}
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);

/**
 * The settle time (settleMs), then the measured idle window: RSS every second, CPU per group,
 * polls (`polls`: a running count), and the database's counts when `pgCounts` is given.
 */
async function idleWindow(
  bw: BenchWorld,
  pace: Pace,
  o: OpenTasksOptions,
  rep: Reporter,
  label: string,
  ids: string[],
  groups: () => Promise<Record<string, number[]>>,
  workerPid: number,
  polls: () => number,
  memoryFile: string,
  pgCounts?: () => Promise<PgCounts>,
): Promise<Omit<IdleResult, 'mode' | 'open' | 'rssStartMb' | 'memory'> & { memory: { peak: MemorySnapshot | null; end: MemorySnapshot | null } }> {
  const settleStart = Date.now();
  const settleUntil = settleStart + pace.settleMs;
  const polls0 = polls();
  while (Date.now() < settleUntil) {
    await sleep(Math.min(5_000, Math.max(0, settleUntil - Date.now())));
    rep.log(
      `[open-tasks ${label} settle] ${((Date.now() - settleStart) / 1000).toFixed(0).padStart(3)}/${(pace.settleMs / 1000).toFixed(0)} s  ` +
        `polls ${polls() - polls0}  worker RSS ${mb(processRss(workerPid)).toFixed(0)} MB${memoryNote(readMemorySnapshot(memoryFile))}`,
    );
  }
  const settleSeconds = (Date.now() - settleStart) / 1000;
  const h0 = await historyLengths(bw, ids, o.historySample);
  const reads: number[] = [];
  let rssMax = 0;
  let rssEnd = 0;
  let readsStart = 0;
  let memoryPeak: MemorySnapshot | null = null;
  const span = { fromUs: 0, toUs: 0 };
  const m = await measured({ cpuGroups: groups, ...(pgCounts ? { pgCounts } : {}) }, async () => {
    readsStart = polls();
    span.fromUs = hrtimeUs();
    const t0 = Date.now();
    for (let s = 0; s < pace.windowSeconds; s++) {
      await sleep(Math.max(0, t0 + (s + 1) * 1000 - Date.now()));
      const rss = mb(processRss(workerPid));
      rssMax = Math.max(rssMax, rss);
      rssEnd = rss;
      const snapshot = readMemorySnapshot(memoryFile);
      if (snapshot && snapshot.rss > (memoryPeak?.rss ?? 0)) memoryPeak = snapshot;
      reads.push(polls());
      const rate = reads.length >= 2 ? reads[reads.length - 1]! - reads[reads.length - 2]! : null;
      rep.log(
        `[open-tasks ${label} idle] ${String(s + 1).padStart(3)}/${pace.windowSeconds} s  worker RSS ${rss.toFixed(0)} MB${rate === null ? '' : `  polls ${rate}/s`}${memoryNote(snapshot)}`,
      );
    }
    span.toUs = hrtimeUs();
  });
  const memoryEnd = readMemorySnapshot(memoryFile);
  const h1 = await historyLengths(bw, ids, o.historySample);
  let peak: number | null = null;
  if (reads.length > 10) {
    peak = 0;
    for (let i = 10; i < reads.length; i++) peak = Math.max(peak, (reads[i]! - reads[i - 10]!) / 10);
  }
  return {
    cpu: m.cpu,
    pollsInWindow: (reads[reads.length - 1] ?? readsStart) - readsStart,
    settleSeconds,
    pollsPerSecond: reads.length >= 2 ? (reads[reads.length - 1]! - reads[0]!) / (reads.length - 1) : null,
    pollsPeak10s: peak,
    historyStart: mean(h0),
    historyEnd: mean(h1),
    historyMax: Math.max(...h1),
    sampled: h1.length,
    rssMaxMb: rssMax,
    rssEndMb: rssEnd,
    memory: { peak: memoryPeak, end: memoryEnd },
    windowSeconds: m.cpu.seconds,
    span,
    queries: m.queries,
  };
}

async function countWaiting(bw: BenchWorld): Promise<Record<string, number>> {
  const { rows } = await bw.world.db.pool.query<{ status: string; n: number }>('SELECT status, count(*)::int AS n FROM generation_task GROUP BY status');
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

async function runReal(
  bw: BenchWorld,
  pace: Pace,
  o: OpenTasksOptions,
  rep: Reporter,
): Promise<
  IdleResult & { ids: string[]; createSeconds: number; reachSeconds: number; profileDir: string | null; throttled: ThrottleCounts; createPace: PaceCounts }
> {
  const api = await bw.startApi('api', { OUTBOX_WATERMARK_COUNT: String(o.tasks * 10) });
  const worker = await bw.startWorker('worker-0', { PUBLIC_BASE_URL: api.url, ...o.workerEnv }, { cpuProfile: o.cpuProfile === true, memory: true });
  const memoryFile = worker.memoryFile!;
  const [tenant] = await bw.createTenants(1);
  const http = createTaskClient(api.url, o.createConcurrency, { timeoutMs: 60_000 });
  const vidorch = http.as(tenant!.apiKey);
  const prefix = `open-${randomUUID().slice(0, 8)}`;
  let refusals = 0;
  const create = async (i: number): Promise<string> => {
    // A 503 (a busy shared Postgres, the outbox watermark) is retried with the same key, a bounded number of times.
    for (let attempt = 0; ; attempt++) {
      const res = await createTask(vidorch, `${prefix}-${i}`, BODY(i));
      if (res.status === 503 && attempt < 20) {
        refusals++;
        await sleep(1_000);
        continue;
      }
      if (res.taskId === null) throw new Error(`create answered ${res.status}: ${res.problem}`);
      return res.taskId;
    }
  };
  // Warm-up: one task to the provider; the worker's RSS then is the "before" figure.
  const warm = await create(-1);
  await waitUntil(
    async () => {
      const { rows } = await bw.world.db.pool.query<{ status: string }>('SELECT status FROM generation_task WHERE task_id = $1', [warm]);
      return rows[0]?.status === 'SUBMITTED' || rows[0]?.status === 'RUNNING';
    },
    { timeoutMs: 120_000, intervalMs: 250, what: 'the warm-up task to reach the provider' },
  );
  const rssStartMb = mb(processRss(worker.proc.pid));
  const memoryStart = readMemorySnapshot(memoryFile);
  rep.log(`open-tasks: warm-up task at the provider; worker RSS ${rssStartMb.toFixed(0)} MB`);

  const ids: string[] = [warm];
  const t0 = performance.now();
  let next = 0;
  let stopProgress = false;
  const progress = (async () => {
    while (!stopProgress) {
      await sleep(2_000);
      const s = await countWaiting(bw);
      const at = (s['SUBMITTED'] ?? 0) + (s['RUNNING'] ?? 0);
      rep.log(
        `[open-tasks real] ${((performance.now() - t0) / 1000).toFixed(0).padStart(4)} s  created ${ids.length - 1}/${o.tasks}  at the provider ${at}  ` +
          `(${Object.entries(s)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')})  worker RSS ${mb(processRss(worker.proc.pid)).toFixed(0)} MB${memoryNote(readMemorySnapshot(memoryFile))}`,
      );
    }
  })();
  let createSeconds = 0;
  let reachSeconds = NaN;
  try {
    await Promise.all(
      Array.from({ length: o.createConcurrency }, async () => {
        while (next < o.tasks) ids.push(await create(next++));
      }),
    );
    createSeconds = (performance.now() - t0) / 1000;
    rep.log(`open-tasks: ${o.tasks} tasks created in ${createSeconds.toFixed(0)} s (${refusals} answers 503, retried); waiting until all are at the provider`);
    const deadline = Date.now() + o.timeoutS * 1000;
    let best = 0;
    let bestAt = Date.now();
    for (;;) {
      const s = await countWaiting(bw);
      const at = (s['SUBMITTED'] ?? 0) + (s['RUNNING'] ?? 0);
      if (at >= ids.length) break;
      if (at > best) [best, bestAt] = [at, Date.now()];
      // A straggler (a step retrying) must not hold the measurement: 60 s without progress ends the wait.
      if (Date.now() > deadline || Date.now() - bestAt > 60_000) {
        rep.log(
          `open-tasks: ${at}/${ids.length} at the provider, no progress for ${((Date.now() - bestAt) / 1000).toFixed(0)} s; measuring what is open (${JSON.stringify(s)})`,
        );
        break;
      }
      await sleep(1_000);
    }
    reachSeconds = (performance.now() - t0) / 1000;
  } finally {
    stopProgress = true;
    await progress;
    http.close();
  }
  // How the intake went through the provider's create pace (docs/decisions/0069), read before the window.
  const createPace = await paceCounts(worker.metricsUrl);
  const s = await countWaiting(bw);
  const open = (s['SUBMITTED'] ?? 0) + (s['RUNNING'] ?? 0);
  const w = await idleWindow(
    bw,
    pace,
    o,
    rep,
    'real',
    ids.map(workflowIdForTask),
    async () => ({ worker: [worker.proc.pid], api: [api.proc.pid], postgres: await bw.backendPids(), temporal: bw.temporalPids() }),
    worker.proc.pid,
    () => bw.world.sim.stats().status_reads,
    memoryFile,
    bw.pgCounts,
  );
  // A profile is written when its process exits.
  await worker.proc.stop('SIGTERM', 15_000);
  await api.proc.stop('SIGTERM', 5_000);
  return {
    mode: 'real: waiting on the provider',
    open,
    rssStartMb,
    ...w,
    memory: { start: memoryStart, ...w.memory },
    ids,
    // Requests the simulated account throttled over the whole phase (its documented limits).
    throttled: bw.world.sim.stats().replicate_throttled,
    createPace,
    createSeconds,
    reachSeconds,
    profileDir: worker.profileDir,
  };
}

/** Terminates every open workflow (a batch operation) so the next phase has the server to itself. */
async function terminateAll(bw: BenchWorld, rep: Reporter): Promise<void> {
  const client = bw.world.client;
  const batch = () =>
    client.workflowService.startBatchOperation({
      namespace: bw.world.config.TEMPORAL_NAMESPACE,
      jobId: randomUUID(),
      reason: 'bench open-tasks: phase over',
      visibilityQuery: 'ExecutionStatus = "Running"',
      terminationOperation: {},
    });
  await batch();
  const deadline = Date.now() + 300_000;
  let last = -1;
  let since = Date.now();
  for (;;) {
    const { count } = await client.workflow.count('ExecutionStatus = "Running"');
    rep.log(`open-tasks: terminating the phase's workflows, ${count} still running`);
    if (count === 0 || Date.now() > deadline) return;
    if (count !== last) [last, since] = [count, Date.now()];
    else if (Date.now() - since > 30_000) {
      // Runs the batch did not list (started after it, a reschedule, a continue-as-new): again.
      await batch();
      since = Date.now();
    }
    await sleep(3_000);
  }
}

/**
 * The bare queue's global activity rate is the real poll queue's (`pace.queueRate`), and the bare
 * loops wait the real loops' interval raised to the same demand floor (`pace.floorMs`): where
 * the demand exceeds the rate, both phases' polls wait in their queues alike (only the polls are
 * regular activities; the apply is local).
 */
async function runBare(bw: BenchWorld, pace: Pace, o: OpenTasksOptions, rep: Reporter): Promise<IdleResult & { profileDir: string | null }> {
  const queue = `bench-open-bare-${randomUUID().slice(0, 8)}`;
  const countFile = path.join(bw.logDir, 'bare-worker.activities.json');
  const memoryFile = path.join(bw.logDir, 'bare-worker.memory.json');
  const profileDir = o.cpuProfile ? path.join(bw.logDir, 'bare-worker.cpuprofile') : null;
  const worker: ManagedProcess = startWorkerProcess(
    'bare-worker',
    'bench/workflows/bare-worker.ts',
    {
      ...configToEnv(bw.world.config),
      LOG_LEVEL: 'warn',
      ...o.workerEnv,
      BENCH_ACTIVITY_COUNT_FILE: countFile,
      NODE_OPTIONS: [process.env['NODE_OPTIONS'] ?? '', `--import=${MEMORY_PRELOAD}`].join(' ').trim(),
      BENCH_MEMORY_FILE: memoryFile,
      ...(Number.isFinite(pace.queueRate) ? { BENCH_TASK_QUEUE_ACTIVITIES_PER_SECOND: String(pace.queueRate) } : {}),
    },
    {
      args: [queue, 'pollProvider,applyInbox'],
      log: fileLogger(path.join(bw.logDir, 'bare-worker.log')),
      ...(profileDir ? { nodeArgs: ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] } : {}),
    },
  );
  try {
    await waitUntil(async () => worker.recentOutput().some((l) => l.includes('bare worker polling')), {
      process: worker,
      timeoutMs: 120_000,
      what: 'the bare worker',
    });
    const client = bw.world.client;
    const tenantId = randomUUID();
    const start = (i: number) =>
      client.workflow.start<typeof barePollingWorkflow>('barePollingWorkflow', {
        taskQueue: queue,
        workflowId: `bare-open-${i}-${randomUUID()}`,
        args: [o.pollMs, pace.floorMs, String(i)],
        typedSearchAttributes: [
          { key: SA_TASK_STATUS, value: 'RUNNING' },
          { key: SA_TENANT_ID, value: tenantId },
          { key: SA_PROVIDER, value: 'replicate' },
        ],
      });
    await start(-1);
    await sleep(2_000);
    const rssStartMb = mb(processRss(worker.pid));
    const memoryStart = readMemorySnapshot(memoryFile);
    const ids: string[] = [];
    let next = 0;
    const t0 = performance.now();
    const progress = setInterval(
      () =>
        rep.log(
          `[open-tasks bare] ${((performance.now() - t0) / 1000).toFixed(0).padStart(4)} s  started ${ids.length}/${o.tasks}  worker RSS ${mb(processRss(worker.pid)).toFixed(0)} MB${memoryNote(readMemorySnapshot(memoryFile))}`,
        ),
      2_000,
    );
    try {
      await Promise.all(
        Array.from({ length: o.createConcurrency }, async () => {
          while (next < o.tasks) ids.push((await start(next++)).workflowId);
        }),
      );
    } finally {
      clearInterval(progress);
    }
    // The bare worker's count of no-op polls, written every second.
    const polls = () => {
      try {
        return (JSON.parse(fs.readFileSync(countFile, 'utf8')) as { pollProvider?: number }).pollProvider ?? 0;
      } catch {
        return 0;
      }
    };
    const w = await idleWindow(
      bw,
      pace,
      o,
      rep,
      'bare',
      ids,
      async () => ({ worker: [worker.pid], temporal: bw.temporalPids() }),
      worker.pid,
      polls,
      memoryFile,
    );
    return {
      mode: 'bare: the wait loop, no-op activities',
      open: ids.length,
      rssStartMb,
      ...w,
      memory: { start: memoryStart, ...w.memory },
      profileDir,
    };
  } finally {
    await worker.stop('SIGTERM', 15_000);
  }
}

export async function runOpenTasks(o: OpenTasksOptions, rep: Reporter): Promise<void> {
  const bw = await startBenchWorld(
    'open-tasks',
    {
      SIMULATOR_GENERATION_MS: String(o.generationMs),
      POLL_INITIAL_MS: String(o.pollMs),
      POLL_MAX_MS: String(o.pollMs),
    },
    (l) => rep.log(`open-tasks: ${l}`),
  );
  try {
    // The operator bulkhead at N: every task gets its job (the adapter's default is 50 in flight).
    await bw.world.db.pool.query(
      `INSERT INTO provider_control (provider, max_in_flight, reason, updated_by) VALUES ('replicate', $1, 'bench open-tasks', 'bench')
       ON CONFLICT (provider) DO UPDATE SET max_in_flight = EXCLUDED.max_in_flight`,
      [o.tasks + 100],
    );
    // Both phases' pace: the quota, the queue's rate and the demand floor of N + 1 waiting jobs (the warm-up task's too).
    const pace = paceOf(o, bw.world.config, o.tasks + 1);
    const quota = pace.quota;
    rep.log(
      `open-tasks: poll queue rate ${pace.queueRate}/s for a quota of ${quota}/s; demand floor ${(pace.floorMs / 1000).toFixed(0)} s; ` +
        `settle ${(pace.settleMs / 1000).toFixed(0)} s, window ${pace.windowSeconds} s (one cycle at least)`,
    );
    const real = await runReal(bw, pace, o, rep);
    rep.log(`open-tasks: cpu (real, idle) ${describeCpu(real.cpu)}`);
    if (real.queries) {
      const per = real.pollsInWindow;
      const perPoll = (n: number) => (per > 0 ? (n / per).toFixed(1) : '-');
      const q = real.queries;
      rep.log(`open-tasks: the database's commits in the idle window: ${q.commits} (${perPoll(q.commits)} per poll, ${per} polls; every process's)`);
      if (!Number.isNaN(q.total))
        rep.table(
          `open-tasks: the database's statements in the idle window: ${q.total} (${perPoll(q.total)} per poll; the relays, reconcilers and samplers included)`,
          ['statement', 'per poll', 'count'],
          topStatements(q, per, 16).map((t) => [t.statement, Number.isFinite(t.perUnit) ? round(t.perUnit, 2) : '-', t.count]),
        );
    }
    const profiled = (p: IdleResult & { profileDir: string | null }, what: string) => {
      // The window's CPU by area and function, and per poll: the two phases poll at different rates.
      if (!p.profileDir) return;
      const summary = summarizeProfiles(p.profileDir, { top: 25, window: p.span });
      const perPoll = summary && p.pollsInWindow > 0 ? `, ${(summary.totalMs / p.pollsInWindow).toFixed(1)} ms per poll` : '';
      printProfile(rep, `open-tasks: ${what}, the ${p.windowSeconds.toFixed(0)} s idle window${perPoll}`, summary);
    };
    profiled(real, 'real worker');
    const phases: IdleResult[] = [real];
    if (!o.skipBaseline) {
      await terminateAll(bw, rep);
      const bare = await runBare(bw, pace, o, rep);
      rep.log(`open-tasks: cpu (bare, idle) ${describeCpu(bare.cpu)}`);
      profiled(bare, 'bare worker');
      phases.push(bare);
    }
    const bare = phases[1];
    // A ratio compares the two phases' steady states: each phase's loops polled in its window.
    const noPolls = phases.filter((p) => p.pollsInWindow <= 0);
    const unmeasured = !bare
      ? 'no baseline'
      : noPolls.length > 0
        ? `not measured: ${noPolls
            .map(
              (p) =>
                `the ${p === real ? 'real' : 'bare'} loops did not poll during the window (history length ${round(p.historyStart, 1)} → ${round(p.historyEnd, 1)})`,
            )
            .join('; ')}`
        : null;
    if (unmeasured && bare) rep.log(`open-tasks: no ratio printed: ${unmeasured}`);
    const vsBare = (x: number, b: number) => (unmeasured ? NaN : ratio(x, b));
    const cpuOf = (p: IdleResult | undefined) => (p ? (p.cpu.cores['worker'] ?? 0) + (p.cpu.cores['temporal'] ?? 0) : NaN);
    const knobs =
      Object.entries(o.workerEnv)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ') || 'config defaults';
    rep.table(
      `open-tasks: ${o.tasks} tasks waiting, poll every ${o.pollMs / 1000} s (±20 %)${pace.floorMs > 0 ? `, raised to the demand floor ${(pace.floorMs / 1000).toFixed(0)} s (±10 %)` : ''}, queue rate ${pace.queueRate}/s, ${real.windowSeconds.toFixed(0)} s idle window; worker: ${knobs} (ratio = real / bare)`,
      [
        'mode',
        'open',
        'RSS start MB',
        'RSS max MB',
        'RSS ratio',
        'cores: worker',
        'ratio',
        'temporal',
        '(worker + temporal) core-ms / poll',
        'postgres',
        'api',
        'machine busy',
        'history len start',
        'end',
        'max',
        'ratio',
        'settle s',
        'polls in window',
        'polls/s',
        'peak 10 s',
        'quota/s',
      ],
      phases.map((p) => [
        p.mode,
        p.open,
        round(p.rssStartMb, 0),
        round(p.rssMaxMb, 0),
        round(vsBare(p.rssMaxMb, bare?.rssMaxMb ?? NaN), 2),
        round(p.cpu.cores['worker'] ?? 0, 3),
        round(vsBare(p.cpu.cores['worker'] ?? 0, bare?.cpu.cores['worker'] ?? NaN), 2),
        round(p.cpu.cores['temporal'] ?? 0, 3),
        p.pollsInWindow > 0 ? round((cpuOf(p) * p.windowSeconds * 1000) / p.pollsInWindow, 1) : null,
        round(p.cpu.cores['postgres'] ?? 0, 3),
        round(p.cpu.cores['api'] ?? 0, 3),
        `${p.cpu.machineBusyCores.toFixed(2)}/${p.cpu.machineCores}`,
        round(p.historyStart, 1),
        round(p.historyEnd, 1),
        p.historyMax,
        round(vsBare(p.historyEnd, bare?.historyEnd ?? NaN), 2),
        round(p.settleSeconds, 0),
        p.pollsInWindow,
        p.pollsPerSecond === null ? null : round(p.pollsPerSecond, 2),
        p.pollsPeak10s === null ? null : round(p.pollsPeak10s, 2),
        p === real ? quota : null,
      ]),
    );
    // Where each worker's RSS is (bench/lib/memory-preload.mjs), before the tasks and at the window's peak.
    rep.table(
      `open-tasks: where the worker's RSS is, MB (V8 heaps: used/resident; native = anonymous pages in no V8 heap: Temporal's core, Node's and V8's mallocs, external buffers, free allocator pages)`,
      ['mode', 'when', ...MEMORY_COLUMNS],
      phases.flatMap((p) =>
        (['start', 'peak', 'end'] as const).flatMap((when) => {
          const s = p.memory[when];
          return s ? [[p === real ? 'real' : 'bare', when, ...memoryRow(breakdown(s))]] : [];
        }),
      ),
    );
    const demand = o.tasks / (o.pollMs / 1000);
    rep.log(
      `open-tasks: created in ${real.createSeconds.toFixed(0)} s, all at the provider after ${real.reachSeconds.toFixed(0)} s; ` +
        `poll demand N / interval = ${demand.toFixed(1)}/s against a quota of ${quota}/s`,
    );
    rep.log(
      `open-tasks: the create pace over the intake: ${real.createPace.calls} provider calls, ${real.createPace.waits} claims sent to wait ` +
        `(${(real.createPace.waits / Math.max(1, real.createPace.calls)).toFixed(2)} a call; docs/decisions/0069)`,
    );
    // Issue #19: the waiting tasks cost no more than the bare wait loops, in memory and in the
    // CPU of the two processes both phases have (the worker and Temporal; the real phase also
    // has an API and Postgres, printed above, which the bare one does not).
    const rssRatio = vsBare(real.rssMaxMb, bare?.rssMaxMb ?? NaN);
    const cpuRatio = vsBare(cpuOf(real), cpuOf(bare));
    // Not measured is not met: --check fails on it.
    const ratioGoals = [
      {
        name: 'worker RSS max ÷ bare wait loops',
        target: '≤ 1.00',
        measured: unmeasured ?? `${round(real.rssMaxMb, 0)} MB ÷ ${round(bare!.rssMaxMb, 0)} MB = ${round(rssRatio, 2).toFixed(2)}`,
        met: rssRatio <= 1,
      },
      {
        name: '(worker + Temporal) cores ÷ bare wait loops',
        target: '≤ 1.00',
        measured: unmeasured ?? `${round(cpuOf(real), 3)} ÷ ${round(cpuOf(bare), 3)} = ${round(cpuRatio, 2).toFixed(2)}`,
        met: cpuRatio <= 1,
      },
      { name: 'tasks waiting on the provider', target: `${o.tasks + 1}`, measured: `${real.open}`, met: real.open >= o.tasks + 1 },
    ];
    const goals = [
      ...ratioGoals,
      { name: 'worker RSS (max over the idle window)', target: '≤ 400 MB', measured: `${round(real.rssMaxMb, 0)} MB`, met: real.rssMaxMb <= 400 },
      {
        name: 'provider polls/s (best 10 s) within the query quota',
        target: `≤ ${quota}/s`,
        measured: real.pollsPeak10s === null ? '-' : `${round(real.pollsPeak10s, 2)}/s`,
        met: real.pollsPeak10s !== null && real.pollsPeak10s <= quota,
      },
      {
        name: `Replicate requests throttled (the account's limits, ${bw.world.config.SIMULATOR_REPLICATE_RATE_LIMITS} a minute)`,
        target: '0',
        measured: `${real.throttled.create} creates, ${real.throttled.other} others`,
        met: real.throttled.create + real.throttled.other === 0,
      },
    ];
    rep.goals(goals);
    // The absolute RSS figure (issue #7) is a property of the SDK's worker on this machine
    // (docs/performance.md, "Worker memory"); the check holds the ratios and the polls.
    checkGoals(rep, 'open-tasks', [...ratioGoals, ...goals.slice(-2)], o.check);
    rep.result({
      bench: 'open-tasks',
      options: o,
      quota,
      pollDemandPerSecond: demand,
      createSeconds: real.createSeconds,
      reachSeconds: real.reachSeconds,
      createPace: real.createPace,
      phases: phases.map((p) => ({
        ...p,
        cpu: undefined,
        cores: Object.fromEntries(Object.entries(p.cpu.cores).map(([k, v]) => [k, round(v, 3)])),
        machineBusyCores: round(p.cpu.machineBusyCores, 2),
        rssRatio: round(vsBare(p.rssMaxMb, bare?.rssMaxMb ?? NaN), 3),
        workerTemporalCores: round(cpuOf(p), 3),
        cpuRatio: round(vsBare(cpuOf(p), cpuOf(bare)), 3),
        ids: undefined,
        queries: undefined,
        memory: Object.fromEntries(Object.entries(p.memory).map(([k, v]) => [k, v ? breakdown(v) : null])),
      })),
      unmeasured,
      goals,
    });
  } finally {
    await bw.close();
  }
}

/** The worker's create-pace counters (vidorch_provider_refusals_total{guard="pace"}) and its provider calls, summed over providers. */
interface PaceCounts {
  readonly calls: number;
  /** Claims the pace sent to wait (docs/decisions/0069). */
  readonly waits: number;
}

async function paceCounts(metricsUrl: string): Promise<PaceCounts> {
  const counts = { calls: 0, waits: 0 };
  const res = await fetch(metricsUrl, { signal: AbortSignal.timeout(5_000) });
  for (const m of parseMetrics(await res.text())) {
    if (m.name === 'vidorch_provider_calls_total') counts.calls += m.value;
    if (m.name === 'vidorch_provider_refusals_total' && m.labels['guard'] === 'pace') counts.waits += m.value;
  }
  return counts;
}
