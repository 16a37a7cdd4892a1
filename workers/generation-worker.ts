// The worker that runs generation workflows and their activities. Used by workers/main.ts and
// by the end-to-end tests, so both run the same thing.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode, type NativeConnection, Worker, type WorkflowBundle } from '@temporalio/worker';
import { createTaskActivities, type TaskActivityDeps } from '../activities';
import { queues } from '../temporal/queues';

export const WORKFLOWS_PATH = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'workflows', 'index.ts');

/** Bundles the workflow code once (webpack); pass the result to every worker of a process. */
export function bundleWorkflows(): Promise<WorkflowBundle> {
  return bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: quietBundlerLogger });
}

const noop = () => undefined;
const quietBundlerLogger = { log: noop, trace: noop, debug: noop, info: noop, warn: noop, error: noop };

export interface GenerationWorkerOptions {
  readonly connection: NativeConnection;
  readonly namespace: string;
  readonly taskQueueBase: string;
  readonly deps: TaskActivityDeps;
  readonly workflowBundle: WorkflowBundle;
  readonly maxConcurrentActivities?: number;
  readonly shutdownGraceMs?: number;
  readonly identity?: string;
}

export function createGenerationWorker(opts: GenerationWorkerOptions): Promise<Worker> {
  return Worker.create({
    connection: opts.connection,
    namespace: opts.namespace,
    taskQueue: queues.generation(opts.taskQueueBase),
    workflowBundle: opts.workflowBundle,
    activities: createTaskActivities(opts.deps),
    maxConcurrentActivityTaskExecutions: opts.maxConcurrentActivities ?? 50,
    // In-flight activities get this long to finish (or heartbeat out) on shutdown.
    shutdownGraceTime: opts.shutdownGraceMs ?? 30_000,
    ...(opts.identity ? { identity: opts.identity } : {}),
  });
}
