// The task API against real Postgres and a real Temporal server. No worker polls this file's
// task queue, so tasks stay QUEUED and the tests see exactly what the API wrote.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { and, eq, sql } from 'drizzle-orm';
import { creditAccount, creditLedger, generationTask, outboxEvent, taskAttempt, taskTransition, webhookEndpoint } from '../../db/schema';
import { insertEndpoint } from '../../db/webhooks';
import { createGenerationFacade } from '../../temporal/facade';
import { markOutboxPublished } from '../../db/outbox';
import {
  createTestDatabase,
  createTestTenant,
  http,
  startApi,
  temporalClient,
  testConfig,
  uniqueQueue,
  type RunningApi,
  type TestDatabase,
} from '../support/stack';

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('api') });
const body = { model: 'minimax/video-01', prompt: 'a red fox running through snow', duration_seconds: 6, resolution: '720p' };

let tdb: TestDatabase;
let api: RunningApi;
let closeClient: () => Promise<void>;
let alice: { tenantId: string; apiKey: string };
let bob: { tenantId: string; apiKey: string };

before(async () => {
  tdb = await createTestDatabase(config);
  const t = await temporalClient(config);
  closeClient = t.close;
  api = await startApi(config, tdb.database, { client: t.client });
  alice = await createTestTenant(tdb.database, config, '100');
  bob = await createTestTenant(tdb.database, config, '100');
});
after(async () => {
  await api?.close();
  await closeClient?.();
  await tdb?.drop();
});

const create = (key: string | null, payload: unknown = body, apiKey = alice.apiKey) =>
  http(api.baseUrl, 'POST', '/v1/tasks', { apiKey, body: payload, headers: key === null ? {} : { 'idempotency-key': key } });

const ledgerRows = async (taskId: string) => tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId));

describe('authentication and tenant scoping', () => {
  test('a request without an API key is refused with 401 problem+json', async () => {
    const res = await http(api.baseUrl, 'GET', '/v1/tasks');
    assert.equal(res.status, 401);
    assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/);
    assert.equal(res.headers.get('www-authenticate'), 'Bearer');
  });

  test('an unknown API key is refused with 401', async () => {
    const res = await http(api.baseUrl, 'GET', '/v1/tasks', { apiKey: 'vo_live_this-key-does-not-exist' });
    assert.equal(res.status, 401);
  });

  test("another tenant's task is a 404, for reads and for cancels", async () => {
    const created = await create('scope-1');
    assert.equal(created.status, 202);
    const id = created.body.task_id as string;
    assert.equal((await http(api.baseUrl, 'GET', `/v1/tasks/${id}`, { apiKey: bob.apiKey })).status, 404);
    assert.equal((await http(api.baseUrl, 'POST', `/v1/tasks/${id}/cancel`, { apiKey: bob.apiKey })).status, 404);
    const list = await http(api.baseUrl, 'GET', '/v1/tasks', { apiKey: bob.apiKey });
    assert.equal(list.status, 200);
    assert.ok(!list.body.tasks.some((t: { task_id: string }) => t.task_id === id));
    assert.equal((await http(api.baseUrl, 'GET', `/v1/tasks/${id}`, { apiKey: alice.apiKey })).status, 200);
  });
});

