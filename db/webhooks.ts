// Tenant webhooks' facts (docs/webhooks.md, docs/decisions/0018-tenant-webhooks.md): endpoints,
// the deliveries the transition trigger fans out, and every attempt. This module owns their
// writes; the events themselves are written only by the trigger `task_transition_webhook_event`.
import { storableText } from './storable';
import { randomUUID } from 'node:crypto';
import { and, asc, desc, eq, inArray, isNull, sql } from 'drizzle-orm';
import { shouldDisable } from '../domain/webhook-schedule';
import type { Db, DbOrTx, Tx } from './client';
import { holdFence, type FenceToken } from './fence';
import {
  tenantAttention,
  webhookAttempt,
  webhookDelivery,
  webhookEndpoint,
  webhookEvent,
  webhookTarget,
  TASK_URL_ORIGIN_PATTERN,
  type WebhookDeliveryState,
  type WebhookEventType,
} from './schema';

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

/** A task's own webhook_url's origin, as the webhook trigger derives it for the delivery's target key. */
export function taskUrlOrigin(url: string): string {
  return new RegExp(TASK_URL_ORIGIN_PATTERN).exec(url)?.[0] ?? url;
}

/**
 * The task-URL origins the tenant uses now, counted up to `cap` + 1: those of its open tasks (their
 * events are still to come) and of its task-URL deliveries still pending; and whether `origin` is
 * one of them. Each is a skip scan of an index (idx_task_open_webhook_origin,
 * idx_webhook_delivery_tenant_target_due) that stops past `cap` + 1 origins, whatever the
 * tenant's number of tasks or deliveries.
 */
