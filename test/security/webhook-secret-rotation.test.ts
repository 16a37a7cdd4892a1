// Webhook secret rotation is bounded (docs/webhooks.md "Rotating the secret", docs/security.md
// "Tenant webhook URLs"): an endpoint holds at most two secrets however often it rotates, so a
// delivery carries at most two signatures; and rotations spend the tenant's write budget, not
// its read one, so past it the API answers 429 while reads still pass.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { eq, sql } from 'drizzle-orm';
import { Webhook } from 'standardwebhooks';
import { createSecretBox } from '../../db/webhook-secrets';
import { webhookDelivery, webhookEndpointSecret, webhookEvent } from '../../db/schema';
import { createGenerationFacade } from '../../temporal/facade';
import { startWebhookRelay, webhookRelaySettings } from '../../workers/webhook-relay';
import { webhookIdOf } from '../../domain/webhook-id';
import { createTaskWithoutWorkflow } from '../support/deps';
import {
  createTestDatabase,
  createTestTenant,
  eventually,
  http as request,
  startApi,
  testConfig,
  testLogger,
  type RunningApi,
  type TestDatabase,
} from '../support/stack';

const WRITES_PER_SECOND = 10;
const config = testConfig({ TENANT_CREATE_RATE_PER_SECOND: String(WRITES_PER_SECOND), REDIS_URL: '' });
let tdb: TestDatabase;
let api: RunningApi;
let tenant: { tenantId: string; apiKey: string };
let receiver: http.Server;
let receiverUrl = '';
const received: http.IncomingHttpHeaders[] = [];
const bodies: string[] = [];

before(async () => {
  tdb = await createTestDatabase(config);
  api = await startApi(config, tdb.database, {
    facade: createGenerationFacade(async () => {
      throw new Error('no Temporal here');
    }, 'unused'),
  });
  tenant = await createTestTenant(tdb.database, config);
  receiver = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      received.push(req.headers);
      bodies.push(body);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', () => resolve()));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
});
after(async () => {
  await api?.close();
  receiver?.closeAllConnections();
  await new Promise((resolve) => receiver?.close(resolve));
  await tdb?.drop();
});

const call = (method: string, path: string, body?: unknown) =>
  request(api.baseUrl, method, path, { apiKey: tenant.apiKey, ...(body !== undefined ? { body } : {}) });

