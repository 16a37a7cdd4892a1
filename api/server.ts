// The API process: `npm run api`. The public port serves /v1, /healthz, a ready-or-not /readyz
// and /openapi.json; the operator listener (OPS_LISTEN_HOST:OPS_PORT) serves /metrics and the
// detailed /readyz. Fact gauges are computed by a sampler on a connection of its own.
import { temporalConnection } from '../config/connections';
import { loadConfigOrExit } from '../config/env';
import { buildDatabase, failoverHosts } from '../config/services';
import { requireCurrentSchemaOrExit } from '../db/schema-version';
import { startFactSampler } from '../observability/facts';
import { createLogger, exitOnUnhandledErrors } from '../observability/logger';
import { createMetrics } from '../observability/metrics';
import { installTracing, tracingOptions } from '../observability/tracing';
import { lazyClient } from '../temporal/connection';
import { createGenerationFacade } from '../temporal/facade';
import { startCallbackReplayer } from './callbacks.handlers';
import { buildApiContext } from './context';
import { createApiServer, listen, startApiOpsListener } from './listen';

const config = loadConfigOrExit();
const logger = createLogger({ name: 'api', level: config.LOG_LEVEL, pretty: config.LOG_PRETTY });
// Before anything that makes spans (with tracing off they are no-op spans).
const tracing = await installTracing(tracingOptions(config, 'vidorch-api', logger));
exitOnUnhandledErrors(logger);
const database = buildDatabase(config, 'vidorch-api');
// Migrations are a release step: refuse (exit 2) a schema older than this build.
await requireCurrentSchemaOrExit(database.pool, logger);
const facts = startFactSampler({
  databaseUrl: database.url,
  failoverHosts: failoverHosts(config),
  intervalMs: config.METRICS_FACTS_INTERVAL_MS,
  logger,
  applicationName: 'vidorch-api-facts',
});
const temporal = lazyClient({ connection: temporalConnection(config), namespace: config.TEMPORAL_NAMESPACE, interceptors: tracing.clientInterceptors });
const ctx = buildApiContext(config, {
  db: database.db,
  databaseUrl: database.url,
  logger,
  metrics: createMetrics({ service: 'api', facts: facts.latest, pool: database.pool }),
  facade: createGenerationFacade(temporal.get, config.TEMPORAL_TASK_QUEUE, { taskPriority: config.TEMPORAL_TASK_PRIORITY }),
});
// Callbacks spooled while Postgres was down (or facts were read-only) go to the inbox once it can be written.
const replayer = startCallbackReplayer(ctx, config.CALLBACK_SPOOL_REPLAY_MS);

const ops = await startApiOpsListener(ctx, { host: config.OPS_LISTEN_HOST, port: config.OPS_PORT, bearerToken: config.OPS_BEARER_TOKEN });
const server = createApiServer(ctx);
await listen(server, config.PORT);
logger.info({ port: config.PORT, ops: ops.url, region: config.REGION }, `API listening on http://127.0.0.1:${config.PORT} (operator listener ${ops.url})`);

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'API stopping: no new connections, finishing in-flight requests');
  // Listened for before anything is awaited: with no connection open, 'close' comes at once, and
  // a listener added later waited forever (the benchmarks' --cpu-prof runs lost their profiles).
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  // Event streams never finish by themselves: end them now (clients reconnect elsewhere with Last-Event-ID).
  await ctx.events.close();
  server.closeIdleConnections();
  setTimeout(() => server.closeAllConnections(), 10_000).unref();
  await closed;
  await replayer.stop();
  await Promise.allSettled([ops.close(), facts.stop(), temporal.close(), database.close(), ctx.close()]);
  await tracing.shutdown();
  logger.info('API stopped');
  process.exit(0);
}
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGTERM', () => void shutdown('SIGTERM'));