export async function taskUrlOriginsInUse(db: DbOrTx, tenantId: string, origin: string, cap: number): Promise<{ inUse: boolean; count: number }> {
  // The index's expression, with the pattern as a literal (a parameter would not match it).
  const originOf = (g: string) => sql.raw(`substring((${g}.request ->> 'webhook_url') from '${TASK_URL_ORIGIN_PATTERN}')`);
  const open = (g: string) =>
    sql`${sql.raw(g)}.tenant_id = ${tenantId} AND ${sql.raw(g)}.terminal_at IS NULL AND (${sql.raw(g)}.request ->> 'webhook_url') IS NOT NULL`;
  const prefix = `task-url:${tenantId}:`;
  const { rows } = await db.execute(sql`
    WITH RECURSIVE o AS (
      (SELECT ${originOf('g')} AS origin FROM generation_task g WHERE ${open('g')} ORDER BY 1 LIMIT 1)
      UNION ALL
      SELECT (SELECT ${originOf('g')} FROM generation_task g WHERE ${open('g')} AND ${originOf('g')} > o.origin ORDER BY 1 LIMIT 1)
      FROM o WHERE o.origin IS NOT NULL
    ), k AS (
      (SELECT target_key FROM webhook_delivery WHERE tenant_id = ${tenantId} AND state = 'pending' AND target_key > ${prefix} ORDER BY target_key LIMIT 1)
      UNION ALL
      SELECT (SELECT d.target_key FROM webhook_delivery d WHERE d.tenant_id = ${tenantId} AND d.state = 'pending' AND d.target_key > k.target_key
              ORDER BY d.target_key LIMIT 1)
      FROM k WHERE starts_with(k.target_key, ${prefix})
    ), origins AS (
      (SELECT origin FROM o WHERE origin IS NOT NULL LIMIT ${cap + 1})
      UNION
      (SELECT substr(target_key, ${prefix.length + 1}) FROM k WHERE starts_with(target_key, ${prefix}) LIMIT ${cap + 1})
    )
    SELECT count(*)::int AS count, COALESCE(bool_or(origin = ${origin}), false)
      OR EXISTS (SELECT 1 FROM generation_task g WHERE ${open('g')} AND ${originOf('g')} = ${origin})
      OR EXISTS (SELECT 1 FROM webhook_delivery WHERE tenant_id = ${tenantId} AND state = 'pending' AND target_key = ${prefix + origin}) AS in_use
    FROM origins`);
  const r = rows[0] as { count: number; in_use: boolean };
  return { inUse: r.in_use, count: r.count };
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

/**
 * A tenant's own event, which has no task (tenant.budget_threshold, db/budgets.ts): the event and
 * one delivery to each enabled endpoint subscribed to its type, in the caller's transaction, as
 * the transition trigger writes a task's (migration 0014).
 */
export async function recordTenantEvent(
  tx: DbOrTx,
  e: { eventId: string; tenantId: string; type: Extract<WebhookEventType, `tenant.${string}`>; data: Record<string, unknown> },
): Promise<void> {
  await tx
    .insert(webhookEvent)
    .values({ event_id: e.eventId, tenant_id: e.tenantId, task_id: null, event_type: e.type, status: null, status_version: null, data: e.data });
  await tx.execute(sql`
    INSERT INTO webhook_delivery (delivery_id, event_id, tenant_id, endpoint_id, url, target_key, next_attempt_at)
    SELECT gen_random_uuid(), ${e.eventId}::uuid, ${e.tenantId}::uuid, en.endpoint_id, NULL, 'endpoint:' || en.endpoint_id, now()
    FROM webhook_endpoint en
    WHERE en.tenant_id = ${e.tenantId}::uuid AND en.enabled AND en.deleted_at IS NULL AND (en.events IS NULL OR ${e.type} = ANY (en.events))`);
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

/** What one relay pass may claim (docs/webhooks.md "Retries", docs/decisions/0019). */
export interface ClaimLimits {
  /** Claimed in all: the relay's free slots and rate tokens. */
  readonly limit: number;
  /** In flight to one target across every relay (WEBHOOK_ENDPOINT_CONCURRENCY). */
  readonly perTarget: number;
  /** In flight for one tenant across every relay (WEBHOOK_TENANT_CONCURRENCY). */
  readonly perTenant: number;
  /** Claimed for one tenant in one pass (WEBHOOK_RELAY_CLAIM_PER_TENANT). */
  readonly perTenantPass: number;
  readonly leaseMs: number;
  /** Where the previous pass's rotation stopped: the tenants after it go first. Null: from the first. */
  readonly afterTenant: string | null;
}

export interface ClaimPass {
  readonly claimed: ClaimedDelivery[];
  /** The last tenant this pass looked at: the next pass starts after it. */
  readonly lastTenant: string | null;
  /** Due deliveries with room were left for want of this pass's budget: claim again soon. */
  readonly more: boolean;
}

/** Tenants a pass looks at in one round of statements, and in all. */
const TENANT_BATCH = 50;
const MAX_TENANTS_PER_PASS = 500;
/**
 * A tenant's targets a pass looks at: its endpoints (WEBHOOK_MAX_ENDPOINTS_PER_TENANT) and its
 * tasks' URL origins (WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT) are capped far below this.
 */
const MAX_TARGETS_PER_TENANT = 1_000;

/**
 * The next tenants with pending deliveries after `after` (all of them from the first when null),
 * in tenant id order, each with whether this transaction now holds its claim lock. A skip scan
 * of idx_webhook_delivery_tenant_target_due: one index probe per tenant, whatever its backlog.
 */
async function nextTenants(tx: Tx, after: string | null, n: number): Promise<{ tenant_id: string; locked: boolean }[]> {
  const from = after === null ? sql`TRUE` : sql`tenant_id > ${after}::uuid`;
  const { rows } = await tx.execute(sql`
    WITH RECURSIVE t AS (
      (SELECT tenant_id FROM webhook_delivery WHERE state = 'pending' AND ${from} ORDER BY tenant_id LIMIT 1)
      UNION ALL
      SELECT (SELECT d.tenant_id FROM webhook_delivery d WHERE d.state = 'pending' AND d.tenant_id > t.tenant_id ORDER BY d.tenant_id LIMIT 1)
      FROM t WHERE t.tenant_id IS NOT NULL)
    SELECT tenant_id, pg_try_advisory_xact_lock(hashtext('webhook-tenant:' || tenant_id::text)) AS locked
    FROM t WHERE tenant_id IS NOT NULL
    LIMIT ${n}`);
  return rows as { tenant_id: string; locked: boolean }[];
}

/** The leases the tenants hold now, per target (idx_webhook_delivery_tenant_leased: only the rows in flight are read). */
async function leasesOf(tx: Tx, tenants: readonly string[]): Promise<{ tenant_id: string; target_key: string; n: number }[]> {
  const { rows } = await tx.execute(sql`
    SELECT tenant_id, target_key, count(*)::int AS n FROM webhook_delivery
    WHERE tenant_id = ANY(${`{${tenants.join(',')}}`}::uuid[]) AND state = 'pending' AND lease_until > now()
    GROUP BY tenant_id, target_key`);
  return rows as { tenant_id: string; target_key: string; n: number }[];
}

/**
 * The tenants' targets that have a delivery due and not leased, that still take deliveries (an
 * enabled endpoint, or a task's URL) and are not backing off after a timeout (webhook_target),
 * each tenant's oldest due first. A skip scan over each tenant's targets, then one probe of each
 * target's oldest due delivery: past it only the target's own leases (at most its cap) are read.
 */
async function dueTargets(tx: Tx, tenants: readonly string[]): Promise<{ tenant_id: string; target_key: string }[]> {
  const { rows } = await tx.execute(sql`
    WITH RECURSIVE tg AS (
      SELECT u.tenant_id,
             (SELECT d.target_key FROM webhook_delivery d WHERE d.state = 'pending' AND d.tenant_id = u.tenant_id ORDER BY d.target_key LIMIT 1) AS target_key,
             1 AS n
      FROM unnest(${`{${tenants.join(',')}}`}::uuid[]) AS u(tenant_id)
      UNION ALL
      SELECT tg.tenant_id,
             (SELECT d.target_key FROM webhook_delivery d
              WHERE d.state = 'pending' AND d.tenant_id = tg.tenant_id AND d.target_key > tg.target_key ORDER BY d.target_key LIMIT 1),
             tg.n + 1
      FROM tg WHERE tg.target_key IS NOT NULL AND tg.n < ${MAX_TARGETS_PER_TENANT})
    SELECT tg.tenant_id, tg.target_key
    FROM tg CROSS JOIN LATERAL (
      SELECT d.next_attempt_at, d.endpoint_id FROM webhook_delivery d
      WHERE d.state = 'pending' AND d.tenant_id = tg.tenant_id AND d.target_key = tg.target_key
        AND d.next_attempt_at <= now() AND (d.lease_until IS NULL OR d.lease_until <= now())
      ORDER BY d.next_attempt_at
      LIMIT 1) due
    WHERE tg.target_key IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM webhook_target b WHERE b.target_key = tg.target_key AND b.blocked_until > now())
      AND (due.endpoint_id IS NULL OR EXISTS (
        SELECT 1 FROM webhook_endpoint e WHERE e.endpoint_id = due.endpoint_id AND e.enabled AND e.deleted_at IS NULL))
    ORDER BY tg.tenant_id, due.next_attempt_at`);
  return rows as { tenant_id: string; target_key: string }[];
}

/**
 * How many to claim per target, tenants in the given order: each tenant at most `perTenantPass`
 * and what its cap leaves, one target after another in turn (oldest due first) while a target has
 * room under its own cap. `more` when a tenant's due deliveries were left with room to take them.
 */
function allotClaims(
  tenants: readonly string[],
  due: readonly { tenant_id: string; target_key: string }[],
  leases: readonly { tenant_id: string; target_key: string; n: number }[],
  limits: Pick<ClaimLimits, 'perTarget' | 'perTenant' | 'perTenantPass'>,
  budget: number,
): { picks: { tenant_id: string; target_key: string; n: number }[]; used: number; lastTenant: string | null; more: boolean } {
  const held = new Map<string, number>();
  const tenantHeld = new Map<string, number>();
  for (const l of leases) {
    held.set(l.target_key, l.n);
    tenantHeld.set(l.tenant_id, (tenantHeld.get(l.tenant_id) ?? 0) + l.n);
  }
  const picks: { tenant_id: string; target_key: string; n: number }[] = [];
  let used = 0;
  let lastTenant: string | null = null;
  let more = false;
  for (const tenant of tenants) {
    if (used >= budget) {
      more ||= due.some((d) => d.tenant_id === tenant);
      break;
    }
    lastTenant = tenant;
    const targets = due.filter((d) => d.tenant_id === tenant).map((d) => ({ key: d.target_key, room: limits.perTarget - (held.get(d.target_key) ?? 0), n: 0 }));
    let room = Math.min(limits.perTenantPass, limits.perTenant - (tenantHeld.get(tenant) ?? 0), budget - used);
    for (let moved = true; room > 0 && moved;) {
      moved = false;
      for (const t of targets) {
        if (room <= 0) break;
        if (t.n >= t.room) continue;
        t.n += 1;
        room -= 1;
        used += 1;
        moved = true;
      }
    }
    const left = targets.some((t) => t.n < t.room);
    const tenantFull = limits.perTenant - (tenantHeld.get(tenant) ?? 0) <= targets.reduce((s, t) => s + t.n, 0);
    if (left && !tenantFull) more = true;
    for (const t of targets) if (t.n > 0) picks.push({ tenant_id: tenant, target_key: t.key, n: t.n });
  }
  return { picks, used, lastTenant, more };
}

/**
 * Claims due deliveries for one relay pass: tenants in turn from where the last pass stopped,
 * each at most `perTenantPass` deliveries and what `perTenant` (in flight across every relay)
 * leaves, each target at most what `perTarget` leaves, at most `limit` in all. A tenant is
 * claimed for under a transaction-scoped advisory lock, so two relays never both see room under
 * one tenant's or target's cap; the rows are taken FOR UPDATE SKIP LOCKED and leased until
 * `leaseMs` from now (the lease is the claim: a crashed relay's claim expires and the delivery
 * is tried again, with the same webhook-id). Every statement reads through an index a bounded
 * number of rows per tenant and target (their leases, the oldest due one), never the backlog.
 */
export async function claimDueDeliveries(db: Db, token: FenceToken, opts: ClaimLimits): Promise<ClaimPass> {
  if (opts.limit <= 0) return { claimed: [], lastTenant: opts.afterTenant, more: false };
  return db.transaction(async (tx) => {
    // Claims are writes: only the active region's relay takes any (docs/design.md §3).
    await holdFence(tx, token);
    const claimed: ClaimedDelivery[] = [];
    const seen = new Set<string>();
    let cursor = opts.afterTenant;
    let wrapped = opts.afterTenant === null;
    let lastTenant = opts.afterTenant;
    let more = false;
    while (claimed.length < opts.limit && seen.size < MAX_TENANTS_PER_PASS) {
      const batch = (await nextTenants(tx, cursor, Math.min(TENANT_BATCH, MAX_TENANTS_PER_PASS - seen.size))).filter((t) => !seen.has(t.tenant_id));
      if (batch.length === 0) {
        // Past the last tenant: on from the first, up to where this pass began.
        if (wrapped) break;
        wrapped = true;
        cursor = null;
        continue;
      }
      for (const t of batch) seen.add(t.tenant_id);
      cursor = batch.at(-1)!.tenant_id;
      // Another relay holds a tenant's lock: it is claiming for it now.
      const mine = batch.filter((t) => t.locked).map((t) => t.tenant_id);
      // Read after the locks are held: every lease another relay committed for these tenants is seen.
      const leases = mine.length > 0 ? await leasesOf(tx, mine) : [];
      const leased = new Map<string, number>();
      for (const l of leases) leased.set(l.tenant_id, (leased.get(l.tenant_id) ?? 0) + l.n);
      const withRoom = mine.filter((t) => (leased.get(t) ?? 0) < opts.perTenant);
      const due = withRoom.length > 0 ? await dueTargets(tx, withRoom) : [];
      const budget = opts.limit - claimed.length;
      const allotted = allotClaims(
        batch.map((t) => t.tenant_id),
        due,
        leases,
        opts,
        budget,
      );
      lastTenant = allotted.lastTenant ?? lastTenant;
      more ||= allotted.more;
      if (allotted.picks.length > 0) claimed.push(...(await leaseDeliveries(tx, allotted.picks, opts.leaseMs)));
      // The budget is spent: the next pass goes on after the last tenant served.
      if (allotted.used >= budget) {
        more = true;
        break;
      }
    }
    if (seen.size >= MAX_TENANTS_PER_PASS) more = true;
    return { claimed, lastTenant, more };
  });
}

/** Leases each target's `n` oldest due deliveries (FOR UPDATE SKIP LOCKED: another relay's rows are passed over). */
async function leaseDeliveries(tx: Tx, picks: readonly { tenant_id: string; target_key: string; n: number }[], leaseMs: number): Promise<ClaimedDelivery[]> {
  const { rows } = await tx.execute(sql`
    UPDATE webhook_delivery d SET lease_until = now() + make_interval(secs => ${leaseMs / 1000})
    FROM webhook_event ev
    WHERE ev.event_id = d.event_id AND d.delivery_id IN (
      SELECT pick.delivery_id
      FROM unnest(${`{${picks.map((p) => p.tenant_id).join(',')}}`}::uuid[], ${pgTextArray(picks.map((p) => p.target_key))}::text[],
                  ${`{${picks.map((p) => p.n).join(',')}}`}::int[]) AS a(tenant_id, target_key, n)
      CROSS JOIN LATERAL (
        SELECT x.delivery_id FROM webhook_delivery x
        WHERE x.state = 'pending' AND x.tenant_id = a.tenant_id AND x.target_key = a.target_key
          AND x.next_attempt_at <= now() AND (x.lease_until IS NULL OR x.lease_until <= now())
        ORDER BY x.next_attempt_at
        LIMIT a.n
        FOR UPDATE SKIP LOCKED) pick)
    RETURNING d.delivery_id, d.event_id, d.tenant_id, d.endpoint_id, d.target_key, d.attempt_count, d.schedule_step, d.lease_until::text AS lease,
      COALESCE((SELECT e.url FROM webhook_endpoint e WHERE e.endpoint_id = d.endpoint_id), d.url) AS url,
      ev.event_type, ev.data, ev.created_at AS event_created_at`);
  return (rows as unknown as ClaimedDelivery[]).map((r) => ({ ...r, event_created_at: new Date(r.event_created_at) }));
}

/** A Postgres text[] literal (each element quoted: target keys hold URLs). */
const pgTextArray = (values: readonly string[]): string => `{${values.map((v) => `"${v.replace(/(["\\])/g, '\\$1')}"`).join(',')}}`;

