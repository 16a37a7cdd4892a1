// Tenant webhooks end to end (docs/webhooks.md): a real receiver (test/support/webhook-receiver.ts
// verifies every request with standardwebhooks), real tasks through the simulator, the relay as
// the worker runs it. The receiver is down, then answers 500, then 200: every terminal event
// arrives, verified, duplicates only under the same webhook-id, and the delivery log (the API's
// and the table's) says exactly what the receiver saw.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq, inArray } from 'drizzle-orm';
import { webhookAttempt, webhookDelivery, webhookEvent } from '../../db/schema';
import { WebhookDeliveryListResponse, WebhookEndpointCreatedResponse, WebhookEventPayload, WebhookSecretRotatedResponse } from '../../api/webhooks.schemas';
import { defaultRequest, startE2E, type E2E } from '../support/e2e';
import { eventually, freePort, http } from '../support/stack';
import { startWebhookReceiver, type ReceivedWebhook, type WebhookReceiver } from '../support/webhook-receiver';

let e: E2E;
let receiver: WebhookReceiver;
const secrets: string[] = [];

before(async () => {
  e = await startE2E('webhooks', {
    WEBHOOK_RETRY_SCHEDULE_MS: '0,250,500,750,1000,1000,1000,1000,1000,1000,1000,1000,1000,1000,1000,1000',
    WEBHOOK_RELAY_INTERVAL_MS: '100',
    WEBHOOK_ATTEMPT_TIMEOUT_MS: '2000',
    WEBHOOK_SECRET_OVERLAP_MS: '4000',
  });
  receiver = await startWebhookReceiver({ port: await freePort(), secrets: () => secrets, initial: 'down' });
});
after(async () => {
  await receiver?.close();
  await e?.close();
});

const api = (method: string, path: string, body?: unknown) =>
  http(e.api.baseUrl, method, path, { apiKey: e.tenant.apiKey, ...(body !== undefined ? { body } : {}) });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let endpointId = '';

test('an endpoint answers its whsec_ secret once; reads never show it', async () => {
  const res = await api('POST', '/v1/webhook-endpoints', { url: `${receiver.baseUrl}/hooks`, description: 'test receiver' });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  const created = WebhookEndpointCreatedResponse.parse(res.body);
  secrets.push(created.secret);
  endpointId = created.id;
  assert.equal(res.headers.get('location'), `/v1/webhook-endpoints/${endpointId}`);
  const one = await api('GET', `/v1/webhook-endpoints/${endpointId}`);
  const list = await api('GET', '/v1/webhook-endpoints');
  assert.equal(one.status, 200);
  assert.equal(one.body.secret, undefined);
  assert.deepEqual(
    list.body.endpoints.map((x: { id: string }) => x.id),
    [endpointId],
  );
  assert.ok(!JSON.stringify([one.body, list.body]).includes('whsec_'), 'no secret in reads');
});

