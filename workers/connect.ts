// The worker's Temporal connection, retried until Temporal answers: a worker started while
// Temporal is down (both restarted, a deploy during an outage) waits for it instead of exiting.
import { setTimeout as sleep } from 'node:timers/promises';
import { NativeConnection } from '@temporalio/worker';
import type { Logger } from '../observability/logger';
import type { TemporalConnectionOptions } from '../temporal/connection';

/** Backoff 0.5 s doubling to `maxDelayMs`, with jitter; every failure is logged with the next delay. */
export async function connectWorkerWithRetry(options: TemporalConnectionOptions, logger: Logger, maxDelayMs = 10_000): Promise<NativeConnection> {
  const { address } = options;
  for (let attempt = 1; ; attempt++) {
    try {
      const connection = await NativeConnection.connect({ ...options });
      if (attempt > 1) logger.info({ address, attempts: attempt }, 'Temporal reachable; worker connected');
      return connection;
    } catch (err) {
      const delayMs = Math.round(Math.min(maxDelayMs, 500 * 2 ** (attempt - 1)) * (0.5 + Math.random() / 2));
      logger.warn({ err, address, attempt, retryInMs: delayMs }, 'Temporal unreachable at start-up; retrying');
      await sleep(delayMs);
    }
  }
}