describe('create: one transaction of task, reservation, outbox', () => {
  test('a created task is stored QUEUED with a reserve ledger entry, an outbox row and its first transition', async () => {
    const res = await create('create-1');
    assert.equal(res.status, 202);
    assert.equal(res.body.status, 'QUEUED');
    const id = res.body.task_id as string;
    assert.equal(res.headers.get('location'), `/v1/tasks/${id}`);
    const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, id));
    assert.equal(task?.reserved_amount, '4.500000'); // 6 s × 0.5 × 1.5 at 720p
    const ledger = await ledgerRows(id);
    assert.deepEqual(
      ledger.map((e) => [e.entry_type, e.amount, e.business_key]),
      [['RESERVE', '4.500000', `task:${id}:reserve`]],
    );
    const outbox = await tdb.database.db.select().from(outboxEvent).where(eq(outboxEvent.aggregate_id, id));
    assert.equal(outbox.length, 1);
    // The fast path started the workflow and marked the row published.
    assert.ok(outbox[0]?.published_at, 'outbox row published by the fast path');
    const transitions = await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, id));
    assert.deepEqual(
      transitions.map((t) => [t.from_status, t.to_status, t.to_version]),
      [[null, 'QUEUED', 0]],
    );
  });

  test('the same Idempotency-Key and body returns the original task without a second reservation', async () => {
    const first = await create('idem-same');
    const again = await create('idem-same', { ...body, prompt: `  ${body.prompt}` }); // trimmed: same request
    assert.equal(again.status, 202);
    assert.equal(again.body.task_id, first.body.task_id);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal((await ledgerRows(first.body.task_id)).length, 1);
  });

  test('the same Idempotency-Key with another body is a 422 naming the header', async () => {
    await create('idem-other');
    const res = await create('idem-other', { ...body, duration_seconds: 5 });
    assert.equal(res.status, 422);
    assert.equal(res.body.errors[0].field, 'header:Idempotency-Key');
  });

  test('a retried create whose answer was lost is its replay though a check it passed would refuse it now (its webhook endpoint disabled meanwhile); another body is still a 422', async () => {
    const endpoint = await insertEndpoint(tdb.database.db, {
      tenantId: alice.tenantId,
      url: 'https://hooks.example.com/endpoint',
      description: null,
      events: null,
    });
    const withHook = { ...body, webhook_url: 'https://hooks.example.com/task' };
    const first = await create('idem-endpoint-gone', withHook);
    assert.equal(first.status, 202);
    // The answer was lost; meanwhile the tenant disabled the endpoint (leaving Alice as the other tests expect her: none enabled).
    await tdb.database.db.update(webhookEndpoint).set({ enabled: false }).where(eq(webhookEndpoint.endpoint_id, endpoint.endpoint_id));
    const again = await create('idem-endpoint-gone', withHook);
    assert.deepEqual([again.status, again.body.task_id, again.headers.get('idempotent-replayed')], [202, first.body.task_id, 'true']);
    const other = await create('idem-endpoint-gone', { ...withHook, duration_seconds: 5 });
    assert.deepEqual([other.status, other.body.errors[0].field], [422, 'header:Idempotency-Key']);
    assert.equal((await create('idem-endpoint-gone-new', withHook)).status, 400, 'a new key is still refused');
    assert.equal((await ledgerRows(first.body.task_id)).length, 1);
  });

  test('a missing Idempotency-Key is a 400 naming the header', async () => {
    const res = await create(null);
    assert.equal(res.status, 400);
    assert.equal(res.body.errors[0].field, 'header:Idempotency-Key');
  });

  test('20 concurrent requests with one Idempotency-Key create exactly one task and one reservation', async () => {
    const results = await Promise.all(Array.from({ length: 20 }, () => create('idem-concurrent')));
    assert.deepEqual(new Set(results.map((r) => r.status)), new Set([202]));
    const ids = new Set(results.map((r) => r.body.task_id));
    assert.equal(ids.size, 1);
    const tasks = await tdb.database.db
      .select()
      .from(generationTask)
      .where(and(eq(generationTask.tenant_id, alice.tenantId), eq(generationTask.idempotency_key, 'idem-concurrent')));
    assert.equal(tasks.length, 1);
    const reserves = await tdb.database.db
      .select()
      .from(creditLedger)
      .where(eq(creditLedger.business_key, `task:${tasks[0]!.task_id}:reserve`));
    assert.equal(reserves.length, 1);
  });

  test('not enough credits is a 402 and writes nothing', async () => {
    const poor = await createTestTenant(tdb.database, config, '1');
    const res = await create('poor-1', body, poor.apiKey);
    assert.equal(res.status, 402);
    assert.match(res.body.detail, /needs 4\.500000 credits; 1\.000000 available/);
    const [count] = await tdb.database.db
      .select({ n: sql<number>`count(*)::int` })
      .from(generationTask)
      .where(eq(generationTask.tenant_id, poor.tenantId));
    assert.equal(count?.n, 0);
    const [acct] = await tdb.database.db.select().from(creditAccount).where(eq(creditAccount.tenant_id, poor.tenantId));
    assert.equal(acct?.reserved, '0.000000');
  });
});

