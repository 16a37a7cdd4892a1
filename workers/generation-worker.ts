// The workers that run generation workflows and their activities. Used by workers/main.ts, the
// tests and the scripts, so all of them run the same thing: one worker on the generation queue
// (workflows and every task activity) and one per configured provider on that provider's poll
// queue (provider reads only), whose global dispatch rate is the provider's query quota
// (docs/design.md §5 "Polling"; docs/providers.md "Poll queues").
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode, type NativeConnection, Worker, type WorkflowBundle } from '@temporalio/worker';
import { createTaskActivities, type TaskActivities, type TaskActivityDeps } from '../activities';
import type { ReconcileActivities } from '../activities/reconcile';
import { redactActivityFailures } from '../observability/redact';
import { queues } from '../temporal/queues';
import { tuningOptions, type WorkerTuning } from './tuning';
import { pollRateFor } from '../activities/poll-demand';

export const WORKFLOWS_PATH = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'workflows', 'index.ts');

/** Bundles the workflow code once (webpack); pass the result to every worker of a process. */
export function bundleWorkflows(): Promise<WorkflowBundle> {
  return bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: quietBundlerLogger });
}

const BUNDLE_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'bundle-workflows.ts');

/**
 * The same bundle, built by a short-lived child process (workers/bundle-workflows.ts) with this
 * process's Node and loader flags: a worker that bundles in-process keeps webpack's ~100 MB
 * for its whole life (docs/performance.md).
 */
export async function bundleWorkflowsInChild(): Promise<WorkflowBundle> {
  const out = path.join(os.tmpdir(), `vidorch-workflows-${process.pid}-${randomBytes(4).toString('hex')}.js`);
  const flags = process.execArgv.filter((a) => !a.startsWith('--inspect') && !a.startsWith('--cpu-prof'));
  try {
    await execFileAsync(process.execPath, [...flags, BUNDLE_SCRIPT, out], { maxBuffer: 16 * 1024 * 1024 });
    return { code: await fs.readFile(out, 'utf8') };
  } finally {
    await fs.rm(out, { force: true });
  }
}

const execFileAsync = promisify(execFile);
const noop = () => undefined;
const quietBundlerLogger = { log: noop, trace: noop, debug: noop, info: noop, warn: noop, error: noop };

/** The activities a poll worker runs: the workflow schedules these on a provider's poll queue. */
export const PROVIDER_READ_ACTIVITIES = ['pollProvider'] as const satisfies readonly (keyof TaskActivities)[];

export interface GenerationWorkerOptions {
  readonly connection: NativeConnection;
  readonly namespace: string;
  readonly taskQueueBase: string;
  readonly deps: TaskActivityDeps;
  readonly workflowBundle: WorkflowBundle;
  /** Prebuilt activities (tests wrap them to count calls); default createTaskActivities(deps). */
  readonly activities?: TaskActivities;
  readonly maxConcurrentActivities?: number;
  readonly shutdownGraceMs?: number;
  readonly identity?: string;
  /** Workflow cache, workflow-task concurrency and pollers (config WORKER_*; SDK defaults when absent). */
  readonly tuning?: WorkerTuning;
  /** Providers that get a poll worker; default every configured provider (deps.providers). */
  readonly pollProviders?: readonly string[];
  /** With these, a worker on the reconcile queue runs the reconciler Schedules' workflows (reconcilers/schedules.ts). */
  readonly reconcileActivities?: ReconcileActivities;
}

/** The generation worker and the poll workers, run and stopped together. */
export interface GenerationWorkers {
  readonly generation: Worker;
  /** Provider → its poll worker. */
  readonly polls: ReadonlyMap<string, Worker>;
  /** The reconcile-queue worker, when reconcileActivities were given. */
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
  // Created at once: a standby worker must poll within a second or two of its region becoming active.
  const [generation, ...pollWorkers] = await Promise.all([
    Worker.create({
      connection: opts.connection,
      namespace: opts.namespace,
      taskQueue: queues.generation(opts.taskQueueBase),
      workflowBundle: opts.workflowBundle,
      // Every activity, pollProvider included: runs recorded before per-provider poll queues
      // (patch 'per-provider-poll-queues') still schedule their polls here.
      activities,
      maxConcurrentActivityTaskExecutions: opts.maxConcurrentActivities ?? 50,
      // No presigned URL or key in an activity failure (history) or its log line.
      interceptors: { activity: [redactActivityFailures] },
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
        activities: reads,
        interceptors: { activity: [redactActivityFailures] },
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
        workflowBundle: opts.workflowBundle,
        activities: opts.reconcileActivities,
        // Reconcilers run one at a time per worker: each is a sweep, not a hot path.
        maxConcurrentActivityTaskExecutions: 2,
        shutdownGraceTime,
        ...(opts.identity ? { identity: `${opts.identity}-reconcile` } : {}),
      })
    : null;
  const all = [generation, ...polls.values(), ...(reconcile ? [reconcile] : [])];
  const shutdown = () => {
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
      const runs = all.map((w) =>
        w.run().catch((err: unknown) => {
          shutdown();
          throw err;
        }),
      );
      const results = await Promise.allSettled(runs);
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    },
    shutdown,
  };
}
