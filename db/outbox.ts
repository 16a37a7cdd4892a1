// The transactional outbox (docs/design.md §4): the one module that writes `outbox_event` rows for
// a task and marks them published. The relay's claim of unpublished rows is workers/outbox-relay.ts.
import { sql, type SQL } from 'drizzle-orm';
import type { DbOrTx } from './client';
import type { FenceToken } from './fence';
import { outboxEvent } from './schema';

/**
 * The creating statement's outbox row (db/task-admission.ts): that the task's workflow is to be
 * started, inserted for each row of `gate` (the task row that statement just wrote, or none).
 */
export function taskCreatedEventInsert(
  gate: SQL,
  token: FenceToken,
  event: { readonly eventId: string; readonly taskId: string; readonly tenantId: string; readonly provider: string; readonly priority: number },
): SQL {
  const payload = { task_id: event.taskId, tenant_id: event.tenantId, provider: event.provider, priority: event.priority };
  return sql`INSERT INTO outbox_event (event_id, aggregate_type, aggregate_id, event_type, payload, schema_version, home_region, write_epoch)
    SELECT ${event.eventId}::uuid, 'generation_task', ${event.taskId}::uuid, 'GenerationTaskCreated', ${JSON.stringify(payload)}::jsonb, 1, ${token.region}::text, ${token.epoch}::bigint
    FROM ${gate}`;
}

/**
 * Marks an outbox row published after its workflow was started. Never waits for a row lock: a
 * relay that holds the row (FOR UPDATE SKIP LOCKED, while it starts the same workflow, an
 * idempotent start) marks it itself. Waiting would hold one of the caller's pool connections for
 * as long as the relay's batch talks to Temporal; with Temporal slow, the API's pool ran dry and
 * every request answered 503 (seen in the e2e benchmark). Returns whether this call marked it.
 */
export async function markOutboxPublished(db: DbOrTx, eventId: string): Promise<boolean> {
  return (await markOutboxRowsPublished(db, [eventId])).has(eventId);
}

/** markOutboxPublished for several rows in one statement; returns the ids this call marked. */
export async function markOutboxRowsPublished(db: DbOrTx, eventIds: readonly string[]): Promise<Set<string>> {
  const marked = await db
    .update(outboxEvent)
    .set({ published_at: sql`now()`, publish_attempts: sql`${outboxEvent.publish_attempts} + 1` })
    .where(
      sql`${outboxEvent.event_id} IN (SELECT event_id FROM outbox_event WHERE event_id = ANY(${sql.param([...eventIds])}::uuid[]) AND published_at IS NULL FOR UPDATE SKIP LOCKED)`,
    )
    .returning({ id: outboxEvent.event_id });
  return new Set(marked.map((m) => m.id));
}

/**
 * markOutboxRowsPublished under the region fence, in the same one statement (as the create's own,
 * db/task-admission.ts): the fence row is share-locked and must name `token`'s region and epoch,
 * else nothing is marked and `held` is false. The API's fast path marks this way; a failover,
 * which updates the fence row, either committed before (nothing marked) or waits for the mark.
 */
export async function markOutboxRowsPublishedFenced(
  db: DbOrTx,
  token: FenceToken,
  eventIds: readonly string[],
): Promise<{ readonly held: boolean; readonly marked: Set<string> }> {
  const { rows } = await db.execute(sql`
    WITH fence AS (
      SELECT 1 FROM region_write_fence
      WHERE resource_scope = ${token.scope} AND active_region = ${token.region} AND write_epoch = ${token.epoch}
      FOR SHARE
    ), marked AS (
      UPDATE outbox_event SET published_at = now(), publish_attempts = publish_attempts + 1
      WHERE EXISTS (SELECT 1 FROM fence)
        AND event_id IN (SELECT event_id FROM outbox_event WHERE event_id = ANY(${sql.param([...eventIds])}::uuid[]) AND published_at IS NULL FOR UPDATE SKIP LOCKED)
      RETURNING event_id
    )
    SELECT EXISTS (SELECT 1 FROM fence) AS held, marked.event_id::text AS event_id
    FROM (SELECT 1) AS one LEFT JOIN marked ON true`);
  const found = rows as { held: boolean; event_id: string | null }[];
  return { held: found[0]?.held === true, marked: new Set(found.flatMap((r) => (r.event_id ? [r.event_id] : []))) };
}
