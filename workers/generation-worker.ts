// The workers that run generation workflows and their activities. Used by workers/main.ts, the
// tests and the scripts, so all of them run the same thing: one worker on the generation queue
// (every workflow, the reconciler Schedules' included; every task activity; the fact steps' local
// attempts), one on the reconcile queue for the reconcilers' activity, and one per configured
// provider on that provider's poll queue (provider reads only), whose global dispatch rate is
// the provider's query quota (docs/design.md §5 "Polling"; docs/providers.md "Poll queues").
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { Client } from '@temporalio/client';
import type { DatabaseHost } from '../db/client';
import {
  bundleWorkflowCode,
  type ActivityInterceptorsFactory,
  type NativeConnection,
  Worker,
  type WorkflowBundle,
  type WorkerDeploymentOptions,
  type WorkflowBundleOption,
} from '@temporalio/worker';
import { createTaskActivities, type TaskActivities, type TaskActivityDeps } from '../activities';
import type { ReconcileActivities } from '../activities/reconcile';
import { redactActivityFailures } from '../observability/redact';
import type { WorkerTracing } from '../observability/tracing';
import { queues } from '../temporal/queues';
import { tuningOptions, type WorkerTuning } from './tuning';
import { pollRateFor } from '../activities/poll-demand';
import { createTaskWaker } from '../temporal/wakes';
import { createGenerationFacade } from '../temporal/facade';
import { startSlotGrantWaker, type SlotGrantWaker } from './slot-grant-waker';
import { grantFreeSlots } from '../db/slot-queue';

export const WORKFLOWS_PATH = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'workflows', 'index.ts');

/**
 * The OpenTelemetry workflow interceptors (a span per workflow run and per scheduled activity,
 * joined to the start's trace). They add no command and no yield point, so a history replays
 * with or without them (test/workflows/replay.test.ts replays every fixture with both bundles).
 */
export const TRACING_WORKFLOW_INTERCEPTORS = createRequire(import.meta.url).resolve('@temporalio/interceptors-opentelemetry/lib/workflow-interceptors');

/**
 * Loaded once into the workflow thread's shared context instead of once per cached workflow (the
 * SDK's reusable context evaluates every other module again for each workflow it creates): the
 * workflow API and our workflow modules, whose module scope holds constants and activity proxies
 * only — no per-workflow state (the SDK freezes what it shares). With the fact steps built once
 * (workflows/generation.ts FACT_STEPS): 108.6 → 82.3 KB of heap per cached workflow, and less
 * work for each replay of an evicted one (docs/performance.md, "Worker memory").
 */
const PRELOADED_WORKFLOW_MODULES = ['@temporalio/workflow', WORKFLOWS_PATH];

/**
 * Bundles the workflow code once (webpack); pass the result to every worker of a process.
 * `tracing`: with the workflow interceptors; only for a worker given `tracing` (tracing on).
 */
export function bundleWorkflows(opts: { tracing?: boolean } = {}): Promise<WorkflowBundle> {
  return bundleWorkflowCode({
    workflowsPath: WORKFLOWS_PATH,
    preloadModules: PRELOADED_WORKFLOW_MODULES,
    logger: quietBundlerLogger,
    ...(opts.tracing ? { workflowInterceptorModules: [TRACING_WORKFLOW_INTERCEPTORS] } : {}),
  });
}

const BUNDLE_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'bundle-workflows.ts');

/**
 * The same bundle, built by a short-lived child process (workers/bundle-workflows.ts) with this
 * process's Node and loader flags: a worker that bundles in-process keeps webpack's ~100 MB
 * for its whole life (docs/performance.md).
 */
export async function bundleWorkflowsInChild(opts: { tracing?: boolean } = {}): Promise<WorkflowBundle> {
  const out = path.join(os.tmpdir(), `vidorch-workflows-${process.pid}-${randomBytes(4).toString('hex')}.js`);
  const flags = process.execArgv.filter((a) => !a.startsWith('--inspect') && !a.startsWith('--cpu-prof'));
  try {
    await execFileAsync(process.execPath, [...flags, BUNDLE_SCRIPT, out, ...(opts.tracing ? ['--tracing'] : [])], { maxBuffer: 16 * 1024 * 1024 });
    return { code: await fs.readFile(out, 'utf8') };
  } finally {
    await fs.rm(out, { force: true });
  }
}

/** The bundles `npm run build` writes beside the worker's entry point (scripts/build.ts). */
export const BUILT_WORKFLOW_BUNDLES = { plain: 'workflow-bundle.js', tracing: 'workflow-bundle-tracing.js' } as const;

/**
 * The worker process's workflow bundle: in a build (dist/, run with node), the one made at build
 * time, which the SDK loads by path; from sources (the dev stack, the tests' worker processes),
 * one made now by bundleWorkflowsInChild.
 */