describe('validation: problem+json naming the field, never a 500', () => {
  const cases: [string, unknown, string][] = [
    ['duration out of range', { ...body, duration_seconds: 99 }, 'duration_seconds'],
    ['duration not an integer', { ...body, duration_seconds: 2.5 }, 'duration_seconds'],
    ['unknown resolution', { ...body, resolution: '8k' }, 'resolution'],
    ['empty prompt', { ...body, prompt: '   ' }, 'prompt'],
    ['unknown field', { ...body, colour: 'red' }, 'colour'],
    ['http image URL', { ...body, input_image_url: 'http://example.com/a.png' }, 'input_image_url'],
    ['unknown model', { ...body, model: 'nobody/nothing' }, 'model'],
    ['duration over the model maximum', { ...body, duration_seconds: 15 }, 'duration_seconds'],
    ['resolution the model lacks', { ...body, resolution: '1080p' }, 'resolution'],
    ['a JSON array body', [1, 2], '(body)'],
    ['a deadline under 10 s', { ...body, deadline_seconds: 1 }, 'deadline_seconds'],
    ['a pinned model with another provider', { ...body, provider: 'fal' }, 'provider'],
    ['a family preference outside the family', { ...body, model: 'kling-v2', resolution: '720p', provider: 'runway' }, 'provider'],
  ];
  for (const [name, payload, field] of cases) {
    test(`${name} → 400 naming ${field}`, async () => {
      const res = await create(`bad-${name.replace(/\W+/g, '-')}`, payload);
      assert.equal(res.status, 400, JSON.stringify(res.body));
      assert.match(res.headers.get('content-type') ?? '', /problem\+json/);
      assert.ok(
        res.body.errors.some((e: { field: string }) => e.field === field),
        JSON.stringify(res.body.errors),
      );
    });
  }

  test('a model family is accepted with a preferred provider of the family, priced by the family', async () => {
    const res = await create('family-pref', { ...body, model: 'kling-v2', resolution: '720p', duration_seconds: 5, provider: 'fal' });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, res.body.task_id));
    // 0.9 per second × 1.5 for 720p × 5 s; the task names the static first choice until routed.
    assert.equal(task?.reserved_amount, '6.750000');
    assert.equal(task?.provider, 'kling');
  });

  test('malformed JSON → 400, and no task is written', async () => {
    const res = await http(api.baseUrl, 'POST', '/v1/tasks', {
      apiKey: alice.apiKey,
      rawBody: '{"model": ',
      headers: { 'idempotency-key': 'malformed-json' },
    });
    assert.equal(res.status, 400);
    const rows = await tdb.database.db.select().from(generationTask).where(eq(generationTask.idempotency_key, 'malformed-json'));
    assert.equal(rows.length, 0);
  });

  test('a body over the size limit → 413', async () => {
    const res = await create('too-big', { ...body, prompt: 'x'.repeat(300 * 1024) });
    assert.equal(res.status, 413);
  });

  test('a malformed task id is a 404, not a 500', async () => {
    const res = await http(api.baseUrl, 'GET', '/v1/tasks/not-a-uuid', { apiKey: alice.apiKey });
    assert.equal(res.status, 404);
  });

  test('a forged list cursor is a 400 naming the cursor', async () => {
    const res = await http(api.baseUrl, 'GET', '/v1/tasks?cursor=bm9wZQ', { apiKey: alice.apiKey });
    assert.equal(res.status, 400);
    assert.equal(res.body.errors[0].field, 'cursor');
  });
});

