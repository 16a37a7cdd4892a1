// The webhook relay under bad receivers (docs/webhooks.md "Delivery"): two relays side by side
// (two workers) never send one delivery twice at once and keep an endpoint's concurrency cap
// between them; a receiver that hangs past the attempt timeout costs only its own endpoint's
// slots, so another tenant's deliveries go out meanwhile; an endpoint that fails for longer than
// WEBHOOK_DISABLE_AFTER_MS is disabled, with a needs-attention record for its tenant. A 2xx is
// recorded whatever bytes its answer holds; an attempt whose record fails anyway is counted and
// logged, never a silent resend. A delivery whose endpoint's secrets open under no key the worker
// holds is not sent, counted and logged, and goes out once the key is back; one with some secrets
// that open is signed with those.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { and, eq, sql } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { createTask } from '../support/deps';
import { addSigningSecret, createSecretBox } from '../../db/webhook-secrets';
import { insertEndpoint } from '../../db/webhooks';
import { tenantAttention, webhookAttempt, webhookDelivery, webhookEndpoint, webhookEndpointSecret } from '../../db/schema';
import { startWebhookRelay, type WebhookRelay, type WebhookRelayOptions } from '../../workers/webhook-relay';
import { createLogger } from '../../observability/logger';
import { createTestDatabase, createTestTenant, eventually, testConfig, testLogger, type TestDatabase } from '../support/stack';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver';

