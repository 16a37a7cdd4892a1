// The worker process: `npm run worker`. Runs generation workflows and activities, the outbox
// relay, and a /metrics endpoint. SIGINT/SIGTERM: stop polling, let in-flight activities
// finish within the grace time, then exit.
import http from 'node:http';
import { NativeConnection, Runtime } from '@temporalio/worker';
import { loadConfigOrExit } from '../config/env';
import { buildActivityDeps, buildDatabase, buildProviders, buildStorage } from '../config/services';
import { createLogger } from '../observability/logger';
import { createMetrics } from '../observability/metrics';
import { temporalLogger } from '../observability/temporal-logger';
import { lazyClient } from '../temporal/connection';
import { createGenerationFacade } from '../temporal/facade';
import { bundleWorkflows, createGenerationWorker } from './generation-worker';
import { startOutboxRelay } from './outbox-relay';

const config = loadConfigOrExit();
const logger = createLogger({ name: 'worker', level: config.LOG_LEVEL, pretty: config.LOG_PRETTY });
Runtime.install({ logger: temporalLogger(logger), shutdownSignals: ['SIGINT', 'SIGTERM'] });

const database = buildDatabase(config, 'vidorch-worker');
const metrics = createMetrics({ service: 'worker', db: database.db });
const metricsServer = http.createServer((req, res) => {
  if (req.url !== '/metrics') {
    res.writeHead(404).end();
    return;
  }
  metrics.registry
    .metrics()
    .then((body) => res.writeHead(200, { 'Content-Type': metrics.registry.contentType }).end(body))
    .catch(() => res.writeHead(500).end());
});
metricsServer.listen(config.WORKER_METRICS_PORT, '127.0.0.1');

const started = Date.now();
const connection = await NativeConnection.connect({ address: config.TEMPORAL_ADDRESS });
const deps = buildActivityDeps(config, { db: database, storage: buildStorage(config), providers: buildProviders(config) });
const worker = await createGenerationWorker({
  connection,
  namespace: config.TEMPORAL_NAMESPACE,
  taskQueueBase: config.TEMPORAL_TASK_QUEUE,
  deps,
  workflowBundle: await bundleWorkflows(),
  maxConcurrentActivities: config.WORKER_MAX_CONCURRENT_ACTIVITIES,
  shutdownGraceMs: config.WORKER_SHUTDOWN_GRACE_MS,
});

const temporal = lazyClient({ address: config.TEMPORAL_ADDRESS, namespace: config.TEMPORAL_NAMESPACE });
const relay = startOutboxRelay({
  db: database.db,
  facade: createGenerationFacade(temporal.get, config.TEMPORAL_TASK_QUEUE),
  logger: logger.child({ component: 'outbox-relay' }),
  batchSize: config.OUTBOX_RELAY_BATCH,
  intervalMs: config.OUTBOX_RELAY_INTERVAL_MS,
  onPublished: (outcome) => metrics.outboxPublished.inc({ path: 'relay', outcome }),
});

logger.info(
  { taskQueue: config.TEMPORAL_TASK_QUEUE, region: config.REGION, metricsPort: config.WORKER_METRICS_PORT, startupMs: Date.now() - started },
  'worker polling',
);
await worker.run();
logger.info('worker stopped polling; stopping relay');
await relay.stop();
metricsServer.close();
await Promise.allSettled([temporal.close(), connection.close(), database.close()]);
logger.info('worker stopped');