describe('reads, list and cancel', () => {
  test('the task list pages with a cursor, newest first, filtered by status', async () => {
    const tenant = await createTestTenant(tdb.database, config, '100');
    for (let i = 0; i < 5; i += 1) {
      const r = await create(`list-${i}`, body, tenant.apiKey);
      assert.equal(r.status, 202);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { status: number; body: any } = await http(api.baseUrl, 'GET', `/v1/tasks?limit=2&status=QUEUED${cursor ? `&cursor=${cursor}` : ''}`, {
        apiKey: tenant.apiKey,
      });
      assert.equal(page.status, 200);
      seen.push(...page.body.tasks.map((t: { task_id: string }) => t.task_id));
      cursor = page.body.next_cursor;
    } while (cursor);
    assert.equal(seen.length, 5);
    assert.equal(new Set(seen).size, 5);
  });

  test('cancelling a QUEUED task cancels it at once and releases its whole reservation', async () => {
    const created = await create('cancel-queued');
    const id = created.body.task_id as string;
    const res = await http(api.baseUrl, 'POST', `/v1/tasks/${id}/cancel`, { apiKey: alice.apiKey });
    assert.equal(res.status, 202);
    assert.equal(res.body.status, 'CANCELLED');
    const ledger = await ledgerRows(id);
    const by = Object.fromEntries(ledger.map((e) => [e.entry_type, e.amount]));
    assert.deepEqual(by, { RESERVE: '4.500000', SETTLE: '0.000000', RELEASE: '4.500000' });
    const again = await http(api.baseUrl, 'POST', `/v1/tasks/${id}/cancel`, { apiKey: alice.apiKey });
    assert.equal(again.status, 409);
    assert.equal((await ledgerRows(id)).length, 3, 'a second cancel writes no ledger rows');
  });

  test('GET returns the facts: status, transitions and ledger entries', async () => {
    const created = await create('get-1');
    const res = await http(api.baseUrl, 'GET', `/v1/tasks/${created.body.task_id}`, { apiKey: alice.apiKey });
    assert.equal(res.status, 200);
    assert.equal(res.body.status, 'QUEUED');
    assert.equal(res.body.transitions[0].to, 'QUEUED');
    assert.equal(res.body.ledger[0].type, 'RESERVE');
    assert.equal(res.body.output, null);
  });

  test("an attempt's last error (why its outcome is unknown) is shown redacted: no callback token, bearer token or URL query leaves", async () => {
    const created = await create('get-unknown', { ...body, duration_seconds: 6, resolution: '720p' });
    const taskId = created.body.task_id as string;
    const attemptId = '0b7e4c1e-5a0c-4f4e-9d2a-3f1e2d3c4b5a';
    await tdb.database.db.insert(taskAttempt).values({
      attempt_id: attemptId,
      task_id: taskId,
      attempt_no: 1,
      provider: 'replicate',
      provider_model: 'minimax/video-01',
      submit_state: 'SUBMIT_UNKNOWN',
      unknown_since: new Date(),
      last_error:
        'replicate: HTTP 500 (provider may have created the prediction): echoed https://api.example.com/v1/callbacks/replicate/tok-secret-123?sig=abc and Bearer r8_abcdefghijklmnop',
    });
    const res = await http(api.baseUrl, 'GET', `/v1/tasks/${taskId}`, { apiKey: alice.apiKey });
    assert.equal(res.status, 200);
    const [attempt] = res.body.attempts as { submit_state: string; unknown_since: string | null; last_error: string }[];
    assert.ok(attempt, 'the attempt is shown');
    assert.equal(attempt.submit_state, 'SUBMIT_UNKNOWN');
    assert.ok(attempt.unknown_since);
    assert.match(attempt.last_error, /HTTP 500/);
    for (const secret of ['tok-secret-123', 'sig=abc', 'r8_abcdefghijklmnop'])
      assert.ok(!attempt.last_error.includes(secret), `${secret} left: ${attempt.last_error}`);
  });
});

describe('service endpoints', () => {
  test('healthz, readyz and openapi answer on the public port; metrics and the detailed readyz on the operator listener', async () => {
    assert.equal((await http(api.baseUrl, 'GET', '/healthz')).status, 200);
    const ready = await http(api.baseUrl, 'GET', '/readyz');
    assert.equal(ready.status, 200);
    assert.deepEqual(ready.body, { status: 'ready' });
    const detail = await http(api.opsUrl, 'GET', '/readyz');
    assert.equal(detail.body.mode, 'NORMAL');
    await api.refreshFacts();
    const metrics = await fetch(`${api.opsUrl}/metrics`).then((r) => r.text());
    assert.match(metrics, /vidorch_tasks_created_total/);
    assert.match(metrics, /vidorch_outbox_backlog/);
    const doc = await http(api.baseUrl, 'GET', '/openapi.json');
    assert.equal(doc.body.openapi, '3.1.0');
    // The body's schema, inline or as a reference to a named component.
    const body = doc.body.paths['/v1/tasks'].post.requestBody.content['application/json'].schema;
    const schema = body.$ref ? doc.body.components.schemas[String(body.$ref).split('/').pop()!] : body;
    assert.ok(schema.properties.duration_seconds);
  });
});

