// After a create commits, the API tries to start the workflow at once (the fast path). It is
// an optimisation, never a dependency: bounded by a short timeout, skipped for a cool-down
// after a failure, and backed by the outbox relay, which starts whatever the fast path missed.
// The outbox mark is a fact write like any other: it holds the region fence under the create's
// token (db/fence.ts), so an API whose region was failed over meanwhile marks nothing and the
// active region's relay takes the row.
import type { Db } from '../db/client';
import { FenceRejectedError, readFence, type FenceToken } from '../db/fence';
import type { Logger } from '../observability/logger';
import type { Metrics } from '../observability/metrics';
import type { GenerationFacade, TaskRef } from '../temporal/facade';
import { markOutboxRowsPublishedFenced } from '../db/outbox';

export interface FastPath {
  /**
   * Resolves within timeoutMs: true when the workflow was started and the outbox row marked.
   * `token`: the create's fence token, which the mark holds.
   */
  tryStart(task: TaskRef, outboxEventId: string, token: FenceToken): Promise<boolean>;
  /**
   * What the create handler calls after the commit. 'await' (API_FAST_PATH_MODE): tryStart, so
   * the 202 waits up to timeoutMs for Temporal. 'background': tryStart without waiting, at most
   * maxInFlight at once (beyond that the relay starts the workflow), so the 202 answers as soon
   * as the task is committed. Either way the outbox row is the guarantee.
   */
  afterCommit(task: TaskRef, outboxEventId: string, token: FenceToken): Promise<void>;
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
    async afterCommit(task, outboxEventId, token) {
      if (opts.mode !== 'background') {
        await fastPath.tryStart(task, outboxEventId, token);
        return;
      }
      if (inFlight >= maxInFlight) {
        opts.metrics.outboxPublished.inc({ path: 'fast_path', outcome: 'skipped' });
        return;
      }
      inFlight += 1;
      // tryStart never rejects (it reports through metrics and logs); the finally is the bookkeeping.
      void fastPath.tryStart(task, outboxEventId, token).finally(() => {
        inFlight -= 1;
      });
    },
    async tryStart(task, outboxEventId, token) {
      const recovering = skipUntil > 0;
      if (Date.now() < skipUntil || (recovering && probing)) {
        opts.metrics.outboxPublished.inc({ path: 'fast_path', outcome: 'skipped' });
        return false;
      }
      if (recovering) probing = true;
      const started = opts.facade.startGeneration(task).then(() => markPublished(outboxEventId, token));
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
        if (err instanceof FenceRejectedError) {
          // Temporal answered; this region no longer owns writes. The active region's relay
          // marks the row (its start of the same workflow is idempotent): no cool-down.
          skipUntil = 0;
          opts.metrics.outboxPublished.inc({ path: 'fast_path', outcome: 'fenced' });
          opts.logger.warn({ err, taskId: task.taskId }, 'outbox row left to the active region: the fence moved since the create');
          return false;
        }
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
 * creates; alone, no added wait) that holds the fence under the rows' token (rows created under
 * different epochs, around a failover, go in one statement each). Each caller learns whether its
 * row was marked by this process; a fenced-out token rejects with FenceRejectedError, nothing marked.
 */
function createPublishedMarker(db: Db): (eventId: string, token: FenceToken) => Promise<boolean> {
  let queued: { id: string; token: FenceToken; settle: (marked: boolean | Error) => void }[] = [];
  let flushing = false;
  async function mark(token: FenceToken, batch: typeof queued): Promise<void> {
    try {
      const { held, marked } = await markOutboxRowsPublishedFenced(
        db,
        token,
        batch.map((b) => b.id),
      );
      const refused = held ? null : new FenceRejectedError(token, await readFence(db, token.scope));
      for (const b of batch) b.settle(refused ?? marked.has(b.id));
    } catch (err) {
      for (const b of batch) b.settle(err as Error);
    }
  }
  async function flush(): Promise<void> {
    flushing = true;
    try {
      while (queued.length > 0) {
        const byToken = Map.groupBy(queued, (b) => `${b.token.scope}/${b.token.region}/${b.token.epoch}`);
        queued = [];
        for (const batch of byToken.values()) await mark(batch[0]!.token, batch);
      }
    } finally {
      flushing = false;
    }
  }
  return (id, token) =>
    new Promise<boolean>((resolve, reject) => {
      queued.push({ id, token, settle: (r) => (r instanceof Error ? reject(r) : resolve(r)) });
      if (!flushing) void flush();
    });
}