test('receiver down, then 500, then 200: every terminal event is delivered, verified, and logged as the receiver saw it', async () => {
  const ids = [
    ...(await Promise.all([0, 1, 2, 3].map((i) => e.createTask(`wh-ok-${i}`)))),
    await e.createTask('wh-fail', { ...defaultRequest, prompt: 'a fox [sim:fail]' }),
  ];
  const cancelled = await e.createTask('wh-cancel', { ...defaultRequest, deadline_seconds: 3600 });
  await api('POST', `/v1/tasks/${cancelled}/cancel`, {});
  ids.push(cancelled);
  // Down while tasks finish, then failing, then up.
  await eventually(
    async () => {
      const rows = await e.tdb.database.db.select().from(webhookEvent).where(inArray(webhookEvent.task_id, ids));
      return rows.length >= 3 ? true : undefined;
    },
    30_000,
    100,
  );
  await sleep(1_000);
  await receiver.setState('failing');
  await sleep(1_500);
  await receiver.setState('up');

  const db = e.tdb.database.db;
  const tasks = await Promise.all(
    ids.map((id) =>
      eventually(async () => {
        const t = await e.getTask(id);
        return ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(t.status) ? t : undefined;
      }, 60_000),
    ),
  );
  // One event per terminal task, and one more per SUCCEEDED task: its thumbnail.
  const expected = ids.length + tasks.filter((t) => t.status === 'SUCCEEDED').length;
  const deliveries = await eventually(
    async () => {
      const rows = await db
        .select({ d: webhookDelivery, ev: webhookEvent })
        .from(webhookDelivery)
        .innerJoin(webhookEvent, eq(webhookEvent.event_id, webhookDelivery.event_id))
        .where(inArray(webhookEvent.task_id, ids));
      return rows.length === expected && rows.every((r) => r.d.state === 'succeeded') ? rows : undefined;
    },
    60_000,
    200,
  );

  // Every terminal task had exactly one terminal event, of the right type, at its final version;
  // a SUCCEEDED one also its task.thumbnail_ready, at the same version.
  const typeOf: Record<string, string> = { SUCCEEDED: 'task.succeeded', FAILED: 'task.failed', CANCELLED: 'task.cancelled' };
  for (const t of tasks) {
    const mine = deliveries.filter((r) => r.ev.task_id === t.task_id).sort((a, b) => a.ev.created_at.getTime() - b.ev.created_at.getTime());
    assert.deepEqual(
      mine.map((r) => r.ev.event_type),
      t.status === 'SUCCEEDED' ? ['task.succeeded', 'task.thumbnail_ready'] : [typeOf[t.status]],
      `deliveries for ${t.task_id}`,
    );
    for (const r of mine) assert.equal(r.ev.status_version, t.status_version);
  }
  assert.ok(tasks.some((t) => t.status === 'FAILED') && tasks.some((t) => t.status === 'CANCELLED') && tasks.some((t) => t.status === 'SUCCEEDED'));

  // What the receiver saw: all verified, each event's id answered 200 at least once; repeats
  // carry the same id and the same event.
  assert.ok(receiver.received.length >= expected);
  for (const r of receiver.received) {
    assert.deepEqual(r.verifiedBy, [0], `verified with the endpoint's secret (${r.webhookId})`);
    assert.equal(r.path, '/hooks');
  }
  const byId = new Map<string, ReceivedWebhook[]>();
  for (const r of receiver.received) byId.set(r.webhookId, [...(byId.get(r.webhookId) ?? []), r]);
  assert.equal(byId.size, expected, 'one webhook-id per event');
  for (const [id, seen] of byId) {
    assert.ok(
      seen.some((s) => s.answered === 200),
      `${id} was answered 200`,
    );
    const events = new Set(seen.map((s) => JSON.stringify([s.body.type, s.body.data.task_id, s.body.data.status_version])));
    assert.equal(events.size, 1, `duplicates of ${id} are the same event`);
    const payload = WebhookEventPayload.parse(seen[0]!.body);
    assert.equal(payload.data.links.task, `${e.config.PUBLIC_BASE_URL}/v1/tasks/${payload.data.task_id}`);
  }
  assert.ok(
    receiver.received.some((r) => r.answered === 500),
    'the failing window was hit',
  );
  const succeeded = tasks.find((t) => t.status === 'SUCCEEDED');
  assert.ok(succeeded?.output, 'a task succeeded with an output');
  const okBody = receiver.received.find((r) => r.body.data.task_id === succeeded.task_id && r.body.type === 'task.succeeded')!;
  assert.equal(okBody.body.data.output.sha256, succeeded.output.sha256, 'the output summary');
  const thumbBody = receiver.received.find((r) => r.body.data.task_id === succeeded.task_id && r.body.type === 'task.thumbnail_ready')!;
  assert.equal(thumbBody.body.data.output.sha256, succeeded.output.sha256, 'the thumbnail event names its video too');
  assert.equal(thumbBody.body.data.thumbnail.content_type, 'image/jpeg');
  assert.equal(thumbBody.body.data.previous_status, null, 'not a status change');
  assert.ok(!/X-Amz|download_url|whsec_/i.test(okBody.rawBody), 'no presigned URL or secret in a payload');

  // The log: attempts that reached the receiver are exactly the requests it saw, with its answers.
  const attempts = await db
    .select()
    .from(webhookAttempt)
    .where(
      inArray(
        webhookAttempt.delivery_id,
        deliveries.map((r) => r.d.delivery_id),
      ),
    );
  const reached = attempts.filter((a) => a.response_status !== null);
  assert.equal(reached.length, receiver.received.length, 'one logged attempt with a status per request received');
  assert.deepEqual(reached.map((a) => a.response_status).sort(), receiver.received.map((r) => r.answered).sort());
  assert.ok(
    attempts.some((a) => a.response_status === null && /ECONNREFUSED/.test(a.error ?? '')),
    'attempts while down are logged with their error',
  );
  for (const r of deliveries) {
    assert.equal(attempts.filter((a) => a.delivery_id === r.d.delivery_id).length, r.d.attempt_count);
  }

  // The API's delivery log, page by page, is the same log.
  const pages: any[] = [];
  let cursor: string | null = null;
  do {
    const res = await api('GET', `/v1/webhook-endpoints/${endpointId}/deliveries?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const page = WebhookDeliveryListResponse.parse(res.body);
    pages.push(...page.deliveries);
    cursor = page.next_cursor;
  } while (cursor);
  assert.equal(pages.length, expected);
  assert.equal(new Set(pages.map((p) => p.id)).size, expected, 'no delivery repeated across pages');
  assert.equal(pages.flatMap((p) => p.attempts).length, attempts.length);
  for (const p of pages) assert.ok(byId.has(p.webhook_id), 'the webhook-id the receiver saw');
});

test('a redeliver sends the same event again under the same webhook-id', async () => {
  const list = await api('GET', `/v1/webhook-endpoints/${endpointId}/deliveries?limit=1`);
  const d = list.body.deliveries[0];
  const before = receiver.received.filter((r) => r.webhookId === d.webhook_id).length;
  const res = await api('POST', `/v1/webhook-endpoints/${endpointId}/deliveries/${d.id}/redeliver`, {});
  assert.equal(res.status, 202, JSON.stringify(res.body));
  await eventually(async () => (receiver.received.filter((r) => r.webhookId === d.webhook_id).length > before ? true : undefined), 10_000, 100);
  const again = await api('GET', `/v1/webhook-endpoints/${endpointId}/deliveries?limit=1`);
  assert.equal(again.body.deliveries[0].id, d.id);
  await eventually(
    async () => {
      const r = await api('GET', `/v1/webhook-endpoints/${endpointId}/deliveries?limit=1`);
      return r.body.deliveries[0].state === 'succeeded' && r.body.deliveries[0].attempt_count === d.attempt_count + 1 ? true : undefined;
    },
    10_000,
    100,
  );
});

test("a task's own webhook_url gets its events, signed with the tenant's endpoint secret", async () => {
  const id = await e.createTask('wh-task-url', { ...defaultRequest, webhook_url: `${receiver.baseUrl}/per-task?ref=1` });
  await e.waitForStatus(id, 'SUCCEEDED');
  const seen = await eventually(async () => receiver.received.find((r) => r.path === '/per-task?ref=1') ?? undefined, 20_000, 100);
  assert.equal(seen.body.data.task_id, id);
  assert.deepEqual(seen.verifiedBy, [0]);
  // And the endpoint got it too, under the same webhook-id.
  await eventually(async () => (receiver.received.some((r) => r.path === '/hooks' && r.webhookId === seen.webhookId) ? true : undefined), 20_000, 100);
});

test('rotate-secret: during the overlap both secrets sign; after it only the new one', async () => {
  const res = await api('POST', `/v1/webhook-endpoints/${endpointId}/rotate-secret`, {});
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const rotated = WebhookSecretRotatedResponse.parse(res.body);
  assert.notEqual(rotated.secret, secrets[0]);
  secrets.push(rotated.secret);
  const during = await e.createTask('wh-rotate-during');
  const d = await eventually(async () => receiver.received.find((r) => r.body?.data?.task_id === during) ?? undefined, 30_000, 100);
  assert.equal(d.signatures, 2, 'two signatures during the overlap');
  assert.deepEqual(d.verifiedBy, [0, 1], 'each secret alone verifies');

  await sleep(Math.max(0, Date.parse(rotated.previous_secret_expires_at) - Date.now()) + 200);
  const afterOverlap = await e.createTask('wh-rotate-after');
  const a = await eventually(async () => receiver.received.find((r) => r.body?.data?.task_id === afterOverlap) ?? undefined, 30_000, 100);
  assert.equal(a.signatures, 1);
  assert.deepEqual(a.verifiedBy, [1], 'only the new secret verifies');
});

test('a deleted endpoint is 404 and gets nothing more', async () => {
  const del = await api('DELETE', `/v1/webhook-endpoints/${endpointId}`);
  assert.equal(del.status, 204);
  assert.equal((await api('GET', `/v1/webhook-endpoints/${endpointId}`)).status, 404);
  const count = receiver.received.filter((r) => r.path === '/hooks').length;
  const id = await e.createTask('wh-after-delete');
  await e.waitForStatus(id, 'SUCCEEDED');
  await sleep(500);
  assert.equal(receiver.received.filter((r) => r.path === '/hooks').length, count);
});