describe('API_FAST_PATH_MODE=background: the 202 does not wait for Temporal', () => {
  test('the answer comes once the task is committed; the start follows, and beyond the in-flight cap the relay is left to it', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const started: string[] = [];
    const inner = createGenerationFacade(async () => {
      throw new Error('not used');
    }, config.TEMPORAL_TASK_QUEUE);
    // A Temporal whose start answers only when the test says so.
    const slow = {
      ...inner,
      async startGeneration(task: { taskId: string }) {
        await gate;
        started.push(task.taskId);
        return { started: true } as never;
      },
    };
    const bg = await startApi(
      testConfig({
        TEMPORAL_TASK_QUEUE: config.TEMPORAL_TASK_QUEUE,
        API_FAST_PATH_MODE: 'background',
        API_FAST_PATH_MAX_IN_FLIGHT: '1',
        API_FAST_PATH_TIMEOUT_MS: '10000',
      }),
      tdb.database,
      { facade: slow },
    );
    try {
      const t0 = Date.now();
      const a = await http(bg.baseUrl, 'POST', '/v1/tasks', { apiKey: alice.apiKey, body, headers: { 'idempotency-key': 'bg-1' } });
      const b = await http(bg.baseUrl, 'POST', '/v1/tasks', { apiKey: alice.apiKey, body, headers: { 'idempotency-key': 'bg-2' } });
      assert.equal(a.status, 202);
      assert.equal(b.status, 202);
      assert.ok(Date.now() - t0 < 5_000, 'both answered while the start was still held');
      const unpublished = async (id: string) =>
        (await tdb.database.db.select().from(outboxEvent).where(eq(outboxEvent.aggregate_id, id)))[0]?.published_at === null;
      assert.ok(await unpublished(a.body.task_id), 'not started yet');
      release();
      const deadline = Date.now() + 5_000;
      while ((await unpublished(a.body.task_id)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.ok(!(await unpublished(a.body.task_id)), 'the background start marked the outbox row published');
      assert.deepEqual(started, [a.body.task_id], 'the second create was over the cap of 1: left to the relay');
      assert.ok(await unpublished(b.body.task_id), 'its outbox row waits for the relay');
    } finally {
      release();
      await bg.close();
    }
  });
});

describe('the fast path never waits on a relay that holds the outbox row', () => {
  test('markOutboxPublished skips a row locked by a relay (no wait, no pool connection held) and marks it once free', async () => {
    const created = await create('outbox-lock-1');
    assert.equal(created.status, 202);
    const [row] = await tdb.database.db.select().from(outboxEvent).where(eq(outboxEvent.aggregate_id, created.body.task_id));
    await tdb.database.db.update(outboxEvent).set({ published_at: null }).where(eq(outboxEvent.event_id, row!.event_id));

    // A relay's batch: the row claimed FOR UPDATE in an open transaction (it is starting the workflow).
    let releaseRelay!: () => void;
    const relayHolds = new Promise<void>((r) => (releaseRelay = r));
    let claimed!: () => void;
    const isClaimed = new Promise<void>((r) => (claimed = r));
    const relay = tdb.database.db.transaction(async (tx) => {
      await tx.execute(sql`SELECT event_id FROM outbox_event WHERE event_id = ${row!.event_id} FOR UPDATE SKIP LOCKED`);
      claimed();
      await relayHolds;
    });
    await isClaimed;
    try {
      const t0 = Date.now();
      const waited = await Promise.race([
        markOutboxPublished(tdb.database.db, row!.event_id),
        new Promise<'blocked'>((r) => setTimeout(() => r('blocked'), 3_000)),
      ]);
      assert.equal(waited, false, 'skipped at once: the relay marks its own row');
      assert.ok(Date.now() - t0 < 2_000);
    } finally {
      releaseRelay();
      await relay;
    }
    assert.equal(await markOutboxPublished(tdb.database.db, row!.event_id), true, 'free again: marked');
    assert.equal(await markOutboxPublished(tdb.database.db, row!.event_id), false, 'already marked');
  });
});
