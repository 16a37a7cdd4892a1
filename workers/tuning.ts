// The worker's cache and concurrency knobs (config WORKER_*), as Temporal worker options. One
// place, so the generation worker and the benchmarks' bare worker run with the same settings.
// Why these values: docs/performance.md ("Tuning knobs").
import v8 from 'node:v8';
import type { WorkerOptions } from '@temporalio/worker';
import type { Config } from '../config/env';

export interface WorkerTuning {
  /** Sticky-cache size; 0 disables the cache (every workflow task replays the history). */
  readonly maxCachedWorkflows: number;
  readonly maxConcurrentWorkflowTasks: number;
  readonly workflowTaskPollers: number;
  readonly activityTaskPollers: number;
}

export function tuningFromConfig(config: Config): WorkerTuning {
  return {
    maxCachedWorkflows: config.WORKER_MAX_CACHED_WORKFLOWS,
    maxConcurrentWorkflowTasks: config.WORKER_MAX_CONCURRENT_WORKFLOW_TASKS,
    workflowTaskPollers: config.WORKER_WORKFLOW_TASK_POLLERS,
    activityTaskPollers: config.WORKER_ACTIVITY_TASK_POLLERS,
  };
}

/** Worker.create options for a tuning. Concurrent workflow tasks never exceed the cache (the SDK's rule). */
export function tuningOptions(t: WorkerTuning): Partial<WorkerOptions> {
  const wft = t.maxCachedWorkflows > 0 ? Math.max(2, Math.min(t.maxConcurrentWorkflowTasks, t.maxCachedWorkflows)) : t.maxConcurrentWorkflowTasks;
  return {
    maxCachedWorkflows: t.maxCachedWorkflows,
    maxConcurrentWorkflowTaskExecutions: wft,
    workflowTaskPollerBehavior: { type: 'simple-maximum', maximum: Math.min(t.workflowTaskPollers, wft) },
    activityTaskPollerBehavior: { type: 'simple-maximum', maximum: t.activityTaskPollers },
  };
}

/**
 * V8's heap growing factor for this process (WORKER_HEAP_GROWING_PERCENT), set before the SDK
 * starts its workflow thread so both isolates get it. Call once, first thing in a worker's main.
 */
function applyHeapGrowing(percent: number): void {
  if (percent > 0) v8.setFlagsFromString(`--heap-growing-percent=${percent}`);
}

/**
 * Node's Buffer pool size for this process (WORKER_BUFFER_POOL_BYTES; 0 keeps Node's). Small
 * Buffer.allocUnsafe results are slices of one pool chunk, and a slice kept alive keeps its
 * whole chunk: the SDK holds one small completion per cached workflow run, so with Node 24's
 * 64 KiB chunks a 500-run cache can pin up to 32 MB (docs/decisions/0053-worker-buffer-pool.md).
 * Takes effect from the next chunk; call it first thing in a worker's main.
 */
export function applyBufferPool(bytes: number): void {
  if (bytes > 0) Buffer.poolSize = bytes;
}

/**
 * The worker process's memory settings from config (the heap growing factor, the Buffer pool): one
 * call, first thing in a worker's main, so the generation worker and the benchmarks' bare worker
 * cannot drift apart.
 */
export function applyWorkerProcessSettings(config: Pick<Config, 'WORKER_HEAP_GROWING_PERCENT' | 'WORKER_BUFFER_POOL_BYTES'>): void {
  applyHeapGrowing(config.WORKER_HEAP_GROWING_PERCENT);
  applyBufferPool(config.WORKER_BUFFER_POOL_BYTES);
}