test('50 rotations leave at most two secrets, a delivery carries at most two signatures, and rotations past the write budget answer 429', async () => {
  const created = await call('POST', '/v1/webhook-endpoints', { url: receiverUrl });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const endpointId: string = created.body.id;
  const secrets: string[] = [created.body.secret];

  let refused = 0;
  let readsWhileRefused = 0;
  while (secrets.length <= 50) {
    const r = await call('POST', `/v1/webhook-endpoints/${endpointId}/rotate-secret`);
    if (r.status === 200) {
      secrets.push(r.body.secret);
      continue;
    }
    assert.equal(r.status, 429, JSON.stringify(r.body));
    assert.match(r.headers.get('content-type') ?? '', /^application\/problem\+json/);
    assert.equal(r.body.status, 429);
    const retryAfter = Number(r.headers.get('retry-after'));
    assert.ok(retryAfter >= 1, 'Retry-After in seconds');
    refused += 1;
    // The write budget is spent; the read budget is not.
    const read = await call('GET', `/v1/webhook-endpoints/${endpointId}`);
    assert.equal(read.status, 200);
    readsWhileRefused += 1;
    await sleep(retryAfter * 1000);
  }
  const rows = await tdb.database.db.select().from(webhookEndpointSecret).where(eq(webhookEndpointSecret.endpoint_id, endpointId));
  assert.ok(rows.length <= 2, `rows kept: ${rows.length}`);
  const live = rows.filter((r) => r.expires_at === null || r.expires_at.getTime() > Date.now());
  assert.equal(live.length, 2, 'the current secret and the previous one in its overlap');
  assert.ok(refused >= 1, `${WRITES_PER_SECOND}/s writes: 50 back-to-back rotations meet the limit`);
  assert.ok(readsWhileRefused >= 1);

  // One delivery through the relay, as the worker sends it.
  const { task } = await createTaskWithoutWorkflow(
    tdb.database.db,
    { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 },
    {
      tenantId: tenant.tenantId,
      idempotencyKey: 'rotation',
      body: { model: 'minimax/video-01', prompt: 'rotation', duration_seconds: 6, resolution: '720p', priority: 0 },
    },
  );
  const eventId = randomUUID();
  await tdb.database.db.insert(webhookEvent).values({
    event_id: eventId,
    tenant_id: tenant.tenantId,
    task_id: task.task_id,
    event_type: 'task.succeeded',
    status: 'SUCCEEDED',
    status_version: 99,
    data: { task_id: task.task_id, status: 'SUCCEEDED', status_version: 99 },
  });
  await tdb.database.db.insert(webhookDelivery).values({
    delivery_id: randomUUID(),
    event_id: eventId,
    tenant_id: tenant.tenantId,
    endpoint_id: endpointId,
    target_key: `endpoint:${endpointId}`,
  });
  const relay = startWebhookRelay({
    db: tdb.database.db,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    secrets: createSecretBox(config.WEBHOOK_SECRET_KEY),
    publicBaseUrl: config.PUBLIC_BASE_URL,
    logger: testLogger,
    settings: { ...webhookRelaySettings(config), intervalMs: 50 },
  });
  try {
    await eventually(async () => (received.length > 0 ? true : undefined), 15_000, 50);
  } finally {
    await relay.stop();
  }
  const h = received[0]!;
  assert.equal(h['webhook-id'], webhookIdOf(eventId));
  const entries = String(h['webhook-signature']).split(' ');
  assert.equal(entries.length, 2, 'two signatures: the current secret and the previous one');
  const headers = {
    'webhook-id': String(h['webhook-id']),
    'webhook-timestamp': String(h['webhook-timestamp']),
    'webhook-signature': String(h['webhook-signature']),
  };
  const verifies = (secret: string) => {
    try {
      new Webhook(secret).verify(bodies[0]!, headers);
      return true;
    } catch {
      return false;
    }
  };
  assert.deepEqual(
    secrets.map(verifies).flatMap((ok, i) => (ok ? [i] : [])),
    [49, 50],
    'the newest secret and the one before it verify; every older one was replaced',
  );
  const { rows: left } = await tdb.database.db.execute(sql`SELECT count(*)::int AS n FROM webhook_endpoint_secret WHERE endpoint_id = ${endpointId}`);
  assert.ok((left[0] as { n: number }).n <= 2);
});

test('endpoint changes and redelivers spend the same write budget', async () => {
  const created = await call('POST', '/v1/webhook-endpoints', { url: receiverUrl, description: 'writes' });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id: string = created.body.id;
  const statuses: number[] = [];
  for (let i = 0; i < WRITES_PER_SECOND * 2; i += 1) statuses.push((await call('PATCH', `/v1/webhook-endpoints/${id}`, { description: `w${i}` })).status);
  assert.ok(statuses.includes(429), `PATCHes past ${WRITES_PER_SECOND}/s are refused: ${statuses.join(',')}`);
  assert.equal((await call('GET', '/v1/webhook-endpoints')).status, 200);
  // A redeliver is refused before it is looked at (an unknown delivery would otherwise be a 404).
  const redelivers: number[] = [];
  for (let i = 0; i < WRITES_PER_SECOND * 2; i += 1)
    redelivers.push((await call('POST', `/v1/webhook-endpoints/${id}/deliveries/${randomUUID()}/redeliver`)).status);
  assert.ok(redelivers.includes(429), `redelivers past ${WRITES_PER_SECOND}/s are refused: ${redelivers.join(',')}`);
  assert.deepEqual([...new Set(redelivers)].sort(), redelivers.includes(404) ? [404, 429] : [429]);
});
