// The worker process: `npm run worker`. Runs generation workflows and activities, the outbox
// relay, and an operator listener (OPS_LISTEN_HOST:WORKER_METRICS_PORT: /metrics and a detailed
// /readyz) — the workflows and the relay only while its REGION is the active region: a fence
// watcher (workers/fence-watcher.ts) stops polling and the relay when the region is fenced off,
// keeps the process alive, and starts them again when the region is active. SIGINT/SIGTERM:
// stop polling, let in-flight activities finish within the grace time, then exit.
import { Runtime, type WorkflowBundle } from '@temporalio/worker';
import { Gauge } from 'prom-client';
import { loadConfigOrExit } from '../config/env';
import { buildActivityDeps, buildDatabase, buildProviders, buildStorage, failoverHosts } from '../config/services';
import { startFactSampler } from '../observability/facts';
import { createLogger, exitOnUnhandledErrors } from '../observability/logger';
import { startOpsListener } from '../observability/ops-listener';
import { inFlightByProvider, resilienceSnapshots } from '../activities/provider-guard';
import { createMetrics, registerPollDemandGauge, registerResilienceGauges, registerRoutingMetrics } from '../observability/metrics';
import { pollFloors } from '../activities/poll-demand';
import { routeDecisionCounts } from '../activities/routing';
import { temporalLogger } from '../observability/temporal-logger';
import { lazyClient } from '../temporal/connection';
import { createGenerationFacade } from '../temporal/facade';
import { regionSubmitSwitch, runAsRegionService, startFenceWatcher, superviseRegion, type FenceWatcher, type RegionService } from './fence-watcher';
import { connectWorkerWithRetry } from './connect';
import { bundleWorkflowsInChild, createGenerationWorkers } from './generation-worker';
import { startOutboxRelay } from './outbox-relay';
import { tuningFromConfig } from './tuning';

const config = loadConfigOrExit();
const logger = createLogger({ name: 'worker', level: config.LOG_LEVEL, pretty: config.LOG_PRETTY });
exitOnUnhandledErrors(logger);
// Signals are ours: the process outlives its Temporal worker while the region is fenced off.
Runtime.install({ logger: temporalLogger(logger), shutdownSignals: [] });

const database = buildDatabase(config, 'vidorch-worker');
// The fact gauges, with the jobs in flight per provider, on a connection of their own.
const facts = startFactSampler({
  databaseUrl: config.DATABASE_URL,
  failoverHosts: failoverHosts(config),
  intervalMs: config.METRICS_FACTS_INTERVAL_MS,
  logger,
  applicationName: 'vidorch-worker-facts',
  inFlight: inFlightByProvider,
});
const metrics = createMetrics({ service: 'worker', facts: facts.latest, pool: database.pool });
registerResilienceGauges(metrics.registry, resilienceSnapshots, async () => facts.latest()?.inFlight ?? {});
registerRoutingMetrics(metrics.registry, routeDecisionCounts);
registerPollDemandGauge(metrics.registry, () => pollFloors);
const polling = new Gauge({
  name: 'vidorch_worker_polling',
  help: '1 while this worker polls its task queue (its region is active), else 0',
  labelNames: ['region'],
  registers: [metrics.registry],
});
// Ready while it polls its task queue; the detail says why not (standing by for its region).
// Listening from the start, so a worker waiting for Temporal is visible as not ready.
let pollingState = 'starting';
let currentFence: () => { activeRegion: string; mode: string; epoch: number } | null = () => null;
const ops = await startOpsListener({
  host: config.OPS_LISTEN_HOST,
  port: config.WORKER_METRICS_PORT,
  bearerToken: config.OPS_BEARER_TOKEN,
  registry: metrics.registry,
  logger,
  readiness: async () => {
    const fence = currentFence();
    return {
      ready: pollingState === 'running',
      detail: { region: config.REGION, active_region: fence?.activeRegion ?? null, mode: fence?.mode ?? null, epoch: fence?.epoch ?? null, polling: pollingState },
    };
  },
});
const started = Date.now();
const fenceLogger = logger.child({ component: 'fence-watcher' });
// FENCE_WATCH_ENABLED=false: a worker that never hears of a failover (drills run one as the
// zombie); the fence row still rejects every write and submit it attempts.
const watcher: FenceWatcher | null = config.FENCE_WATCH_ENABLED
  ? await startFenceWatcher({
      db: database.db,
      databaseUrl: config.DATABASE_URL,
      failoverHosts: failoverHosts(config),
      scope: config.FENCE_SCOPE,
      intervalMs: config.FENCE_WATCH_INTERVAL_MS,
      logger: fenceLogger,
    })
  : null;
