// The API process: `npm run api`.
import { loadConfigOrExit } from '../config/env';
import { buildDatabase } from '../config/services';
import { createLogger } from '../observability/logger';
import { createMetrics } from '../observability/metrics';
import { lazyClient } from '../temporal/connection';
import { createGenerationFacade } from '../temporal/facade';
import { createApp } from './app';
import { startCallbackReplayer } from './callbacks.handlers';
import { buildApiContext } from './context';

const config = loadConfigOrExit();
const logger = createLogger({ name: 'api', level: config.LOG_LEVEL, pretty: config.LOG_PRETTY });
const database = buildDatabase(config, 'vidorch-api');
const temporal = lazyClient({ address: config.TEMPORAL_ADDRESS, namespace: config.TEMPORAL_NAMESPACE });
const ctx = buildApiContext(config, {
  db: database.db,
  logger,
  metrics: createMetrics({ service: 'api', db: database.db }),
  facade: createGenerationFacade(temporal.get, config.TEMPORAL_TASK_QUEUE),
});
const app = createApp(ctx);
// Callbacks spooled while Postgres was down (or facts were read-only) go to the inbox once it can be written.
const replayer = startCallbackReplayer(ctx, config.CALLBACK_SPOOL_REPLAY_MS);

const server = app.listen(config.PORT, () => {
  logger.info({ port: config.PORT, region: config.REGION }, `API listening on http://127.0.0.1:${config.PORT}`);
});
server.keepAliveTimeout = 65_000;

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  logger.info({ signal }, 'API stopping: no new connections, finishing in-flight requests');
  server.close();
  server.closeIdleConnections();
  setTimeout(() => server.closeAllConnections(), 10_000).unref();
  await new Promise<void>((resolve) => server.once('close', () => resolve()));
  await replayer.stop();
  await Promise.allSettled([temporal.close(), database.close(), ctx.rateLimiter.close(), ctx.callbackLimiter.close()]);
  logger.info('API stopped');
  process.exit(0);
}
process.on('SIGINT', () => void shutdown('SIGINT'));
process.on('SIGTERM', () => void shutdown('SIGTERM'));
