// Tenant webhooks' facts (docs/webhooks.md, docs/decisions/0018-tenant-webhooks.md): endpoints,
// the deliveries the transition trigger fans out, and every attempt. This module owns their
// writes; the events themselves are written only by the trigger `task_transition_webhook_event`.
import { storableText } from './storable';
import { randomUUID } from 'node:crypto';
import { and, asc, desc, eq, inArray, isNull, sql } from 'drizzle-orm';
import { shouldDisable } from '../domain/webhook-schedule';
import type { Db, DbOrTx } from './client';
import { holdFence, type FenceToken } from './fence';
import { tenantAttention, webhookAttempt, webhookDelivery, webhookEndpoint, webhookEvent, type WebhookDeliveryState, type WebhookEventType } from './schema';

export type WebhookEndpointRow = typeof webhookEndpoint.$inferSelect;
export type WebhookDeliveryRow = typeof webhookDelivery.$inferSelect;
export type WebhookAttemptRow = typeof webhookAttempt.$inferSelect;
export type WebhookEventRow = typeof webhookEvent.$inferSelect;

const live = (tenantId: string, endpointId: string) =>
  and(eq(webhookEndpoint.tenant_id, tenantId), eq(webhookEndpoint.endpoint_id, endpointId), isNull(webhookEndpoint.deleted_at));

export async function countLiveEndpoints(db: DbOrTx, tenantId: string): Promise<number> {
  const [row] = await db
    .select({ n: sql<number>`count(*)::int` })
    .from(webhookEndpoint)
    .where(and(eq(webhookEndpoint.tenant_id, tenantId), isNull(webhookEndpoint.deleted_at)));
  return row?.n ?? 0;
}

export async function insertEndpoint(
  tx: DbOrTx,
  args: { tenantId: string; url: string; description: string | null; events: WebhookEventType[] | null },
): Promise<WebhookEndpointRow> {
  const [row] = await tx
    .insert(webhookEndpoint)
    .values({ endpoint_id: randomUUID(), tenant_id: args.tenantId, url: args.url, description: args.description, events: args.events })
    .returning();
  return row!;
}

/** The tenant's endpoints, oldest first (the first enabled one signs tasks' own webhook_url). */
export function listEndpoints(db: DbOrTx, tenantId: string): Promise<WebhookEndpointRow[]> {
  return db
    .select()
    .from(webhookEndpoint)
    .where(and(eq(webhookEndpoint.tenant_id, tenantId), isNull(webhookEndpoint.deleted_at)))
    .orderBy(asc(webhookEndpoint.created_at), asc(webhookEndpoint.endpoint_id));
}

export async function getEndpoint(db: DbOrTx, tenantId: string, endpointId: string): Promise<WebhookEndpointRow | null> {
  const [row] = await db.select().from(webhookEndpoint).where(live(tenantId, endpointId));
  return row ?? null;
}

/** Locks a live endpoint of the tenant (rotation, delete, redeliver serialise on it). */
export async function lockEndpoint(tx: DbOrTx, tenantId: string, endpointId: string): Promise<WebhookEndpointRow | null> {
  const [row] = await tx.select().from(webhookEndpoint).where(live(tenantId, endpointId)).for('update');
  return row ?? null;
}

/** The endpoint whose secrets sign a task's own webhook_url: the tenant's oldest enabled one. */
export async function taskUrlSigningEndpoint(db: DbOrTx, tenantId: string): Promise<string | null> {
  const [row] = await db
    .select({ id: webhookEndpoint.endpoint_id })
    .from(webhookEndpoint)
    .where(and(eq(webhookEndpoint.tenant_id, tenantId), eq(webhookEndpoint.enabled, true), isNull(webhookEndpoint.deleted_at)))
    .orderBy(asc(webhookEndpoint.created_at), asc(webhookEndpoint.endpoint_id))
    .limit(1);
  return row?.id ?? null;
}

export async function updateEndpoint(
  tx: DbOrTx,
  tenantId: string,
  endpointId: string,
  patch: { url?: string; events?: WebhookEventType[] | null; enabled?: boolean; description?: string | null },
): Promise<WebhookEndpointRow | null> {
  const [row] = await tx
    .update(webhookEndpoint)
    .set({
      updated_at: sql`now()`,
      ...(patch.url !== undefined ? { url: patch.url } : {}),
      ...(patch.events !== undefined ? { events: patch.events } : {}),
      ...(patch.description !== undefined ? { description: patch.description } : {}),
      ...(patch.enabled !== undefined ? { enabled: patch.enabled } : {}),
      // Enabled again by the tenant: its failure clock starts over.
      ...(patch.enabled === true ? { failing_since: null, disabled_at: null, disabled_reason: null } : {}),
      ...(patch.enabled === false ? { disabled_at: sql`now()`, disabled_reason: 'disabled by the tenant' } : {}),
    })
    .where(live(tenantId, endpointId))
    .returning();
  return row ?? null;
}