export interface AttemptRecord {
  readonly url: string;
  readonly startedAt: Date;
  readonly ok: boolean;
  readonly status: number | null;
  readonly latencyMs: number;
  readonly error: string | null;
  readonly excerpt: string | null;
  /** The attempt ran out of WEBHOOK_ATTEMPT_TIMEOUT_MS (the target backs off: webhook_target). */
  readonly timedOut: boolean;
}

/** How a target whose attempts time out backs off (WEBHOOK_TIMEOUT_BACKOFF_MS, WEBHOOK_TIMEOUT_BACKOFF_MAX_MS). */
export interface TimeoutBackoff {
  readonly baseMs: number;
  readonly maxMs: number;
}

export type AttemptNext = { kind: 'delivered' } | { kind: 'retry'; step: number; delayMs: number } | { kind: 'failed' };

/** Text a receiver chose (its answer's excerpt, an error quoting it), storable (db/storable.ts): one NUL would roll the whole record back and the attempt be sent again at every lease, for ever. */
const storable = (text: string | null): string | null => (text === null ? null : storableText(text));

/**
 * After an attempt to `claimed`'s target: one that timed out blocks the target for the backoff,
 * doubled for each round of timeouts in a row (timeouts of attempts that were in flight together
 * land inside the block they set and count once); one that was answered, whatever the status,
 * ends the backoff. Refused connections and the like change nothing: they cost no slot time.
 */