const alwaysActive: FenceWatcher = {
  current: () => ({ scope: config.FENCE_SCOPE, activeRegion: config.REGION, epoch: 0, mode: 'NORMAL', updatedAt: new Date(0) }),
  onChange: () => () => undefined,
  refresh: async () => alwaysActive.current(),
  stop: async () => undefined,
};
const regionView = watcher ?? alwaysActive;
currentFence = () => regionView.current();

const connection = await connectWorkerWithRetry(config.TEMPORAL_ADDRESS, logger);
const deps = {
  ...buildActivityDeps(config, { db: database, storage: buildStorage(config), providers: buildProviders(config) }),
  modePauseRetryMs: config.MODE_PAUSE_RETRY_MS,
  ...(watcher ? { submitSwitch: regionSubmitSwitch(watcher, config.REGION) } : {}),
};
// Bundled up front, so a standby worker starts polling within a second of its region becoming
// active; in a child process, so webpack's memory does not stay with the worker (~90 MB).
const bundle: WorkflowBundle = await bundleWorkflowsInChild();

async function startWorker(): Promise<RegionService> {
  const worker = await createGenerationWorkers({
    connection,
    namespace: config.TEMPORAL_NAMESPACE,
    taskQueueBase: config.TEMPORAL_TASK_QUEUE,
    deps,
    workflowBundle: bundle,
    maxConcurrentActivities: config.WORKER_MAX_CONCURRENT_ACTIVITIES,
    shutdownGraceMs: config.WORKER_SHUTDOWN_GRACE_MS,
    tuning: tuningFromConfig(config),
  });
  const service = runAsRegionService(worker);
  logger.info(
    { taskQueue: config.TEMPORAL_TASK_QUEUE, pollRates: Object.fromEntries(worker.pollRates), region: config.REGION, metricsPort: config.WORKER_METRICS_PORT, startupMs: Date.now() - started },
    'worker polling',
  );
  return {
    ended: service.ended,
    async stop() {
      await service.stop();
      logger.info({ region: config.REGION }, 'worker stopped polling');
    },
  };
}

const temporal = lazyClient({ address: config.TEMPORAL_ADDRESS, namespace: config.TEMPORAL_NAMESPACE });
async function startRelay(): Promise<RegionService> {
  return startOutboxRelay({
    db: database.db,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    facade: createGenerationFacade(temporal.get, config.TEMPORAL_TASK_QUEUE),
    logger: logger.child({ component: 'outbox-relay' }),
    batchSize: config.OUTBOX_RELAY_BATCH,
    intervalMs: config.OUTBOX_RELAY_INTERVAL_MS,
    onPublished: (outcome) => metrics.outboxPublished.inc({ path: 'relay', outcome }),
  });
}

const workerSupervisor = superviseRegion({
  name: 'temporal-worker',
  region: config.REGION,
  watcher: regionView,
  start: startWorker,
  logger: fenceLogger,
  onState: (s) => {
    pollingState = s;
    polling.set({ region: config.REGION }, s === 'running' ? 1 : 0);
  },
});
const relaySupervisor = superviseRegion({ name: 'outbox-relay', region: config.REGION, watcher: regionView, start: startRelay, logger: fenceLogger });
if (regionView.current()?.activeRegion !== config.REGION) {
  logger.warn({ region: config.REGION, activeRegion: regionView.current()?.activeRegion ?? null }, 'region not active: standing by');
}

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'worker stopping');
  await Promise.all([workerSupervisor.stop(), relaySupervisor.stop()]);
  await watcher?.stop();
  await Promise.allSettled([ops.close(), facts.stop(), temporal.close(), connection.close(), database.close()]);
  logger.info('worker stopped');
  process.exit(0);
}
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGTERM', () => void shutdown('SIGTERM'));