const config = testConfig();
const box = createSecretBox(config.WEBHOOK_SECRET_KEY);
const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
const body = { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p' as const, priority: 0 };
const CAP = 2;
const EVENTS = 10;
let tdb: TestDatabase;
const receivers: WebhookReceiver[] = [];
const relays: WebhookRelay[] = [];

before(async () => {
  tdb = await createTestDatabase(config);
});
after(async () => {
  await Promise.all(relays.map((r) => r.stop()));
  await Promise.all(receivers.map((r) => r.close()));
  await tdb?.drop();
});

/** A tenant with one endpoint at `receiver` (`/<name><query>`), and `n` cancelled tasks (one task.cancelled event each). */
async function tenantWithEvents(name: string, receiver: { baseUrl: string }, secrets: string[], n: number, query = '') {
  const db = tdb.database.db;
  const { tenantId } = await createTestTenant(tdb.database, config, '100');
  const endpoint = await insertEndpoint(db, { tenantId, url: `${receiver.baseUrl}/${name}${query}`, description: null, events: null });
  secrets.push(await addSigningSecret(db, box, endpoint.endpoint_id));
  for (let i = 0; i < n; i += 1) {
    const { task } = await createTask(db, token, { tenantId, idempotencyKey: `${name}-${i}`, body });
    if (task) await cancelTask(db, token, tenantId, task.task_id);
  }
  return { tenantId, endpointId: endpoint.endpoint_id };
}

const relay = (extra: Partial<Pick<WebhookRelayOptions, 'logger' | 'onAttempt' | 'secrets'>> = {}) =>
  startWebhookRelay({
    db: tdb.database.db,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    secrets: box,
    publicBaseUrl: 'https://api.example.com',
    logger: testLogger,
    ...extra,
    settings: {
      schedule: [0, ...Array.from({ length: 30 }, () => 200)],
      attemptTimeoutMs: 4_000,
      responseMaxBytes: 1_024,
      perEndpoint: CAP,
      // The tenant caps and the timeout back-off have their own tests (test/security/webhook-fairness.test.ts).
      perTenant: 64,
      claimPerTenant: 64,
      timeoutBackoff: { baseMs: 1_000, maxMs: 1_000 },
      maxInFlight: 64,
      ratePerSecond: 1_000,
      intervalMs: 50,
      disableAfterMs: 1_000,
      allowLoopback: true,
    },
  });

test('two relays: a hung receiver holds only its own slots (at most the cap, across both), others are delivered once each meanwhile; a failing endpoint is disabled with a needs-attention record', async () => {
  const slowSecrets: string[] = [];
  const fastSecrets: string[] = [];
  const failingSecrets: string[] = [];
  const slow = await startWebhookReceiver({ port: 0, secrets: () => slowSecrets, delayMs: 6_000 });
  const fast = await startWebhookReceiver({ port: 0, secrets: () => fastSecrets });
  const failing = await startWebhookReceiver({ port: 0, secrets: () => failingSecrets, initial: 'failing' });
  receivers.push(slow, fast, failing);
  const a = await tenantWithEvents('slow', slow, slowSecrets, EVENTS);
  await tenantWithEvents('fast', fast, fastSecrets, EVENTS);
  const c = await tenantWithEvents('failing', failing, failingSecrets, 3);

  const started = Date.now();
  relays.push(relay(), relay());
  // The fast tenant is served while the slow receiver hangs every attempt past its timeout.
  await eventually(async () => (new Set(fast.received.map((r) => r.webhookId)).size === EVENTS ? true : undefined), 10_000, 50);
  const fastDone = Date.now() - started;
  assert.ok(fastDone < 4_000, `the fast endpoint's ${EVENTS} deliveries took ${fastDone} ms beside a hung one`);
  assert.equal(fast.received.length, EVENTS, 'each delivered once: two relays never both sent one');
  assert.ok(fast.received.every((r) => r.verifiedBy.length === 1));

  // The hung receiver: its attempts time out, never more than CAP at once across both relays.
  await eventually(
    async () => {
      const rows = await tdb.database.db
        .select()
        .from(webhookAttempt)
        .innerJoin(webhookDelivery, eq(webhookDelivery.delivery_id, webhookAttempt.delivery_id))
        .where(eq(webhookDelivery.endpoint_id, a.endpointId));
      return rows.length >= CAP ? rows : undefined;
    },
    15_000,
    100,
  ).then((rows) =>
    assert.ok(
      rows.every((r) => r.webhook_attempt.error === 'timed out'),
      'logged as timed out',
    ),
  );
  assert.ok(slow.maxConcurrent() <= CAP, `at most ${CAP} in flight to one endpoint (saw ${slow.maxConcurrent()})`);
  assert.ok(slow.maxConcurrent() >= 1);

  // The failing endpoint: disabled once it has failed for WEBHOOK_DISABLE_AFTER_MS, and told.
  const disabled = await eventually(
    async () => {
      const [ep] = await tdb.database.db.select().from(webhookEndpoint).where(eq(webhookEndpoint.endpoint_id, c.endpointId));
      return ep && !ep.enabled ? ep : undefined;
    },
    15_000,
    100,
  );
  assert.match(disabled.disabled_reason ?? '', /every delivery attempt failed since/);
  const attention = await tdb.database.db
    .select()
    .from(tenantAttention)
    .where(and(eq(tenantAttention.tenant_id, c.tenantId), eq(tenantAttention.subject_id, c.endpointId)));
  assert.equal(attention.length, 1);
  assert.equal(attention[0]!.kind, 'webhook_endpoint_disabled');
  const heard = failing.received.length;
  await new Promise((r) => setTimeout(r, 600));
  assert.equal(failing.received.length, heard, 'a disabled endpoint gets nothing more');
});

/** A receiver that answers every request 200 with `answer` as its body; `hits` counts requests. */
async function answering(answer: Buffer): Promise<{ baseUrl: string; hits: () => number; close: () => Promise<void> }> {
  let hits = 0;
  const server = http.createServer((req, res) => {
    req.resume().on('end', () => {
      hits += 1;
      res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(answer);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits: () => hits,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

const stopRelays = () => Promise.all(relays.splice(0).map((r) => r.stop()));

test('a 2xx whose answer holds a NUL, invalid UTF-8 and a surrogate pair cut at the excerpt is recorded delivered, and sent once', async () => {
  await stopRelays();
  // 'ok', NUL, a lone continuation byte, then an emoji straddling the 512th character.
  const answer = Buffer.concat([Buffer.from([0x6f, 0x6b, 0x00, 0x80]), Buffer.from('x'.repeat(507) + '\u{1F600}tail')]);
  const receiver = await answering(answer);
  try {
    const { endpointId } = await tenantWithEvents('binary-answer', receiver, [], 1);
    relays.push(relay());
    const db = tdb.database.db;
    const delivery = await eventually(
      async () => {
        const [d] = await db.select().from(webhookDelivery).where(eq(webhookDelivery.endpoint_id, endpointId));
        return d?.state === 'succeeded' ? d : undefined;
      },
      10_000,
      100,
    );
    assert.equal(delivery.attempt_count, 1);
    assert.equal(receiver.hits(), 1, 'a recorded success is not sent again');
    const [attempt] = await db.select().from(webhookAttempt).where(eq(webhookAttempt.delivery_id, delivery.delivery_id));
    assert.equal(attempt!.succeeded, true);
    const excerpt = attempt!.response_excerpt ?? '';
    assert.ok(excerpt.startsWith('ok\uFFFD\uFFFD'), JSON.stringify(excerpt.slice(0, 8)));
    assert.ok(!excerpt.includes('\u0000'));
    assert.doesNotMatch(excerpt, /\p{Cs}/u, 'no lone surrogate kept');
  } finally {
    await stopRelays();
    await receiver.close();
  }
});

test('an attempt sent whose record fails is counted unrecorded and logged, not resent in silence', async () => {
  await stopRelays();
  const db = tdb.database.db;
  // Any failure of the record, here a trigger refusing this receiver's attempt rows.
  await db.execute(sql`
    CREATE FUNCTION refuse_unrecordable() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN IF NEW.url LIKE '%/unrecordable%' THEN RAISE EXCEPTION 'attempt row refused by the test'; END IF; RETURN NEW; END $$`);
  await db.execute(sql`CREATE TRIGGER refuse_unrecordable BEFORE INSERT ON webhook_attempt FOR EACH ROW EXECUTE FUNCTION refuse_unrecordable()`);
  const receiver = await answering(Buffer.from('ok'));
  const outcomes: string[] = [];
  const lines: string[] = [];
  const logger = createLogger({ name: 'relay-test', level: 'warn', pretty: false, destination: { write: (l: string) => void lines.push(l) } });
  try {
    // A token in the tenant's URL: it stays out of the log.
    const { endpointId } = await tenantWithEvents('unrecordable', receiver, [], 1, '?token=tenant-hook-secret-42');
    relays.push(relay({ logger, onAttempt: (o) => outcomes.push(o) }));
    await eventually(async () => (outcomes.includes('unrecorded') ? true : undefined), 10_000, 50);
    const [d] = await db.select().from(webhookDelivery).where(eq(webhookDelivery.endpoint_id, endpointId));
    assert.equal(d!.state, 'pending', 'nothing was recorded: it is sent again when its lease expires');
    assert.equal(d!.attempt_count, 0);
    assert.ok(receiver.hits() >= 1);
    const logged = lines.filter((l) => l.includes('webhook attempt could not be recorded') && l.includes(d!.delivery_id));
    assert.equal(logged.length, 1, lines.join(''));
    // The failed statement's parameters (the attempt's URL among them) are not in the line.
    assert.ok(!lines.join('').includes('tenant-hook-secret-42'), logged[0]);
  } finally {
    await stopRelays();
    await receiver.close();
    await db.execute(sql`DROP TRIGGER refuse_unrecordable ON webhook_attempt`);
  }
});

test("no secret of the endpoint opens under the relay's keys: not sent, counted not_sent, kept pending; sent signed once the old key is listed", async () => {
  await stopRelays();
  const db = tdb.database.db;
  const foreignKey = 'a sealing key this worker was never given';
  const foreign = createSecretBox(foreignKey);
  const secrets: string[] = [];
  const receiver = await startWebhookReceiver({ port: 0, secrets: () => secrets });
  const outcomes: string[] = [];
  const lines: string[] = [];
  const logger = createLogger({ name: 'relay-test', level: 'warn', pretty: false, destination: { write: (l: string) => void lines.push(l) } });
  try {
    const { endpointId } = await tenantWithEvents('unopenable', receiver, secrets, 1);
    // The endpoint's one secret, sealed again under a key the relay does not hold.
    await db
      .update(webhookEndpointSecret)
      .set({ sealed: foreign.seal(endpointId, secrets[0]!) })
      .where(eq(webhookEndpointSecret.endpoint_id, endpointId));
    relays.push(relay({ logger, onAttempt: (o) => outcomes.push(o) }));
    await eventually(async () => (outcomes.includes('not_sent') ? true : undefined), 10_000, 50);
    const [d] = await db.select().from(webhookDelivery).where(eq(webhookDelivery.endpoint_id, endpointId));
    assert.equal(d!.state, 'pending', 'kept: it goes out once a secret opens');
    assert.equal(d!.attempt_count, 0, 'nothing was sent, so no attempt counts against its schedule');
    assert.equal(receiver.received.length, 0);
    assert.equal((await db.select().from(webhookAttempt).where(eq(webhookAttempt.delivery_id, d!.delivery_id))).length, 0);
    assert.ok(
      lines.some((l) => l.includes('webhook attempt not made') && l.includes(d!.delivery_id) && l.includes('opens under neither')),
      lines.join(''),
    );
    assert.ok(!lines.join('').includes(secrets[0]!), 'the secret is not logged');

    // The operator lists the old key: the next claim (the lease expired; here made so) sends it, signed.
    await stopRelays();
    await db
      .update(webhookDelivery)
      .set({ lease_until: sql`now()` })
      .where(eq(webhookDelivery.delivery_id, d!.delivery_id));
    relays.push(relay({ secrets: createSecretBox(config.WEBHOOK_SECRET_KEY, [foreignKey]) }));
    await eventually(
      async () => {
        const [row] = await db.select().from(webhookDelivery).where(eq(webhookDelivery.delivery_id, d!.delivery_id));
        return row!.state === 'succeeded' ? true : undefined;
      },
      10_000,
      50,
    );
    assert.equal(receiver.received.length, 1);
    assert.deepEqual(receiver.received[0]!.verifiedBy, [0], "signed with the endpoint's secret");
  } finally {
    await stopRelays();
    await receiver.close();
  }
});

test('an endpoint with one secret that opens and one that does not: signed with the one that opens, the other named in the log', async () => {
  await stopRelays();
  const db = tdb.database.db;
  const foreign = createSecretBox('another sealing key this worker was never given');
  const secrets: string[] = [];
  const receiver = await startWebhookReceiver({ port: 0, secrets: () => secrets });
  const outcomes: string[] = [];
  const lines: string[] = [];
  const logger = createLogger({ name: 'relay-test', level: 'warn', pretty: false, destination: { write: (l: string) => void lines.push(l) } });
  try {
    const { endpointId } = await tenantWithEvents('half-openable', receiver, secrets, 1);
    secrets.push(await addSigningSecret(db, foreign, endpointId));
    const [lost] = await db
      .select()
      .from(webhookEndpointSecret)
      .where(
        and(
          eq(webhookEndpointSecret.endpoint_id, endpointId),
          sql`${webhookEndpointSecret.created_at} = (SELECT max(created_at) FROM webhook_endpoint_secret WHERE endpoint_id = ${endpointId})`,
        ),
      );
    relays.push(relay({ logger, onAttempt: (o) => outcomes.push(o) }));
    await eventually(async () => (outcomes.includes('delivered') ? true : undefined), 10_000, 50);
    assert.ok(!outcomes.includes('not_sent'), outcomes.join(','));
    assert.equal(receiver.received.length, 1);
    assert.deepEqual(receiver.received[0]!.verifiedBy, [0], 'the secret that opens signs; the other is left out');
    assert.ok(
      lines.some((l) => l.includes('open under no configured key') && l.includes(lost!.secret_id)),
      lines.join(''),
    );
  } finally {
    await stopRelays();
    await receiver.close();
  }
});