async function targetBackoff(tx: DbOrTx, claimed: ClaimedDelivery, attempt: AttemptRecord, backoff: TimeoutBackoff): Promise<void> {
  if (attempt.timedOut) {
    await tx.execute(sql`
      INSERT INTO webhook_target AS w (target_key, tenant_id, timeouts, blocked_until)
      VALUES (${claimed.target_key}, ${claimed.tenant_id}, 1, now() + make_interval(secs => ${Math.min(backoff.baseMs, backoff.maxMs) / 1000}))
      ON CONFLICT (target_key) DO UPDATE SET
        timeouts = CASE WHEN w.blocked_until > now() THEN w.timeouts ELSE w.timeouts + 1 END,
        blocked_until = CASE WHEN w.blocked_until > now() THEN w.blocked_until
          ELSE now() + make_interval(secs => LEAST(${backoff.maxMs}::float8, ${backoff.baseMs}::float8 * power(2, LEAST(w.timeouts, 30))) / 1000) END,
        updated_at = now()`);
  } else if (attempt.status !== null) {
    await tx.delete(webhookTarget).where(eq(webhookTarget.target_key, claimed.target_key));
  }
}

/**
 * Records one attempt and what follows it, in one transaction: the attempt row (numbered from
 * the delivery's count), the delivery's state, the target's backoff after a timeout
 * (webhook_target) and the endpoint's health. A delivery already
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
  health: { disableAfterMs: number; timeoutBackoff: TimeoutBackoff },
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
    await targetBackoff(tx, claimed, attempt, health.timeoutBackoff);
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