export async function loadWorkflowBundle(opts: { tracing?: boolean } = {}): Promise<WorkflowBundleOption> {
  const here = fileURLToPath(import.meta.url);
  if (here.endsWith('.ts')) return bundleWorkflowsInChild(opts);
  const codePath = path.join(path.dirname(here), BUILT_WORKFLOW_BUNDLES[opts.tracing ? 'tracing' : 'plain']);
  // A build without its bundle is a broken build: never fall back to webpack in production.
  await fs.access(codePath).catch((err: unknown) => {
    throw new Error(`the build has no workflow bundle at ${codePath}: run npm run build`, { cause: err });
  });
  return { codePath };
}

const execFileAsync = promisify(execFile);
const noop = () => undefined;
const quietBundlerLogger = { log: noop, trace: noop, debug: noop, info: noop, warn: noop, error: noop };

/**
 * Every worker's activity interceptors, outermost first. No presigned URL or key in an activity
 * failure (history), its log line or its span: the span's interceptor is outside the redaction,
 * so the failure it records is the redacted one.
 */
export function activityInterceptors(tracing: WorkerTracing | null): ActivityInterceptorsFactory[] {
  return [...(tracing?.activityInterceptors ?? []), redactActivityFailures];
}

/** The activities a poll worker runs: the workflow schedules these on a provider's poll queue. */
export const PROVIDER_READ_ACTIVITIES = ['pollProvider', 'awaitProviderChange'] as const satisfies readonly (keyof TaskActivities)[];

export interface GenerationWorkerOptions {
  readonly connection: NativeConnection;
  readonly namespace: string;
  readonly taskQueueBase: string;
  readonly deps: TaskActivityDeps;
  /** The facts database's URL, for the connection that LISTENs for slot grants (workers/slot-grant-waker.ts). */
  readonly databaseUrl: string;
  /** DATABASE_FAILOVER_HOSTS for the slot-grant waker's LISTEN connection. */
  readonly databaseFailoverHosts?: readonly DatabaseHost[];
  readonly workflowBundle: WorkflowBundleOption;
  /** Slot grants' wake signals in flight at once (WAKE_SIGNALS_MAX_IN_FLIGHT, temporal/wakes.ts). */
  readonly maxWakesInFlight: number;
  /** Prebuilt activities (tests wrap them to count calls); default createTaskActivities(deps). */
  readonly activities?: TaskActivities;
  readonly maxConcurrentActivities?: number;
  readonly shutdownGraceMs?: number;
  readonly identity?: string;
  /** Workflow cache, workflow-task concurrency and pollers (config WORKER_*; SDK defaults when absent). */
  readonly tuning?: WorkerTuning;
  /** Providers that get a poll worker; default every configured provider (deps.providers). */
  readonly pollProviders?: readonly string[];
  /** Tracing on (observability/tracing.ts): activity spans and the workflow span sink; the bundle must be `bundleWorkflows({ tracing: true })`. */
  readonly tracing?: WorkerTracing | null;
  /** With these, a worker on the reconcile queue runs the reconciler workflows' activity (the workflows run on the generation queue: reconcilers/schedules.ts). */
  readonly reconcileActivities?: ReconcileActivities;
  /**
   * Worker Versioning (workers/versioning.ts): every worker of the set polls as this version, so
   * a pinned workflow's activities on the poll and reconcile queues run on its build too. Unset: unversioned.
   */
  readonly deployment?: WorkerDeploymentOptions;
}

/** The generation worker and the poll workers, run and stopped together. */
export interface GenerationWorkers {
  readonly generation: Worker;
  /** Provider → its poll worker. */
  readonly polls: ReadonlyMap<string, Worker>;
  /** The reconcile-queue worker (activities only), when reconcileActivities were given. */
  readonly reconcile: Worker | null;
  /** The global rate each poll queue was given (undefined: the provider declares no quota). */
  readonly pollRates: ReadonlyMap<string, number | undefined>;
  /** Runs every worker; settles when all have stopped. One failing stops the others, then rejects. */
  run(): Promise<void>;
  /** Starts a graceful shutdown of every worker (in-flight activities get the grace time). */
  shutdown(): void;
}

