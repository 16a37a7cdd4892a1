// The worker of the e2e benchmark's baseline: `node --import tsx bench/workflows/bare-worker.ts
// <taskQueue> <activity types,comma-separated>`. Same connection and worker settings as
// workers/main.ts (max concurrent activities, shutdown grace, cache and pollers), no-op activities registered
// under the real activity names. Stops on SIGINT/SIGTERM. With BENCH_ACTIVITY_COUNT_FILE set, the
// activities run so far, by name, are written to that file as JSON every second (open-tasks reads how many polls its bare loops made in the measured window). With
// BENCH_TASK_QUEUE_ACTIVITIES_PER_SECOND, the queue's global activity rate is capped there, as
// the real poll queue's is at the provider's quota. With BENCH_WORK_FLOOR=1 it is the e2e work
// floor's worker: `submitAttempt` and `rescueOutput` do the task's external work
// (bench/workflows/floor-work.ts) and this process receives the provider's callbacks.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Runtime, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { loadConfigOrExit } from '../../config/env';
import { createLogger } from '../../observability/logger';
import { temporalLogger } from '../../observability/temporal-logger';
import { startFloorWork, type FloorWork } from './floor-work';
import { applyWorkerProcessSettings, tuningFromConfig, tuningOptions } from '../../workers/tuning';

const [taskQueue, names] = process.argv.slice(2);
if (!taskQueue || !names) {
  console.error('usage: bare-worker.ts <taskQueue> <activity,names>');
  process.exit(2);
}
const config = loadConfigOrExit();
// The same heap growing factor and Buffer pool as the generation worker's process (workers/main.ts).
applyWorkerProcessSettings(config);
const logger = createLogger({ name: 'bare-worker', level: config.LOG_LEVEL, pretty: false });
Runtime.install({ logger: temporalLogger(logger), shutdownSignals: ['SIGINT', 'SIGTERM'] });

const noop = async () => ({ ok: true as const });
const countFile = process.env['BENCH_ACTIVITY_COUNT_FILE'];
const counts: Record<string, number> = {};
const counted = (name: string) => async () => {
  counts[name] = (counts[name] ?? 0) + 1;
  return { ok: true as const };
};
const activities: Record<string, (...args: string[]) => Promise<{ ok: true }>> = Object.fromEntries(
  names.split(',').map((n) => [n, countFile ? counted(n) : noop]),
);
let floor: FloorWork | null = null;
let clientConnection: Connection | null = null;
if (process.env['BENCH_WORK_FLOOR'] === '1') {
  clientConnection = await Connection.connect({ address: config.TEMPORAL_ADDRESS });
  floor = await startFloorWork(config, new Client({ connection: clientConnection, namespace: config.TEMPORAL_NAMESPACE }));
  Object.assign(activities, floor.activities);
}
if (countFile) {
  const write = () => {
    // Whole or not at all: the reader never sees half a file.
    fs.writeFileSync(`${countFile}.tmp`, JSON.stringify(counts));
    fs.renameSync(`${countFile}.tmp`, countFile);
  };
  write();
  setInterval(write, 1_000).unref();
}
const connection = await NativeConnection.connect({ address: config.TEMPORAL_ADDRESS });
const worker = await Worker.create({
  connection,
  namespace: config.TEMPORAL_NAMESPACE,
  taskQueue,
  workflowBundle: await bundleWorkflowCode({
    workflowsPath: path.join(path.dirname(fileURLToPath(import.meta.url)), 'bare.ts'),
    logger: { log: noop, trace: noop, debug: noop, info: noop, warn: noop, error: noop },
  }),
  activities,
  ...(process.env['BENCH_TASK_QUEUE_ACTIVITIES_PER_SECOND']
    ? { maxTaskQueueActivitiesPerSecond: Number(process.env['BENCH_TASK_QUEUE_ACTIVITIES_PER_SECOND']) }
    : {}),
  maxConcurrentActivityTaskExecutions: config.WORKER_MAX_CONCURRENT_ACTIVITIES,
  maxConcurrentLocalActivityExecutions: config.WORKER_MAX_CONCURRENT_ACTIVITIES,
  shutdownGraceTime: config.WORKER_SHUTDOWN_GRACE_MS,
  // The same cache, workflow-task and poller settings as the generation worker (config WORKER_*).
  ...tuningOptions(tuningFromConfig(config)),
});
logger.warn({ taskQueue }, 'bare worker polling');
await worker.run();
if (floor) {
  // The benchmark reads what the floor's callbacks did from the log.
  logger.warn({ callbacks: floor.counts }, 'work floor callbacks');
  await floor.close();
  await clientConnection?.close();
}
await connection.close();
