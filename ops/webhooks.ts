// `ops webhook …` (docs/webhooks.md "Operators"): a tenant's endpoints with their health and
// backlog, the delivery log (a task's own webhook_url too, which the tenant API does not list),
// and a redeliver, audited in ops_audit in the same transaction. Secrets are never shown here; the
// reseal (after a WEBHOOK_SECRET_KEY rotation) opens and seals them again without printing them.
import { and, desc, eq, inArray, sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { inFence, acquireFence } from '../db/fence';
import { webhookAttempt, webhookDelivery, webhookEvent, type WebhookDeliveryState } from '../db/schema';
import { findTenantByName } from '../db/tenants';
import { listEndpoints, openAttention, redeliverAny } from '../db/webhooks';
import { resealSigningSecrets, type SecretBox } from '../db/webhook-secrets';
import { redactText } from '../observability/redact';
import { webhookIdOf } from '../domain/webhook-id';
import { recordAudit } from '../db/audit';

interface FenceScope {
  readonly scope: string;
  readonly region: string;
}

async function tenantIdOf(db: Db, name: string): Promise<string> {
  const t = await findTenantByName(db, name);
  if (!t) throw new Error(`no tenant named ${name}`);
  return t.tenantId;
}

export async function tenantWebhooks(db: Db, tenantName: string) {
  const tenantId = await tenantIdOf(db, tenantName);
  const endpoints = await listEndpoints(db, tenantId);
  const { rows } = await db.execute(sql`
    SELECT endpoint_id, state, count(*)::int AS n FROM webhook_delivery
    WHERE tenant_id = ${tenantId} GROUP BY endpoint_id, state`);
  const counts = rows as { endpoint_id: string | null; state: WebhookDeliveryState; n: number }[];
  const countOf = (id: string | null, state: WebhookDeliveryState) => counts.find((c) => c.endpoint_id === id && c.state === state)?.n ?? 0;
  return {
    tenant_id: tenantId,
    endpoints: endpoints.map((e) => ({
      id: e.endpoint_id,
      url: redactText(e.url),
      events: e.events ?? 'all',
      enabled: e.enabled,
      failing_since: e.failing_since,
      disabled_reason: e.disabled_reason,
      pending: countOf(e.endpoint_id, 'pending'),
      delivered: countOf(e.endpoint_id, 'succeeded'),
      failed: countOf(e.endpoint_id, 'failed'),
    })),
    task_urls: { pending: countOf(null, 'pending'), delivered: countOf(null, 'succeeded'), failed: countOf(null, 'failed') },
    attention: await openAttention(db, tenantId),
  };
}

export async function webhookDeliveries(db: Db, q: { tenantName: string; endpointId?: string; taskId?: string; state?: WebhookDeliveryState; limit: number }) {
  const tenantId = await tenantIdOf(db, q.tenantName);
  const rows = await db
    .select({ d: webhookDelivery, ev: webhookEvent })
    .from(webhookDelivery)
    .innerJoin(webhookEvent, eq(webhookEvent.event_id, webhookDelivery.event_id))
    .where(
      and(
        eq(webhookDelivery.tenant_id, tenantId),
        q.endpointId ? eq(webhookDelivery.endpoint_id, q.endpointId) : undefined,
        q.taskId ? eq(webhookEvent.task_id, q.taskId) : undefined,
        q.state ? eq(webhookDelivery.state, q.state) : undefined,
      ),
    )
    .orderBy(desc(webhookDelivery.created_at))
    .limit(q.limit);
  const attempts = rows.length
    ? await db
        .select()
        .from(webhookAttempt)
        .where(
          inArray(
            webhookAttempt.delivery_id,
            rows.map((r) => r.d.delivery_id),
          ),
        )
    : [];
  return rows.map(({ d, ev }) => {
    const mine = attempts.filter((a) => a.delivery_id === d.delivery_id).sort((a, b) => a.attempt_no - b.attempt_no);
    const last = mine[mine.length - 1];
    return {
      delivery_id: d.delivery_id,
      webhook_id: webhookIdOf(d.event_id),
      target: d.endpoint_id ? `endpoint ${d.endpoint_id}` : 'task webhook_url',
      task_id: ev.task_id,
      event_type: ev.event_type,
      status_version: ev.status_version,
      state: d.state,
      attempts: d.attempt_count,
      next_attempt_at: d.state === 'pending' ? d.next_attempt_at : null,
      last_status: last?.response_status ?? null,
      last_latency_ms: last?.latency_ms ?? null,
      last_error: last?.error ?? null,
    };
  });
}

/** Due now with its schedule started again, same event and webhook-id; audited in the same transaction. */
export async function redeliverWebhook(db: Db, args: { deliveryId: string; reason: string; actor: string; fence: FenceScope }) {
  const { token } = await acquireFence(db, args.fence.scope, args.fence.region);
  return inFence(db, token, async (tx) => {
    const row = await redeliverAny(tx, args.deliveryId);
    if (!row) throw new Error(`no delivery ${args.deliveryId} to redeliver (unknown, or cancelled with its endpoint)`);
    const auditId = await recordAudit(tx, {
      actor: args.actor,
      action: 'webhook.redeliver',
      targetType: 'webhook_delivery',
      targetId: row.delivery_id,
      reason: args.reason,
      detail: { tenant_id: row.tenant_id, endpoint_id: row.endpoint_id, event_id: row.event_id },
    });
    return { delivery_id: row.delivery_id, state: row.state, next_attempt_at: row.next_attempt_at, audit_id: auditId };
  });
}

/**
 * After a WEBHOOK_SECRET_KEY rotation: every stored signing secret not sealed under the current
 * key is sealed under it again, in one fenced transaction with its audit row. Unreadable ones
 * (sealed under a key that is no longer configured) are counted; the command then fails, so the
 * retired key is not dropped while a secret still needs it.
 */
export async function resealWebhookSecrets(db: Db, box: SecretBox, args: { reason: string; actor: string; fence: FenceScope }) {
  const { token } = await acquireFence(db, args.fence.scope, args.fence.region);
  return inFence(db, token, async (tx) => {
    const counts = await resealSigningSecrets(tx, box);
    const auditId = await recordAudit(tx, {
      actor: args.actor,
      action: 'webhook.reseal',
      targetType: 'webhook_endpoint_secret',
      targetId: '*',
      reason: args.reason,
      detail: { examined: counts.examined, resealed: counts.resealed, raced: counts.raced, unreadable: counts.unreadable.length },
    });
    return { ...counts, audit_id: auditId };
  });
}
