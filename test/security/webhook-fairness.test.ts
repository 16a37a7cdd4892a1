// One tenant cannot starve every tenant's webhooks (issue #49, docs/webhooks.md "Retries"):
// tenant A points four endpoints at receivers that accept the connection and never answer (a
// tarpit), with 40 events due before anyone else's, on a relay with four such endpoints' worth
// of slots. Tenant B's one delivery still goes out within a second, A never holds more than its
// tenant cap, and once A's attempts time out its targets back off instead of taking their slots
// again at once. A tenant's tasks' own webhook URLs are capped by origin, so per-task URLs cannot
// make targets without end.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { eq, sql } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { webhookAttempt, webhookDelivery } from '../../db/schema';
import { addSigningSecret, createSecretBox } from '../../db/webhook-secrets';
import { insertEndpoint } from '../../db/webhooks';
import { createGenerationFacade } from '../../temporal/facade';
import { startWebhookRelay, webhookRelaySettings, type WebhookRelay } from '../../workers/webhook-relay';
import { createTask } from '../support/deps';
import { createTestDatabase, createTestTenant, eventually, http, startApi, testConfig, testLogger, type RunningApi, type TestDatabase } from '../support/stack';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver';

const TENANT_CAP = 8;
const config = testConfig({
  // One relay whose every slot four hung endpoints (4 × WEBHOOK_ENDPOINT_CONCURRENCY) could hold.
  WEBHOOK_RELAY_MAX_IN_FLIGHT: '16',
  WEBHOOK_TENANT_CONCURRENCY: String(TENANT_CAP),
  WEBHOOK_ATTEMPT_TIMEOUT_MS: '2000',
  WEBHOOK_RELAY_INTERVAL_MS: '100',
  WEBHOOK_TIMEOUT_BACKOFF_MS: '30000',
  WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT: '2',
  REDIS_URL: '',
});
const box = createSecretBox(config.WEBHOOK_SECRET_KEY);
const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
const body = { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p' as const, priority: 0 };
let tdb: TestDatabase;
let relay: WebhookRelay | null = null;
const closers: (() => Promise<void>)[] = [];

before(async () => {
  tdb = await createTestDatabase(config);
});
after(async () => {
  await relay?.stop();
  for (const close of closers.splice(0).reverse()) await close();
  await tdb?.drop();
});

/** A receiver that accepts every connection and never answers a byte (loopback). */
async function tarpit(): Promise<{ url: string; open: () => number; maxOpen: () => number; accepted: () => number }> {
  const sockets = new Set<net.Socket>();
  let maxOpen = 0;
  let accepted = 0;
  const server = net.createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    maxOpen = Math.max(maxOpen, sockets.size);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    socket.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  closers.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/hook`,
    open: () => sockets.size,
    maxOpen: () => maxOpen,
    accepted: () => accepted,
  };
}

/** A tenant with one endpoint per URL (each with its signing secret). */
async function tenantWithEndpoints(urls: string[], secrets: string[] = []): Promise<{ tenantId: string; endpointIds: string[] }> {
  const db = tdb.database.db;
  const { tenantId } = await createTestTenant(tdb.database, config, '1000');
  const endpointIds: string[] = [];
  for (const url of urls) {
    const endpoint = await insertEndpoint(db, { tenantId, url, description: null, events: null });
    secrets.push(await addSigningSecret(db, box, endpoint.endpoint_id));
    endpointIds.push(endpoint.endpoint_id);
  }
  return { tenantId, endpointIds };
}

/** One task.cancelled event of the tenant's (a task created and cancelled); resolves once committed. */
async function event(tenantId: string, key: string): Promise<string> {
  const db = tdb.database.db;
  const { task } = await createTask(db, token, { tenantId, idempotencyKey: key, body });
  await cancelTask(db, token, tenantId, task.task_id);
  return task.task_id;
}

test("tenant A's four hung endpoints and 40 events due first do not delay tenant B's delivery by more than a second; A holds at most its tenant cap, and its timed-out targets back off", async (t) => {
  const pits = await Promise.all([tarpit(), tarpit(), tarpit(), tarpit()]);
  const a = await tenantWithEndpoints(pits.map((p) => p.url));
  for (let i = 0; i < 40; i += 1) await event(a.tenantId, `a-${i}`);

  const bSecrets: string[] = [];
  const receiver: WebhookReceiver = await startWebhookReceiver({ port: 0, secrets: () => bSecrets });
  closers.push(() => receiver.close());
  const b = await tenantWithEndpoints([`${receiver.baseUrl}/b`], bSecrets);

  relay = startWebhookRelay({
    db: tdb.database.db,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    secrets: box,
    publicBaseUrl: 'https://api.example.com',
    logger: testLogger,
    settings: webhookRelaySettings(config),
  });
  // A is attacking: its receivers hold the connections the relay opened to them.
  const openToA = () => pits.reduce((n, p) => n + p.open(), 0);
  await eventually(async () => (openToA() >= TENANT_CAP ? true : undefined), 10_000, 20);

  const started = Date.now();
  const bTask = await event(b.tenantId, 'b-0');
  const committed = Date.now();
  await eventually(async () => (receiver.received.some((r) => r.body?.data?.task_id === bTask) ? true : undefined), 30_000, 10);
  const delay = Date.now() - committed;
  t.diagnostic(`B's delivery ${delay} ms after its event committed, A's receivers holding ${openToA()} connections`);
  assert.ok(
    delay < 1_000,
    `B's delivery took ${delay} ms (its event took ${committed - started} ms to commit) while A's receivers held ${openToA()} connections`,
  );
  assert.equal(receiver.received[0]!.verifiedBy.length, 1, "B's delivery is signed with its secret");

  const maxToA = pits.reduce((n, p) => n + p.maxOpen(), 0);
  assert.ok(maxToA <= TENANT_CAP, `A held at most its ${TENANT_CAP} slots (its receivers saw ${maxToA} connections open at most)`);

  // A's first attempts time out (WEBHOOK_ATTEMPT_TIMEOUT_MS): each target backs off, so the
  // relay does not open new connections to it at once, though A has dozens of deliveries due.
  const db = tdb.database.db;
  const aDeliveries = db.select({ id: webhookDelivery.delivery_id }).from(webhookDelivery).where(eq(webhookDelivery.tenant_id, a.tenantId));
  await eventually(
    async () => {
      const timedOut = await db
        .select({ n: sql<number>`count(*)::int` })
        .from(webhookAttempt)
        .where(sql`${webhookAttempt.delivery_id} IN ${aDeliveries} AND ${webhookAttempt.error} = 'timed out'`);
      return (timedOut[0]?.n ?? 0) >= 1 && openToA() === 0 ? true : undefined;
    },
    15_000,
    20,
  );
  const { rows } = await db.execute(sql`SELECT target_key, blocked_until FROM webhook_target WHERE tenant_id = ${a.tenantId}`);
  const targets = (rows as { target_key: string; blocked_until: string }[]).map((r) => ({
    target_key: r.target_key,
    blocked_until: new Date(r.blocked_until),
  }));
  assert.ok(targets.length >= 1, 'a timed-out target is backing off');
  assert.ok(
    targets.every((t) => t.blocked_until.getTime() > Date.now() + 20_000),
    `blocked for the back-off (${targets.map((t) => t.blocked_until.toISOString()).join(', ')})`,
  );
  const acceptedThen = pits.reduce((n, p) => n + p.accepted(), 0);
  const backingOff = new Set(targets.map((t) => t.target_key));
  await sleep(1_500);
  const openedSince = pits.reduce((n, p) => n + p.accepted(), 0) - acceptedThen;
  const backedOffPits = pits.filter((_, i) => backingOff.has(`endpoint:${a.endpointIds[i]}`));
  assert.ok(
    backedOffPits.every((p) => p.open() === 0),
    'no new attempt to a target backing off',
  );
  assert.ok(openedSince <= (pits.length - backedOffPits.length) * 4, `its slots were not refilled at once (${openedSince} new connections)`);
  await relay.stop();
  relay = null;
});

test('a create naming a new webhook_url origin beyond WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT is refused with problem+json naming webhook_url; a known origin is not', async () => {
  const api: RunningApi = await startApi(config, tdb.database, {
    facade: createGenerationFacade(async () => {
      throw new Error('no Temporal here');
    }, 'unused'),
  });
  closers.push(() => api.close());
  const tenant = await createTestTenant(tdb.database, config, '1000');
  const endpoint = await http(api.baseUrl, 'POST', '/v1/webhook-endpoints', { apiKey: tenant.apiKey, body: { url: 'https://hooks.example.com/e' } });
  assert.equal(endpoint.status, 201, JSON.stringify(endpoint.body));
  const create = (key: string, webhookUrl: string) =>
    http(api.baseUrl, 'POST', '/v1/tasks', { apiKey: tenant.apiKey, headers: { 'idempotency-key': key }, body: { ...body, webhook_url: webhookUrl } });

  for (const [key, url] of [
    ['one', 'https://one.example.com/hook?task=1'],
    ['two', 'https://two.example.com/hook'],
    ['one-again', 'https://one.example.com/other-path'],
  ] as const) {
    const r = await create(key, url);
    assert.equal(r.status, 202, `${url}: ${JSON.stringify(r.body)}`);
  }
  const third = await create('three', 'https://three.example.com/hook');
  assert.equal(third.status, 400, JSON.stringify(third.body));
  assert.match(third.headers.get('content-type') ?? '', /application\/problem\+json/);
  assert.deepEqual(
    (third.body.errors as { field: string }[]).map((e) => e.field),
    ['webhook_url'],
  );
  assert.match(third.body.errors[0].message, /new origin \(https:\/\/three\.example\.com\)/);

  // An origin stops counting once its tasks have ended and their deliveries are no longer pending.
  const { rows } = await tdb.database.db.execute(
    sql`SELECT task_id FROM generation_task WHERE tenant_id = ${tenant.tenantId} AND request->>'webhook_url' LIKE 'https://two.%'`,
  );
  for (const r of rows as { task_id: string }[]) await cancelTask(tdb.database.db, token, tenant.tenantId, r.task_id);
  await tdb.database.db.execute(
    sql`UPDATE webhook_delivery SET state = 'succeeded' WHERE tenant_id = ${tenant.tenantId} AND target_key = ${`task-url:${tenant.tenantId}:https://two.example.com`}`,
  );
  const afterTwo = await create('three-later', 'https://three.example.com/hook');
  assert.equal(afterTwo.status, 202, JSON.stringify(afterTwo.body));
});
