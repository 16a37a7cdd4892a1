// After a create commits, the API tries to start the workflow at once (the fast path). It is
// an optimisation, never a dependency: bounded by a short timeout, skipped for a cool-down
// after a failure, and backed by the outbox relay, which starts whatever the fast path missed.
import type { Db } from '../db/client';
import type { Logger } from '../observability/logger';
import type { Metrics } from '../observability/metrics';
import type { GenerationFacade, TaskRef } from '../temporal/facade';
import { markOutboxPublished } from './tasks.service';

export interface FastPath {
  /** Resolves within timeoutMs: true when the workflow was started and the outbox row marked. */
  tryStart(task: TaskRef, outboxEventId: string): Promise<boolean>;
}

export function createFastPath(opts: {
  db: Db;
  facade: GenerationFacade;
  logger: Logger;
  metrics: Metrics;
  timeoutMs: number;
  cooldownMs: number;
}): FastPath {
  let skipUntil = 0;
  /** After a failure, one create at a time probes Temporal; the others leave it to the relay. */
  let probing = false;
  return {
    async tryStart(task, outboxEventId) {
      const recovering = skipUntil > 0;
      if (Date.now() < skipUntil || (recovering && probing)) {
        opts.metrics.outboxPublished.inc({ path: 'fast_path', outcome: 'skipped' });
        return false;
      }
      if (recovering) probing = true;
      const started = opts.facade.startGeneration(task).then(() => markOutboxPublished(opts.db, outboxEventId));
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`workflow start took over ${opts.timeoutMs} ms`)), opts.timeoutMs);
      });
      try {
        await Promise.race([started, timeout]);
        skipUntil = 0;
        opts.metrics.outboxPublished.inc({ path: 'fast_path', outcome: 'published' });
        return true;
      } catch (err) {
        started.catch(() => undefined);
        skipUntil = Date.now() + opts.cooldownMs;
        opts.metrics.outboxPublished.inc({ path: 'fast_path', outcome: 'deferred' });
        opts.logger.warn({ err, taskId: task.taskId }, 'workflow start deferred to the outbox relay');
        return false;
      } finally {
        clearTimeout(timer);
        if (recovering) probing = false;
      }
    },
  };
}
