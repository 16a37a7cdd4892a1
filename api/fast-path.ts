// After a create commits, the API tries to start the workflow at once (the fast path). It is
// an optimisation, never a dependency: bounded by a short timeout, skipped for a cool-down
// after a failure, and backed by the outbox relay, which starts whatever the fast path missed.
import type { Db } from '../db/client';
import type { Logger } from '../observability/logger';
import type { Metrics } from '../observability/metrics';
import type { GenerationFacade, TaskRef } from '../temporal/facade';
import { markOutboxRowsPublished } from '../db/outbox';

export interface FastPath {
  /** Resolves within timeoutMs: true when the workflow was started and the outbox row marked. */
  tryStart(task: TaskRef, outboxEventId: string): Promise<boolean>;
  /**
   * What the create handler calls after the commit. 'await' (API_FAST_PATH_MODE): tryStart, so
   * the 202 waits up to timeoutMs for Temporal. 'background': tryStart without waiting, at most
   * maxInFlight at once (beyond that the relay starts the workflow), so the 202 answers as soon
   * as the task is committed. Either way the outbox row is the guarantee.
   */
  afterCommit(task: TaskRef, outboxEventId: string): Promise<void>;
  /** Background starts not finished yet. */
  inFlight(): number;
}

export function createFastPath(opts: {
  db: Db;
  facade: GenerationFacade;
  logger: Logger;
  metrics: Metrics;
  timeoutMs: number;
  cooldownMs: number;
  mode?: 'await' | 'background';
  /** Background starts at once; more are left to the relay (default 64). */
  maxInFlight?: number;
}): FastPath {
  let skipUntil = 0;
  let inFlight = 0;
  const markPublished = createPublishedMarker(opts.db);
  const maxInFlight = opts.maxInFlight ?? 64;
  /** After a failure, one create at a time probes Temporal; the others leave it to the relay. */
  let probing = false;
  const fastPath: FastPath = {
    inFlight: () => inFlight,
    async afterCommit(task, outboxEventId) {
      if (opts.mode !== 'background') {
        await fastPath.tryStart(task, outboxEventId);
        return;
      }
      if (inFlight >= maxInFlight) {
        opts.metrics.outboxPublished.inc({ path: 'fast_path', outcome: 'skipped' });
        return;
      }
      inFlight += 1;
      // tryStart never rejects (it reports through metrics and logs); the finally is the bookkeeping.
      void fastPath.tryStart(task, outboxEventId).finally(() => {
        inFlight -= 1;
      });
    },
    async tryStart(task, outboxEventId) {
      const recovering = skipUntil > 0;
      if (Date.now() < skipUntil || (recovering && probing)) {
        opts.metrics.outboxPublished.inc({ path: 'fast_path', outcome: 'skipped' });
        return false;
      }
      if (recovering) probing = true;
      const started = opts.facade.startGeneration(task).then(() => markPublished(outboxEventId));
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
  return fastPath;
}

/**
 * Marks outbox rows published after their fast-path starts, batched: while one mark is in flight
 * the next rows wait and go together in one statement (under load, one round trip for many
 * creates; alone, no added wait). Each caller learns whether its row was marked by this process.
 */
function createPublishedMarker(db: Db): (eventId: string) => Promise<boolean> {
  let queued: { id: string; settle: (marked: boolean | Error) => void }[] = [];
  let flushing = false;
  async function flush(): Promise<void> {
    flushing = true;
    try {
      while (queued.length > 0) {
        const batch = queued;
        queued = [];
        try {
          const marked = await markOutboxRowsPublished(
            db,
            batch.map((b) => b.id),
          );
          for (const b of batch) b.settle(marked.has(b.id));
        } catch (err) {
          for (const b of batch) b.settle(err as Error);
        }
      }
    } finally {
      flushing = false;
    }
  }
  return (id) =>
    new Promise<boolean>((resolve, reject) => {
      queued.push({ id, settle: (r) => (r instanceof Error ? reject(r) : resolve(r)) });
      if (!flushing) void flush();
    });
}
