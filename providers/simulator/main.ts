// Entry point: `npm run simulator`. Replicate protocol under /replicate, admin under /_sim.
import path from 'node:path';
import { loadConfigOrExit } from '../../config/env';
import { createLogger, exitOnUnhandledErrors } from '../../observability/logger';
import { replicateLimitsFromSetting } from './rate-limits';
import { createSimulator } from './server';

const config = loadConfigOrExit();
const logger = createLogger({ name: 'provider-simulator', level: config.LOG_LEVEL, pretty: config.LOG_PRETTY });
exitOnUnhandledErrors(logger);

const port = config.SIMULATOR_PORT;
const sim = createSimulator({
  // With port 0 the base URL is derived from the bound port.
  ...(port !== 0 ? { publicBaseUrl: `http://127.0.0.1:${port}` } : {}),
  apiToken: config.PROVIDER_REPLICATE_API_TOKEN,
  webhookSecret: config.PROVIDER_REPLICATE_WEBHOOK_SECRET,
  generationMs: config.SIMULATOR_GENERATION_MS,
  outputTtlMs: config.SIMULATOR_OUTPUT_TTL_MS,
  dataDir: path.resolve(config.SIMULATOR_DATA_DIR),
  fal: { userId: config.PROVIDER_FAL_USER_ID, resultRetentionMs: config.SIMULATOR_FAL_RESULT_RETENTION_MS },
  kling: { visibleAfterMs: config.SIMULATOR_KLING_VISIBLE_AFTER_MS, notFound: config.SIMULATOR_KLING_NOT_FOUND },
  replicateRateLimits: replicateLimitsFromSetting(config.SIMULATOR_REPLICATE_RATE_LIMITS),
  logger,
});

try {
  const running = await sim.listen(port, '127.0.0.1');
  logger.info({ replicateBaseUrl: `${sim.baseUrl()}/replicate` }, 'provider simulator ready');
  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) {
      logger.warn({ signal }, 'second signal, exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'stopping');
    running.close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'close failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
} catch (err) {
  logger.fatal({ err }, 'simulator failed to start');
  process.exit(1);
}