/** Deletes an endpoint: its row stays for the delivery log, its pending deliveries are cancelled. */
export async function deleteEndpoint(tx: DbOrTx, tenantId: string, endpointId: string): Promise<boolean> {
  const [row] = await tx
    .update(webhookEndpoint)
    .set({ deleted_at: sql`now()`, enabled: false, updated_at: sql`now()` })
    .where(live(tenantId, endpointId))
    .returning({ id: webhookEndpoint.endpoint_id });
  if (!row) return false;
  await tx
    .update(webhookDelivery)
    .set({ state: 'cancelled', last_error: 'endpoint deleted', lease_until: null })
    .where(and(eq(webhookDelivery.endpoint_id, endpointId), eq(webhookDelivery.state, 'pending')));
  return true;
}

export interface DeliveryWithAttempts {
  readonly delivery: WebhookDeliveryRow;
  readonly event: WebhookEventRow;
  readonly attempts: WebhookAttemptRow[];
}

/** One page of an endpoint's deliveries, newest first, each with its event and every attempt. */
export async function listDeliveries(
  db: DbOrTx,
  endpointId: string,
  q: { limit: number; state?: WebhookDeliveryState; afterId?: string },
): Promise<DeliveryWithAttempts[]> {
  const rows = await db
    .select({ delivery: webhookDelivery, event: webhookEvent })
    .from(webhookDelivery)
    .innerJoin(webhookEvent, eq(webhookEvent.event_id, webhookDelivery.event_id))
    .where(
      and(
        eq(webhookDelivery.endpoint_id, endpointId),
        q.state ? eq(webhookDelivery.state, q.state) : undefined,
        // Keyset on the cursor row itself: timestamps keep their microseconds.
        q.afterId
          ? sql`(${webhookDelivery.created_at}, ${webhookDelivery.delivery_id}) < (SELECT created_at, delivery_id FROM webhook_delivery WHERE delivery_id = ${q.afterId})`
          : undefined,
      ),
    )
    .orderBy(desc(webhookDelivery.created_at), desc(webhookDelivery.delivery_id))
    .limit(q.limit);
  if (rows.length === 0) return [];
  const attempts = await db
    .select()
    .from(webhookAttempt)
    .where(
      inArray(
        webhookAttempt.delivery_id,
        rows.map((r) => r.delivery.delivery_id),
      ),
    )
    .orderBy(asc(webhookAttempt.attempt_no));
  return rows.map((r) => ({ ...r, attempts: attempts.filter((a) => a.delivery_id === r.delivery.delivery_id) }));
}

/**
 * A manual redeliver: the delivery is due now with its schedule started again, the same event
 * and webhook-id. Null when the endpoint has no such delivery. The lease goes too: an attempt
 * in flight no longer holds the delivery, so its outcome (a step of the old schedule, perhaps
 * `failed`) does not overrule the redeliver (recordAttempt).
 */
export async function redeliver(tx: DbOrTx, endpointId: string, deliveryId: string): Promise<WebhookDeliveryRow | null> {
  const [row] = await tx
    .update(webhookDelivery)
    .set({ state: 'pending', schedule_step: 0, next_attempt_at: sql`now()`, delivered_at: null, lease_until: null })
    .where(and(eq(webhookDelivery.delivery_id, deliveryId), eq(webhookDelivery.endpoint_id, endpointId)))
    .returning();
  return row ?? null;
}

/** Ops: redeliver any delivery (also a task's own webhook_url). */
export async function redeliverAny(tx: DbOrTx, deliveryId: string): Promise<WebhookDeliveryRow | null> {
  const [row] = await tx
    .update(webhookDelivery)
    .set({ state: 'pending', schedule_step: 0, next_attempt_at: sql`now()`, delivered_at: null, lease_until: null })
    .where(and(eq(webhookDelivery.delivery_id, deliveryId), sql`${webhookDelivery.state} <> 'cancelled'`))
    .returning();
  return row ?? null;
}

// ---- The relay's side ----

/** A claimed delivery: what to send, to where, and where it is in its schedule. */
export interface ClaimedDelivery {
  readonly delivery_id: string;
  readonly event_id: string;
  readonly tenant_id: string;
  readonly endpoint_id: string | null;
  readonly target_key: string;
  /** The endpoint's current URL, or the task's own webhook_url. */
  readonly url: string;
  readonly attempt_count: number;
  readonly schedule_step: number;
  /** The claim's lease_until as Postgres wrote it (to the microsecond): the claim's identity. */
  readonly lease: string;
  readonly event_type: WebhookEventType;
  readonly data: Record<string, unknown>;
  readonly event_created_at: Date;
}

