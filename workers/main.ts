// The worker process: `npm run worker`. Runs generation workflows and activities, the
// reconcilers (their Schedules created at start, reconcilers/schedules.ts), the outbox relay,
// the webhook relay (workers/webhook-relay.ts), and an operator listener
// (OPS_LISTEN_HOST:WORKER_METRICS_PORT: /metrics and a detailed /readyz) — the workflows and
// the relays only while its REGION is the active region: a fence
// watcher (workers/fence-watcher.ts) stops polling and the relay when the region is fenced off,
// keeps the process alive, and starts them again when the region is active. SIGINT/SIGTERM:
// stop polling, let in-flight activities finish within the grace time, then exit.
import type { WorkflowBundleOption } from '@temporalio/worker';
import { Gauge } from 'prom-client';
import { temporalConnection } from '../config/connections';
import { loadConfigOrExit } from '../config/env';
import { buildActivityDeps, buildDatabase, buildProviders, buildReconcileDeps, buildStorage, failoverHosts } from '../config/services';
import { startFactSampler } from '../observability/facts';
import { createLogger, exitOnUnhandledErrors } from '../observability/logger';
import { startOpsListener } from '../observability/ops-listener';
import { installRuntimeWithSdkMetrics } from '../observability/sdk-metrics';
import { inFlightByProvider } from '../db/provider-control';
import { requireCurrentSchemaOrExit } from '../db/schema-version';
import {
  createMetrics,
  registerNotifyMetrics,
  registerClaimHistogram,
  registerPollDemandGauge,
  registerReconcileMetrics,
  registerResilienceGauges,
  registerRoutingMetrics,
} from '../observability/metrics';
import { createReconcileActivities } from '../activities/reconcile';
import { RECONCILERS } from '../reconcilers';
import { ensureReconcileSchedules } from '../reconcilers/schedules';
import { reconcileIntervalMs } from '../reconcilers/settings';
import { temporalLogger } from '../observability/temporal-logger';
import { installTracing, tracingOptions } from '../observability/tracing';
import { lazyClient } from '../temporal/connection';
import { createGenerationFacade } from '../temporal/facade';
import { regionSubmitSwitch, runAsRegionService, startFenceWatcher, superviseRegion, type FenceWatcher, type RegionService } from './fence-watcher';
import { connectWorkerWithRetry } from './connect';
import { createGenerationWorkers, loadWorkflowBundle } from './generation-worker';
import { startOutboxRelay } from './outbox-relay';
import { startWebhookRelay, webhookRelaySettings, type WebhookRelay } from './webhook-relay';
import { createSecretBox } from '../db/webhook-secrets';
import { applyWorkerProcessSettings, tuningFromConfig } from './tuning';
import { workerDeploymentOptions } from './versioning';

const config = loadConfigOrExit();
applyWorkerProcessSettings(config);
const logger = createLogger({ name: 'worker', level: config.LOG_LEVEL, pretty: config.LOG_PRETTY });
const tracing = await installTracing(tracingOptions(config, 'vidorch-worker', logger));
exitOnUnhandledErrors(logger);
const sdkMetrics = await installRuntimeWithSdkMetrics({ logger: temporalLogger(logger), port: config.WORKER_SDK_METRICS_PORT });