export async function createGenerationWorkers(opts: GenerationWorkerOptions): Promise<GenerationWorkers> {
  const activities = opts.activities ?? createTaskActivities(opts.deps);
  const shutdownGraceTime = opts.shutdownGraceMs ?? 30_000;
  const reads = Object.fromEntries(PROVIDER_READ_ACTIVITIES.map((name) => [name, activities[name]]));
  const providers = opts.pollProviders ?? Object.keys(opts.deps.providers);
  const pollRates = new Map(providers.map((p) => [p, pollRateFor(opts.deps, p)] as const));
  const interceptors = activityInterceptors(opts.tracing ?? null);
  const versioning = opts.deployment ? { workerDeploymentOptions: opts.deployment } : {};
  // Created at once: a standby worker must poll within a second or two of its region becoming active.
  const [generation, ...pollWorkers] = await Promise.all([
    Worker.create({
      connection: opts.connection,
      namespace: opts.namespace,
      taskQueue: queues.generation(opts.taskQueueBase),
      ...versioning,
      workflowBundle: opts.workflowBundle,
      // Every activity, pollProvider included: runs recorded before per-provider poll queues
      // (patch 'per-provider-poll-queues') still schedule their polls here.
      activities,
      maxConcurrentActivityTaskExecutions: opts.maxConcurrentActivities ?? 50,
      // The fact steps' local attempts (docs/decisions/0034-local-fact-steps.md) run here too, as
      // many at once as the regular activities; one left waiting for a slot past its
      // scheduleToClose runs as the regular activity instead.
      maxConcurrentLocalActivityExecutions: opts.maxConcurrentActivities ?? 50,
      interceptors: { activity: interceptors },
      ...(opts.tracing ? { sinks: opts.tracing.sinks } : {}),
      // In-flight activities get this long to finish (or heartbeat out) on shutdown.
      shutdownGraceTime,
      ...(opts.identity ? { identity: opts.identity } : {}),
      ...(opts.tuning ? tuningOptions(opts.tuning) : {}),
    }),
    ...providers.map((provider) => {
      const rate = pollRates.get(provider);
      return Worker.create({
        connection: opts.connection,
        namespace: opts.namespace,
        taskQueue: queues.poll(opts.taskQueueBase, provider),
        ...versioning,
        activities: reads,
        interceptors: { activity: interceptors },
        // Server-side and global: every worker of this queue, in every process, shares it.
        ...(rate !== undefined ? { maxTaskQueueActivitiesPerSecond: rate } : {}),
        maxConcurrentActivityTaskExecutions: opts.maxConcurrentActivities ?? 50,
        shutdownGraceTime,
        ...(opts.identity ? { identity: `${opts.identity}-poll-${provider}` } : {}),
      });
    }),
  ]);
  const polls = new Map(providers.map((p, i) => [p, pollWorkers[i]!]));
  const reconcile = opts.reconcileActivities
    ? await Worker.create({
        connection: opts.connection,
        namespace: opts.namespace,
        taskQueue: queues.reconcile(opts.taskQueueBase),
        ...versioning,
        // Activities only: the reconcile workflows run on the generation worker (their Schedules
        // start them there, reconcilers/schedules.ts), so the process has one workflow thread,
        // not two (a V8 isolate of ~45 MB each: docs/performance.md, "Worker memory").
        activities: opts.reconcileActivities,
        // Reconcilers run one at a time per worker: each is a sweep, not a hot path.
        maxConcurrentActivityTaskExecutions: 2,
        shutdownGraceTime,
        ...(opts.identity ? { identity: `${opts.identity}-reconcile` } : {}),
      })
    : null;
  const all = [generation, ...polls.values(), ...(reconcile ? [reconcile] : [])];
  // Slot grants wake their workflows through the facade, coalesced per task (temporal/wakes.ts).
  const facade = createGenerationFacade(async () => new Client({ connection: opts.connection, namespace: opts.namespace }), opts.taskQueueBase);
  const waker = createTaskWaker((taskId) => facade.wakeTask(taskId), { maxInFlight: opts.maxWakesInFlight });
  let grants: SlotGrantWaker | null = null;
  // Once asked to stop, stay stopped: a shutdown() that comes before or during run() (a failover
  // away while the region supervisor is still starting this process's workers) must not be lost.
  let stopRequested = false;
  const shutdown = () => {
    stopRequested = true;
    const g = grants;
    grants = null;
    void g?.stop();
    for (const w of all) {
      // Only a running worker can be shut down; one already stopping or stopped is left alone.
      if (w.getState() === 'RUNNING') w.shutdown();
    }
  };
  return {
    generation,
    polls,
    reconcile,
    pollRates,
    async run() {
      // Worker.run() makes a worker RUNNING before its first await, so from the next line on a
      // shutdown() reaches every worker. (Started after an awaited step instead, a shutdown()
      // during that step found none RUNNING, skipped them all, and they then polled for good.)
      const runs = all.map((w) =>
        w.run().catch((err: unknown) => {
          shutdown();
          throw err;
        }),
      );
      if (stopRequested) shutdown();
      let started: SlotGrantWaker;
      try {
        started = await startSlotGrantWaker({
          databaseUrl: opts.databaseUrl,
          ...(opts.databaseFailoverHosts ? { failoverHosts: opts.databaseFailoverHosts } : {}),
          wake: (taskId) => waker.wake(taskId),
          grant: async (provider) => {
            await opts.deps.db.transaction((tx) => grantFreeSlots(tx, provider, opts.deps.clock.now()));
          },
        });
      } catch (err) {
        // The workers are already polling: stop them and wait, so a failed start leaves none behind.
        shutdown();
        await Promise.allSettled(runs);
        throw err;
      }
      if (stopRequested) await started.stop();
      else grants = started;
      const results = await Promise.allSettled(runs);
      await grants?.stop();
      grants = null;
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
    shutdown,
  };
}
