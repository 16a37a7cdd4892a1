// Webhook endpoints against the fact source (docs/webhooks.md). Writes hold the region fence
// like every other write of the API, and read the mode under it (the admission's read is cached:
// once `mode set` has returned, no endpoint change commits in a mode that pauses changes); the
// tenant's endpoint writes are serialised by an advisory lock so the per-tenant endpoint cap
// holds under concurrent creates.
import { sql } from 'drizzle-orm';
import type { Db, Tx } from '../db/client';
import type { FenceToken } from '../db/fence';
import { inFenceForFacts } from '../db/modes';
import { addSigningSecret, dropSigningSecrets, rotateSigningSecret, type SecretBox } from '../db/webhook-secrets';
import {
  countLiveEndpoints,
  deleteEndpoint,
  getEndpoint,
  insertEndpoint,
  listDeliveries,
  lockEndpoint,
  redeliver,
  updateEndpoint,
  type WebhookEndpointRow,
} from '../db/webhooks';
import { webhookUrlProblem } from '../net/webhook-url';
import { problems } from './problem';
import type { WebhookEndpointCreateBody, WebhookEndpointUpdateBody } from './webhooks.schemas';

export interface WebhookRules {
  readonly allowPrivate: boolean;
  readonly maxEndpoints: number;
  readonly secretOverlapMs: number;
}

function checkUrl(url: string, rules: WebhookRules, field = 'url'): void {
  const problem = webhookUrlProblem(url, rules.allowPrivate);
  if (problem) throw problems.validation([{ field, message: problem }]);
}

/** A change of the tenant's webhook setup: under the fence and the mode as the transaction reads them (ModePausedError: a 503 naming the mode). */
const inChange = <T>(db: Db, token: FenceToken, work: (tx: Tx) => Promise<T>): Promise<T> => inFenceForFacts(db, token, 'cancel', work);

const lockTenantEndpoints = (tx: Tx, tenantId: string) => tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`webhook-endpoints:${tenantId}`}))`);

export async function createEndpoint(
  db: Db,
  token: FenceToken,
  box: SecretBox,
  rules: WebhookRules,
  tenantId: string,
  body: WebhookEndpointCreateBody,
): Promise<{ endpoint: WebhookEndpointRow; secret: string }> {
  checkUrl(body.url, rules);
  return inChange(db, token, async (tx) => {
    await lockTenantEndpoints(tx, tenantId);
    if ((await countLiveEndpoints(tx, tenantId)) >= rules.maxEndpoints) {
      throw problems.conflict(`a tenant has at most ${rules.maxEndpoints} webhook endpoints; delete one first`);
    }
    const endpoint = await insertEndpoint(tx, {
      tenantId,
      url: body.url,
      description: body.description ?? null,
      events: body.events ?? null,
    });
    const secret = await addSigningSecret(tx, box, endpoint.endpoint_id);
    return { endpoint, secret };
  });
}

export async function findEndpoint(db: Db, tenantId: string, endpointId: string): Promise<WebhookEndpointRow> {
  const endpoint = await getEndpoint(db, tenantId, endpointId);
  if (!endpoint) throw problems.notFound('webhook endpoint');
  return endpoint;
}

export async function changeEndpoint(
  db: Db,
  token: FenceToken,
  rules: WebhookRules,
  tenantId: string,
  endpointId: string,
  body: WebhookEndpointUpdateBody,
): Promise<WebhookEndpointRow> {
  if (body.url !== undefined) checkUrl(body.url, rules);
  const row = await inChange(db, token, (tx) =>
    updateEndpoint(tx, tenantId, endpointId, {
      ...(body.url !== undefined ? { url: body.url } : {}),
      ...(body.events !== undefined ? { events: body.events } : {}),
      ...(body.description !== undefined ? { description: body.description } : {}),
      ...(body.enabled !== undefined ? { enabled: body.enabled } : {}),
    }),
  );
  if (!row) throw problems.notFound('webhook endpoint');
  return row;
}

export async function removeEndpoint(db: Db, token: FenceToken, tenantId: string, endpointId: string): Promise<void> {
  const removed = await inChange(db, token, async (tx) => {
    if (!(await deleteEndpoint(tx, tenantId, endpointId))) return false;
    await dropSigningSecrets(tx, endpointId);
    return true;
  });
  if (!removed) throw problems.notFound('webhook endpoint');
}

export async function rotateEndpointSecret(
  db: Db,
  token: FenceToken,
  box: SecretBox,
  rules: WebhookRules,
  tenantId: string,
  endpointId: string,
): Promise<{ secret: string; previousExpiresAt: Date }> {
  return inChange(db, token, async (tx) => {
    if (!(await lockEndpoint(tx, tenantId, endpointId))) throw problems.notFound('webhook endpoint');
    return rotateSigningSecret(tx, box, endpointId, rules.secretOverlapMs);
  });
}

/** A deliveries cursor names the last delivery of the page before. */
const encodeCursor = (deliveryId: string) => Buffer.from(JSON.stringify({ after: deliveryId })).toString('base64url');
function decodeCursor(raw: string): string {
  try {
    const c = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')) as { after?: unknown };
    if (typeof c.after !== 'string' || !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(c.after)) throw new Error();
    return c.after;
  } catch {
    throw problems.validation([{ field: 'query.cursor', message: 'not a cursor returned by this API' }]);
  }
}

export async function endpointDeliveries(
  db: Db,
  tenantId: string,
  endpointId: string,
  q: { limit: number; cursor?: string | undefined; state?: 'pending' | 'succeeded' | 'failed' | 'cancelled' | undefined },
) {
  await findEndpoint(db, tenantId, endpointId);
  const afterId = q.cursor ? decodeCursor(q.cursor) : undefined;
  const page = await listDeliveries(db, endpointId, { limit: q.limit + 1, ...(q.state ? { state: q.state } : {}), ...(afterId ? { afterId } : {}) });
  const rows = page.slice(0, q.limit);
  const last = rows[rows.length - 1];
  const next = page.length > q.limit && last ? encodeCursor(last.delivery.delivery_id) : null;
  return { rows, next_cursor: next };
}

export async function redeliverToEndpoint(db: Db, token: FenceToken, tenantId: string, endpointId: string, deliveryId: string) {
  return inChange(db, token, async (tx) => {
    const endpoint = await lockEndpoint(tx, tenantId, endpointId);
    if (!endpoint) throw problems.notFound('webhook endpoint');
    if (!endpoint.enabled) throw problems.conflict('the endpoint is disabled; enable it (PATCH enabled: true) first');
    const row = await redeliver(tx, endpointId, deliveryId);
    if (!row) throw problems.notFound('webhook delivery');
    return row;
  });
}