const database = buildDatabase(config, 'vidorch-worker');
// Migrations are a release step: refuse (exit 2) a schema older than this build.
await requireCurrentSchemaOrExit(database.pool, logger);
// The fact gauges, with the jobs in flight per provider, on a connection of their own.
const facts = startFactSampler({
  databaseUrl: database.url,
  failoverHosts: failoverHosts(config),
  intervalMs: config.METRICS_FACTS_INTERVAL_MS,
  logger,
  applicationName: 'vidorch-worker-facts',
  inFlight: inFlightByProvider,
});
const metrics = createMetrics({ service: 'worker', facts: facts.latest, pool: database.pool });
const recordReconcileRun = registerReconcileMetrics(metrics.registry);
const polling = new Gauge({
  name: 'vidorch_worker_polling',
  help: '1 while this worker polls its task queue (its region is active), else 0',
  labelNames: ['region'],
  registers: [metrics.registry],
});
// Ready while it polls its task queue; the detail says why not (standing by for its region).
// Listening from the start, so a worker waiting for Temporal is visible as not ready.
let pollingState = 'starting';
let stopping = false;
let currentFence: () => { activeRegion: string; mode: string; epoch: number } | null = () => null;
const ops = await startOpsListener({
  host: config.OPS_LISTEN_HOST,
  port: config.WORKER_METRICS_PORT,
  bearerToken: config.OPS_BEARER_TOKEN,
  registry: metrics.registry,
  extraExposition: () => sdkMetrics.scrape(),
  logger,
  readiness: async () => {
    const fence = currentFence();
    return {
      // Not ready from the first moment of a shutdown, before the drain begins, so a load
      // balancer or an orchestrator stops counting on this worker while it finishes its calls.
      ready: pollingState === 'running' && !stopping,
      detail: {
        region: config.REGION,
        active_region: fence?.activeRegion ?? null,
        mode: fence?.mode ?? null,
        epoch: fence?.epoch ?? null,
        polling: stopping ? 'draining' : pollingState,
      },
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
      databaseUrl: database.url,
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

const storage = buildStorage(config);
// The activities' process state (provider guard, route statistics, poll demand) is built here
// once, and /metrics reads the same objects.
const deps = {
  ...buildActivityDeps(config, { db: database, storage, providers: buildProviders(config), logger }),
  ...(watcher ? { submitSwitch: regionSubmitSwitch(watcher, config.REGION) } : {}),
  claimTimes: registerClaimHistogram(metrics.registry),
};
registerResilienceGauges(
  metrics.registry,
  () => deps.providerGuard.snapshots(),
  async () => facts.latest()?.inFlight ?? {},
);
registerRoutingMetrics(metrics.registry, () => deps.routeStats.decisionCounts());
registerPollDemandGauge(metrics.registry, () => deps.pollDemand.floors());

// One set of connection options (TLS, API key) for the worker's NativeConnection and its client.
const temporalOptions = temporalConnection(config);
const connection = await connectWorkerWithRetry(temporalOptions, logger);
// Ready up front, so a standby worker starts polling within a second of its region becoming
// active: the build's bundle (dist/), else bundled in a child process, so webpack's memory does
// not stay with the worker (~90 MB).
const bundle: WorkflowBundleOption = await loadWorkflowBundle({ tracing: tracing.enabled });
// Worker Versioning (docs/deploy.md): this build's version; it takes tasks once it is current or ramping.
const deployment = await workerDeploymentOptions(config);
if (deployment) logger.info({ deployment: deployment.version }, 'worker versioning on: polling as this deployment version');

const temporal = lazyClient({ connection: temporalOptions, namespace: config.TEMPORAL_NAMESPACE, interceptors: tracing.clientInterceptors });
const facade = createGenerationFacade(temporal.get, config.TEMPORAL_TASK_QUEUE, { taskPriority: config.TEMPORAL_TASK_PRIORITY });
// The reconcilers run here, on the reconcile queue, only while this region is active (docs/runbooks/reconcilers.md).
const reconcileActivities = createReconcileActivities(
  buildReconcileDeps(config, { db: database, storage, facade, logger: logger.child({ component: 'reconcile' }), onRun: recordReconcileRun }),
);
if (config.RECONCILE_SCHEDULES_ENABLED) {
  // Idempotent: an existing Schedule gets the configured interval and keeps an operator's pause.
  const ids = await ensureReconcileSchedules(
    await temporal.get(),
    config.TEMPORAL_TASK_QUEUE,
    RECONCILERS.map((r) => ({ name: r.name, intervalMs: reconcileIntervalMs(config, r.name) })),
  ).catch((err: unknown) => {
    logger.error({ err }, 'could not create the reconciler Schedules; they run once a worker or npm run dev creates them');
    return [];
  });
  if (ids.length > 0) logger.info({ schedules: ids }, 'reconciler schedules in place');
}

async function startWorker(): Promise<RegionService> {
  const worker = await createGenerationWorkers({
    reconcileActivities,
    connection,
    databaseUrl: database.url,
    databaseFailoverHosts: failoverHosts(config),
    namespace: config.TEMPORAL_NAMESPACE,
    taskQueueBase: config.TEMPORAL_TASK_QUEUE,
    deps,
    workflowBundle: bundle,
    maxWakesInFlight: config.WAKE_SIGNALS_MAX_IN_FLIGHT,
    maxConcurrentActivities: config.WORKER_MAX_CONCURRENT_ACTIVITIES,
    shutdownGraceMs: config.WORKER_SHUTDOWN_GRACE_MS,
    tuning: tuningFromConfig(config),
    tracing: tracing.worker,
    ...(deployment ? { deployment } : {}),
  });
  const service = runAsRegionService(worker);
  logger.info(
    {
      taskQueue: config.TEMPORAL_TASK_QUEUE,
      pollRates: Object.fromEntries(worker.pollRates),
      region: config.REGION,
      metricsPort: config.WORKER_METRICS_PORT,
      buildId: deployment?.version.buildId ?? null,
      startupMs: Date.now() - started,
    },
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

if (config.OUTBOX_RELAY_HOLD_OFF_MS > 0 && config.OUTBOX_RELAY_HOLD_OFF_MS < config.API_FAST_PATH_TIMEOUT_MS) {
  // Not an error (starts are idempotent), but the relay will start workflows the API is still starting.
  logger.warn(
    { OUTBOX_RELAY_HOLD_OFF_MS: config.OUTBOX_RELAY_HOLD_OFF_MS, API_FAST_PATH_TIMEOUT_MS: config.API_FAST_PATH_TIMEOUT_MS },
    'the outbox relay hold-off is shorter than the fast path timeout: some workflows will get two start calls',
  );
}

async function startRelay(): Promise<RegionService> {
  return startOutboxRelay({
    db: database.db,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    facade,
    logger: logger.child({ component: 'outbox-relay' }),
    batchSize: config.OUTBOX_RELAY_BATCH,
    intervalMs: config.OUTBOX_RELAY_INTERVAL_MS,
    holdOffMs: config.OUTBOX_RELAY_HOLD_OFF_MS,
    onPublished: (outcome) => metrics.outboxPublished.inc({ path: 'relay', outcome }),
  });
}

// Tenant webhooks: only the active region's relay sends (docs/webhooks.md).
let webhookRelay: WebhookRelay | null = null;
const notify = registerNotifyMetrics(metrics.registry, () => webhookRelay?.backlog() ?? null);
async function startWebhooks(): Promise<RegionService> {
  const relay = startWebhookRelay({
    db: database.db,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    secrets: createSecretBox(config.WEBHOOK_SECRET_KEY, config.WEBHOOK_SECRET_KEY_PREVIOUS),
    publicBaseUrl: config.PUBLIC_BASE_URL.replace(/\/+$/, ''),
    logger: logger.child({ component: 'webhook-relay' }),
    settings: webhookRelaySettings(config),
    onAttempt: (outcome) => notify.attempts.inc({ outcome }),
  });
  webhookRelay = relay;
  return {
    async stop() {
      await relay.stop();
      if (webhookRelay === relay) webhookRelay = null;
    },
  };
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
const webhookSupervisor = superviseRegion({ name: 'webhook-relay', region: config.REGION, watcher: regionView, start: startWebhooks, logger: fenceLogger });
if (regionView.current()?.activeRegion !== config.REGION) {
  logger.warn({ region: config.REGION, activeRegion: regionView.current()?.activeRegion ?? null }, 'region not active: standing by');
}

async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'worker stopping');
  await Promise.all([workerSupervisor.stop(), relaySupervisor.stop(), webhookSupervisor.stop()]);
  await watcher?.stop();
  await Promise.allSettled([ops.close(), facts.stop(), temporal.close(), connection.close(), database.close()]);
  await tracing.shutdown();
  logger.info('worker stopped');
  process.exit(0);
}
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGTERM', () => void shutdown('SIGTERM'));
