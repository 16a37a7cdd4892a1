// The worker of the e2e benchmark's baseline: `node --import tsx bench/workflows/bare-worker.ts
// <taskQueue> <activity types,comma-separated>`. Same connection and worker settings as
// workers/main.ts (max concurrent activities, shutdown grace, cache and pollers), no-op activities registered
// under the real activity names. Stops on SIGINT/SIGTERM.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { NativeConnection, Runtime, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { loadConfigOrExit } from '../../config/env';
import { createLogger } from '../../observability/logger';
import { temporalLogger } from '../../observability/temporal-logger';
import { tuningFromConfig, tuningOptions } from '../../workers/tuning';

const [taskQueue, names] = process.argv.slice(2);
if (!taskQueue || !names) {
  console.error('usage: bare-worker.ts <taskQueue> <activity,names>');
  process.exit(2);
}
const config = loadConfigOrExit();
const logger = createLogger({ name: 'bare-worker', level: config.LOG_LEVEL, pretty: false });
Runtime.install({ logger: temporalLogger(logger), shutdownSignals: ['SIGINT', 'SIGTERM'] });

const noop = async () => ({ ok: true as const });
const activities = Object.fromEntries(names.split(',').map((n) => [n, noop]));
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
  maxConcurrentActivityTaskExecutions: config.WORKER_MAX_CONCURRENT_ACTIVITIES,
  maxConcurrentLocalActivityExecutions: config.WORKER_MAX_CONCURRENT_ACTIVITIES,
  shutdownGraceTime: config.WORKER_SHUTDOWN_GRACE_MS,
  // The same cache, workflow-task and poller settings as the generation worker (config WORKER_*).
  ...tuningOptions(tuningFromConfig(config)),
});
logger.warn({ taskQueue }, 'bare worker polling');
await worker.run();
await connection.close();
