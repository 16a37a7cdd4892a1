// The outbox relay: starts workflows for accepted tasks whose fast-path start did not happen
// (Temporal was down, the API crashed after commit). A pass claims a batch of rows with a lease
// (claimed_until) in one short statement, starts their workflows outside any transaction, and
// marks them in one fenced transaction: no row lock is held while Temporal is called, so neither
// the API's fast-path mark nor another relay ever waits on a slow Temporal
// (docs/decisions/0035-outbox-claim-lease.md). Any number of relays can run; starting is
// idempotent (workflow id = task-<id>, a closed run counts as started), so a lease that runs out
// under a stuck relay costs a second start call, never a second workflow.
import { sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { FenceRejectedError, acquireFence, inFence, type FenceToken } from '../db/fence';
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
  /** Leave rows younger than this to the API's fast path (default 0: claim at once). */
  readonly holdOffMs?: number;
}

interface OutboxRow {
  event_id: string;
  aggregate_id: string;
  payload: { tenant_id: string; provider: string; priority?: number };
  publish_attempts: number;
}

/**
 * How long a claim keeps other relays off a row. Starts stop at CLAIM_STOP_MS into the lease:
 * rows not tried by then are handed back unclaimed, so a claim never outlives the relay's work
 * on it while the relay is alive (a start that hangs past the lease is the one exception, and
 * is idempotent).
 */
const CLAIM_LEASE_S = 60;
const CLAIM_STOP_MS = 45_000;

/**
 * Publishes one batch; returns how many rows were published. A relay outside the active region
 * publishes nothing; its marks hold the fence (db/fence.ts), so a relay whose epoch
 * moved during the batch marks nothing (the starts it made are idempotent; its claims run out and
 * the active region's relay marks them). The Outbox reconciler (reconcilers/outbox.ts) runs the
 * same pass over rows older than its grace, backing off or not (`sweep`), never over a live claim.
 */
export async function relayOnce(opts: RelayOptions, sweep?: { readonly olderThanSeconds: number }): Promise<{ published: number; failed: number }> {
  let token: FenceToken;
  try {
    ({ token } = await acquireFence(opts.db, opts.fence.scope, opts.fence.region));
  } catch (err) {
    if (err instanceof FenceRejectedError) return { published: 0, failed: 0 };
    throw err;
  }
  const claimedAt = Date.now();
  const rows = await claimBatch(opts, sweep);
  if (rows.length === 0) return { published: 0, failed: 0 };
  const done: string[] = [];
  const failures: { row: OutboxRow; error: Error }[] = [];
  const untried: string[] = [];
  for (const row of rows) {
    if (Date.now() - claimedAt > CLAIM_STOP_MS) {
      untried.push(row.event_id);
      continue;
    }
    try {
      // 'closed' (the task's workflow already ran to its end) is as done as 'started'.
      await opts.facade.startGeneration({
        taskId: row.aggregate_id,
        tenantId: row.payload.tenant_id,
        provider: row.payload.provider,
        ...(row.payload.priority !== undefined ? { priority: row.payload.priority } : {}),
      });
      done.push(row.event_id);
    } catch (err) {
      failures.push({ row, error: err as Error });
    }
  }
  try {
    await markBatch(opts, token, done, failures, untried);
  } catch (err) {
    // Fenced out (or Postgres failed) after the starts: nothing is marked, and the rows go back
    // now rather than when the lease runs out, so the active region's relay takes them at once.
    await opts.db
      .execute(
        sql`UPDATE outbox_event SET claimed_until = NULL WHERE event_id = ANY(${sql.param(rows.map((r) => r.event_id))}::uuid[]) AND published_at IS NULL`,
      )
      .catch(() => undefined);
    throw err;
  }
  for (const { row, error } of failures) opts.logger.warn({ taskId: row.aggregate_id, err: error }, 'outbox publish failed; will retry');
  for (let i = 0; i < done.length; i++) opts.onPublished?.('published');
  for (let i = 0; i < failures.length; i++) opts.onPublished?.('failed');
  return { published: done.length, failed: failures.length };
}

/** Marks a batch's outcomes in one fenced transaction: published, backing off, or handed back untried. */
async function markBatch(
  opts: RelayOptions,
  token: FenceToken,
  done: string[],
  failures: { row: OutboxRow; error: Error }[],
  untried: string[],
): Promise<void> {
  await inFence(opts.db, token, async (tx) => {
    if (done.length > 0) {
      // published_at IS NULL: the API's fast path may have marked a row meanwhile.
      await tx.execute(sql`
        UPDATE outbox_event SET published_at = now(), publish_attempts = publish_attempts + 1, last_error = NULL, claimed_until = NULL
        WHERE event_id = ANY(${sql.param(done)}::uuid[]) AND published_at IS NULL`);
      // Temporal answers again: rows still backing off from an outage need not wait out their
      // (up to a minute long) delays. Without this the drain after an outage is paced by backoff.
      // Other relays' claims stay as they are.
      await tx.execute(sql`
        UPDATE outbox_event SET next_retry_at = NULL
        WHERE published_at IS NULL AND next_retry_at > now()`);
    }
    if (failures.length > 0) {
      const delaysS = failures.map(({ row }) => (1_000 + fullJitterDelay(row.publish_attempts, 1_000, 60_000, Math.random)) / 1000);
      await tx.execute(sql`
        UPDATE outbox_event o SET publish_attempts = o.publish_attempts + 1,
          next_retry_at = now() + make_interval(secs => f.delay_s), last_error = f.error, claimed_until = NULL
        FROM unnest(${sql.param(failures.map((f) => f.row.event_id))}::uuid[], ${sql.param(delaysS)}::float8[], ${sql.param(failures.map((f) => String(f.error.message).slice(0, 500)))}::text[])
          AS f(event_id, delay_s, error)
        WHERE o.event_id = f.event_id AND o.published_at IS NULL`);
    }
    if (untried.length > 0) {
      await tx.execute(sql`UPDATE outbox_event SET claimed_until = NULL WHERE event_id = ANY(${sql.param(untried)}::uuid[])`);
    }
  });
}

/**
 * Claims up to batchSize unpublished rows nobody holds: one statement, committed at once. Not
 * fenced: a claim changes no fact, only who tries next, and the caller has just checked that its
 * region is the active one; a relay fenced out in between leaves claims that run out after the
 * lease, and marks nothing.
 */
async function claimBatch(opts: RelayOptions, sweep?: { readonly olderThanSeconds: number }): Promise<OutboxRow[]> {
  const { rows } = await opts.db.execute(sql`
      UPDATE outbox_event SET claimed_until = now() + make_interval(secs => ${CLAIM_LEASE_S})
      WHERE event_id IN (
        SELECT event_id FROM outbox_event
        WHERE published_at IS NULL AND event_type = 'GenerationTaskCreated'
          AND (claimed_until IS NULL OR claimed_until <= now())
          AND ${sweep ? sql`created_at < now() - make_interval(secs => ${sweep.olderThanSeconds})` : sql`(next_retry_at IS NULL OR next_retry_at <= now()) AND created_at <= now() - make_interval(secs => ${(opts.holdOffMs ?? 0) / 1_000})`}
        ORDER BY created_at
        LIMIT ${opts.batchSize}
        FOR UPDATE SKIP LOCKED)
      RETURNING event_id, aggregate_id, payload, publish_attempts, created_at`);
  // RETURNING keeps no order: start the oldest first, as the claim chose them.
  return (rows as unknown as (OutboxRow & { created_at: string | Date })[]).sort((a, b) => new Date(a.created_at).getTime() - new Date(b.created_at).getTime());
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