/** Deliveries that count against the backlog: pending, to a target that still takes them. */
const SENDABLE = sql`d.state = 'pending' AND (d.endpoint_id IS NULL OR EXISTS (
  SELECT 1 FROM webhook_endpoint e WHERE e.endpoint_id = d.endpoint_id AND e.enabled AND e.deleted_at IS NULL))`;

/**
 * Claims due deliveries, at most `perTarget` in flight per target across every relay and at
 * most `limit` in all. Each target is claimed under a transaction-scoped advisory lock, so two
 * relays never both see room under one target's cap; the rows are taken FOR UPDATE SKIP LOCKED
 * and leased until `leaseMs` from now (the lease is the claim: a crashed relay's claim expires
 * and the delivery is tried again, with the same webhook-id).
 */
export async function claimDueDeliveries(db: Db, token: FenceToken, opts: { limit: number; perTarget: number; leaseMs: number }): Promise<ClaimedDelivery[]> {
  if (opts.limit <= 0) return [];
  return db.transaction(async (tx) => {
    // Claims are writes: only the active region's relay takes any (docs/design.md §3).
    await holdFence(tx, token);
    // Targets with a due delivery and room under their cap, oldest due first. A target at its cap
    // (a slow receiver holding every place) is left out here, not skipped below: 500 of them due
    // first would otherwise fill every pass and starve every other target.
    const { rows: targets } = await tx.execute(sql`
      SELECT d.target_key
      FROM webhook_delivery d
      WHERE ${SENDABLE} AND (d.next_attempt_at <= now() OR d.lease_until > now())
      GROUP BY d.target_key
      HAVING count(*) FILTER (WHERE d.next_attempt_at <= now() AND (d.lease_until IS NULL OR d.lease_until <= now())) > 0
        AND count(*) FILTER (WHERE d.lease_until > now()) < ${opts.perTarget}
      ORDER BY min(d.next_attempt_at)
      LIMIT 500`);
    const claimed: ClaimedDelivery[] = [];
    for (const t of targets as { target_key: string }[]) {
      const budget = opts.limit - claimed.length;
      if (budget <= 0) break;
      const { rows: locked } = await tx.execute(sql`SELECT pg_try_advisory_xact_lock(hashtext(${`webhook-target:${t.target_key}`})) AS ok`);
      if (!(locked[0] as { ok: boolean }).ok) continue; // another relay is claiming for this target
      const { rows: counted } = await tx.execute(sql`
        SELECT count(*)::int AS n FROM webhook_delivery WHERE target_key = ${t.target_key} AND state = 'pending' AND lease_until > now()`);
      const room = Math.min(budget, opts.perTarget - (counted[0] as { n: number }).n);
      if (room <= 0) continue;
      const { rows } = await tx.execute(sql`
        UPDATE webhook_delivery d SET lease_until = now() + make_interval(secs => ${opts.leaseMs / 1000})
        FROM webhook_event ev
        WHERE ev.event_id = d.event_id AND d.delivery_id IN (
          SELECT delivery_id FROM webhook_delivery
          WHERE target_key = ${t.target_key} AND state = 'pending' AND next_attempt_at <= now()
            AND (lease_until IS NULL OR lease_until <= now())
          ORDER BY next_attempt_at, created_at
          LIMIT ${room}
          FOR UPDATE SKIP LOCKED)
        RETURNING d.delivery_id, d.event_id, d.tenant_id, d.endpoint_id, d.target_key, d.attempt_count, d.schedule_step, d.lease_until::text AS lease,
          COALESCE((SELECT e.url FROM webhook_endpoint e WHERE e.endpoint_id = d.endpoint_id), d.url) AS url,
          ev.event_type, ev.data, ev.created_at AS event_created_at`);
      for (const r of rows as unknown as ClaimedDelivery[]) {
        claimed.push({ ...r, event_created_at: new Date(r.event_created_at) });
      }
    }
    return claimed;
  });
}

export interface AttemptRecord {
  readonly url: string;
  readonly startedAt: Date;
  readonly ok: boolean;
  readonly status: number | null;
  readonly latencyMs: number;
  readonly error: string | null;
  readonly excerpt: string | null;
}

export type AttemptNext = { kind: 'delivered' } | { kind: 'retry'; step: number; delayMs: number } | { kind: 'failed' };

/** Text a receiver chose (its answer's excerpt, an error quoting it), storable (db/storable.ts): one NUL would roll the whole record back and the attempt be sent again at every lease, for ever. */
const storable = (text: string | null): string | null => (text === null ? null : storableText(text));

/**
 * Records one attempt and what follows it, in one transaction: the attempt row (numbered from
 * the delivery's count), the delivery's state, and the endpoint's health. A delivery already
 * delivered (by a relay whose lease outlived ours) is not set back. A claim that no longer holds
 * the lease (it expired and another relay claimed the delivery, or a redeliver started it over)
 * records its attempt, and a success, but neither clears the lease nor sets a next step: those
 * belong to whoever holds the delivery now. Returns whether the attempt disabled its endpoint.
 */
