// The outbox relay: starts workflows for accepted tasks whose fast-path start did not happen
// (Temporal was down, the API crashed after commit). Rows are claimed with FOR UPDATE SKIP
// LOCKED, so any number of relays can run; starting is idempotent (workflow id = task id).
import { sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { FenceRejectedError, acquireFence, holdFence, inFence, type FenceToken } from '../db/fence';
import { fullJitterDelay } from '../domain/backoff';
import type { Logger } from '../observability/logger';
import type { GenerationFacade } from '../temporal/facade';

export interface RelayOptions {
  readonly db: Db;
  /** The region fence this relay writes under (its process's scope and region). */
  readonly fence: { readonly scope: string; readonly region: string };
  readonly facade: GenerationFacade;
  readonly logger: Logger;
  readonly batchSize: number;
  readonly intervalMs: number;
  readonly onPublished?: (outcome: 'published' | 'failed') => void;
}

interface OutboxRow {
  event_id: string;
  aggregate_id: string;
  payload: { tenant_id: string; provider: string; priority?: number };
  publish_attempts: number;
}

/**
 * Publishes one batch; returns how many rows were published. A relay outside the active region
 * publishes nothing; its row updates hold the fence (db/fence.ts), so a relay whose epoch moved
 * during the batch writes nothing (the starts it made are idempotent; the active region's relay
 * marks them). The Outbox reconciler (reconcilers/outbox.ts) runs the same pass over rows older
 * than its grace, backing off or not (`sweep`).
 */
export async function relayOnce(
  opts: RelayOptions,
  sweep?: { readonly olderThanSeconds: number },
): Promise<{ published: number; failed: number }> {
  let token: FenceToken;
  try {
    ({ token } = await acquireFence(opts.db, opts.fence.scope, opts.fence.region));
  } catch (err) {
    if (err instanceof FenceRejectedError) return { published: 0, failed: 0 };
    throw err;
  }
  let published = 0;
  let failed = 0;
  await opts.db.transaction(async (tx) => {
    const { rows } = await tx.execute(sql`
      SELECT event_id, aggregate_id, payload, publish_attempts FROM outbox_event
      WHERE published_at IS NULL AND event_type = 'GenerationTaskCreated'
        AND ${sweep ? sql`created_at < now() - make_interval(secs => ${sweep.olderThanSeconds})` : sql`(next_retry_at IS NULL OR next_retry_at <= now())`}
      ORDER BY created_at
      LIMIT ${opts.batchSize}
      FOR UPDATE SKIP LOCKED`);
    const outcomes: { row: OutboxRow; error: Error | null }[] = [];
    for (const row of rows as unknown as OutboxRow[]) {
      try {
        await opts.facade.startGeneration({
          taskId: row.aggregate_id,
          tenantId: row.payload.tenant_id,
          provider: row.payload.provider,
          ...(row.payload.priority !== undefined ? { priority: row.payload.priority } : {}),
        });
        outcomes.push({ row, error: null });
      } catch (err) {
        outcomes.push({ row, error: err as Error });
      }
    }
    // Held from the first write to the commit; not during the starts, which may wait on Temporal.
    if (outcomes.length > 0) await holdFence(tx, token);
    for (const { row, error } of outcomes) {
      if (!error) {
        await tx.execute(sql`
          UPDATE outbox_event SET published_at = now(), publish_attempts = publish_attempts + 1, last_error = NULL
          WHERE event_id = ${row.event_id}`);
        published += 1;
        opts.onPublished?.('published');
        continue;
      }
      failed += 1;
      opts.onPublished?.('failed');
      const delayMs = 1_000 + fullJitterDelay(row.publish_attempts, 1_000, 60_000, Math.random);
      await tx.execute(sql`
        UPDATE outbox_event SET publish_attempts = publish_attempts + 1,
          next_retry_at = now() + make_interval(secs => ${delayMs / 1000}),
          last_error = ${String(error.message).slice(0, 500)}
        WHERE event_id = ${row.event_id}`);
      opts.logger.warn({ taskId: row.aggregate_id, err: error }, 'outbox publish failed; will retry');
    }
  });
  // Temporal answers again: rows still backing off from the outage need not wait out their
  // (up to a minute long) delays. Without this the drain after an outage is paced by backoff.
  if (published > 0) {
    await inFence(opts.db, token, (tx) =>
      tx.execute(sql`
        UPDATE outbox_event SET next_retry_at = NULL
        WHERE published_at IS NULL AND next_retry_at > now()`),
    );
  }
  return { published, failed };
}

/** Runs the relay until stop() is called. */
export function startOutboxRelay(opts: RelayOptions): { stop(): Promise<void> } {
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> = Promise.resolve();
  const tick = () => {
    running = relayOnce(opts)
      .then(({ published }) => {
        if (published > 0) opts.logger.info({ published }, 'outbox relay published tasks');
        // A full batch means more may be waiting: go again at once.
        return published >= opts.batchSize ? 0 : opts.intervalMs;
      })
      .catch((err: unknown) => {
        opts.logger.warn({ err }, 'outbox relay pass failed');
        return opts.intervalMs * 5;
      })
      .then((delay) => {
        if (!stopped) timer = setTimeout(tick, delay);
      });
  };
  tick();
  return {
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}