export async function recordAttempt(
  db: Db,
  token: FenceToken,
  claimed: ClaimedDelivery,
  attempt: AttemptRecord,
  next: AttemptNext,
  health: { disableAfterMs: number },
): Promise<{ disabledEndpoint: boolean }> {
  const error = storable(attempt.error);
  const excerpt = storable(attempt.excerpt);
  return db.transaction(async (tx) => {
    // A relay fenced off mid-send records nothing: its lease expires and the active region's
    // relay sends again (same webhook-id; receivers dedupe on it).
    await holdFence(tx, token);
    const [current] = await tx
      .select({
        attempt_count: webhookDelivery.attempt_count,
        state: webhookDelivery.state,
        held: sql<boolean>`COALESCE(${webhookDelivery.lease_until} = ${claimed.lease}::timestamptz, false)`,
      })
      .from(webhookDelivery)
      .where(eq(webhookDelivery.delivery_id, claimed.delivery_id))
      .for('update');
    if (!current) return { disabledEndpoint: false };
    const attemptNo = current.attempt_count + 1;
    const stillPending = current.state === 'pending';
    await tx
      .update(webhookDelivery)
      .set({
        attempt_count: attemptNo,
        ...(current.held ? { lease_until: null } : {}),
        last_error: error,
        ...(!stillPending || (!current.held && next.kind !== 'delivered')
          ? {}
          : next.kind === 'delivered'
            ? { state: 'succeeded' as const, delivered_at: sql`now()` }
            : next.kind === 'failed'
              ? { state: 'failed' as const }
              : { schedule_step: next.step, next_attempt_at: sql`now() + make_interval(secs => ${next.delayMs / 1000})` }),
      })
      .where(eq(webhookDelivery.delivery_id, claimed.delivery_id));
    await tx.insert(webhookAttempt).values({
      delivery_id: claimed.delivery_id,
      attempt_no: attemptNo,
      url: attempt.url,
      started_at: attempt.startedAt,
      latency_ms: attempt.latencyMs,
      succeeded: attempt.ok,
      response_status: attempt.status,
      response_excerpt: excerpt,
      error,
    });
    if (!claimed.endpoint_id) return { disabledEndpoint: false };
    if (attempt.ok) {
      await tx.update(webhookEndpoint).set({ failing_since: null }).where(eq(webhookEndpoint.endpoint_id, claimed.endpoint_id));
      return { disabledEndpoint: false };
    }
    const [ep] = await tx
      .update(webhookEndpoint)
      .set({ failing_since: sql`COALESCE(${webhookEndpoint.failing_since}, ${attempt.startedAt})` })
      .where(eq(webhookEndpoint.endpoint_id, claimed.endpoint_id))
      .returning();
    if (!ep || !ep.enabled || !shouldDisable(ep.failing_since, attempt.startedAt, health.disableAfterMs)) return { disabledEndpoint: false };
    const reason = `every delivery attempt failed since ${ep.failing_since!.toISOString()} (last: ${error ?? 'failed'})`;
    await tx
      .update(webhookEndpoint)
      .set({ enabled: false, disabled_at: sql`now()`, disabled_reason: storable(reason.slice(0, 500)), updated_at: sql`now()` })
      .where(eq(webhookEndpoint.endpoint_id, ep.endpoint_id));
    await tx.insert(tenantAttention).values({
      attention_id: randomUUID(),
      tenant_id: ep.tenant_id,
      kind: 'webhook_endpoint_disabled',
      subject_id: ep.endpoint_id,
      detail: { url: ep.url, failing_since: ep.failing_since!.toISOString(), last_error: error },
    });
    return { disabledEndpoint: true };
  });
}

/** The notify backlog: deliveries kept for targets that take them, and how long the oldest has waited. */
export async function notifyBacklog(db: DbOrTx): Promise<{ count: number; oldestSeconds: number }> {
  const { rows } = await db.execute(sql`
    SELECT count(*)::int AS count, COALESCE(EXTRACT(EPOCH FROM now() - min(d.created_at)), 0)::float8 AS oldest
    FROM webhook_delivery d WHERE ${SENDABLE}`);
  const r = rows[0] as { count: number; oldest: number };
  return { count: r.count, oldestSeconds: Number(r.oldest) };
}

/** Open needs-attention records of a tenant (the ops CLI). */
export function openAttention(db: DbOrTx, tenantId: string) {
  return db
    .select()
    .from(tenantAttention)
    .where(and(eq(tenantAttention.tenant_id, tenantId), isNull(tenantAttention.resolved_at)))
    .orderBy(desc(tenantAttention.created_at));
}
