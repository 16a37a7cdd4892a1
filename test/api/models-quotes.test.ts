// GET /v1/models and POST /v1/quotes (issue #52) over the task API against real Postgres and a
// real Temporal server (no worker polls this file's task queue): the catalog as offered, with a
// route an operator closed shown closed; a quote is the create's reservation, is validated as the
// create is, writes nothing but itself, and caps the charge of the create that cites it.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import { apiDocument } from '../../api/openapi';
import { requestHash } from '../../api/tasks.service';
import { insertQuote } from '../../db/quotes';
import { lockProviderControl, setProviderControl } from '../../db/provider-control';
import { holdRoute, recordRevision, releaseRoute } from '../../db/catalog-routes';
import { creditLedger, generationTask } from '../../db/schema';
import { MODEL_CATALOG, priceFor, RESOLUTIONS } from '../../domain/catalog';
import { entryInputs } from '../../domain/model-offer';
import { contractValidator, type OpenApiDoc } from '../support/contract';
import {
  createTestDatabase,
  createTestTenant,
  eventually,
  http,
  startApi,
  temporalClient,
  testConfig,
  uniqueQueue,
  type RunningApi,
  type TestDatabase,
} from '../support/stack';

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('models-quotes') });
const IMAGE = 'https://images.example.com/first-frame.png';
const validator = contractValidator(apiDocument('http://localhost') as unknown as OpenApiDoc);

let tdb: TestDatabase;
let api: RunningApi;
let closeClient: () => Promise<void>;

before(async () => {
  tdb = await createTestDatabase(config);
  const t = await temporalClient(config);
  closeClient = t.close;
  api = await startApi(config, tdb.database, { client: t.client });
});
after(async () => {
  await api?.close();
  await closeClient?.();
  await tdb?.drop();
});

async function call(method: string, path: string, apiKey: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await http(api.baseUrl, method, path, { apiKey, ...(body !== undefined ? { body } : {}), headers });
  const errors = validator.check({ method, path }, { status: res.status, headers: res.headers, text: JSON.stringify(res.body) });
  assert.deepEqual(errors, [], `${method} ${path} ${res.status} answers as documented`);
  return res;
}

/** One accepted request of each catalog entry: its first resolution and duration, an image when required. */
const acceptedBodies = () =>
  MODEL_CATALOG.map((m) => {
    const inputs = entryInputs(m);
    return {
      model: m.model,
      prompt: 'a heron at dawn',
      resolution: inputs.resolutions.at(-1)!,
      duration_seconds: inputs.durationsSeconds[0]!,
      ...(inputs.imageInput === 'required' ? { input_image_url: IMAGE } : {}),
    };
  });

test('GET /v1/models lists every catalog model with its inputs and price per second, as documented', async () => {
  const t = await createTestTenant(tdb.database, config);
  const res = await call('GET', '/v1/models', t.apiKey);
  assert.equal(res.status, 200);
  assert.deepEqual(
    res.body.models.map((m: { model: string }) => m.model),
    MODEL_CATALOG.map((m) => m.model),
  );
  for (const entry of MODEL_CATALOG) {
    const m = res.body.models.find((x: { model: string }) => x.model === entry.model);
    for (const r of RESOLUTIONS) {
      assert.equal(m.price_per_second[r], entry.resolutions.includes(r) ? priceFor(entry, r, 1) : undefined, `${entry.model} ${r}`);
    }
    assert.equal(m.routes.length, entry.routes.length);
  }
  const veo = res.body.models.find((x: { model: string }) => x.model === 'veo3.1');
  assert.deepEqual(veo.inputs, { resolutions: ['720p', '1080p'], duration_seconds: [4, 6, 8], input_image: 'optional', prompt_max_chars: 1000 });
  const turbo = res.body.models.find((x: { model: string }) => x.model === 'gen4_turbo');
  assert.equal(turbo.inputs.input_image, 'required');
  const falKling = res.body.models.find((x: { model: string }) => x.model === 'fal-ai/kling-video/v2/master/text-to-video');
  assert.equal(falKling.inputs.input_image, 'none');
  assert.equal(res.body.accepting_tasks, true);
  assert.ok(res.body.models.every((m: { available: boolean }) => m.available));
});

test('a provider whose breaker an operator forced open shows its routes closed; a family stays available through its other routes', async () => {
  const t = await createTestTenant(tdb.database, config);
  await tdb.database.db.transaction(async (tx) => {
    await lockProviderControl(tx, 'kling');
    await setProviderControl(tx, 'kling', { force: 'open', max_in_flight: null, reason: 'test', actor: 'test' }, { queueLimit: false });
  });
  try {
    const body = await eventually(async () => {
      const res = await call('GET', '/v1/models', t.apiKey);
      const pinned = res.body.models.find((m: { model: string }) => m.model === 'kling-v2-master');
      return pinned.available ? undefined : res.body;
    }, 10_000);
    const pinned = body.models.find((m: { model: string }) => m.model === 'kling-v2-master');
    assert.equal(pinned.routes[0].open, false);
    assert.match(pinned.routes[0].closed_reason, /breaker is forced open/);
    assert.equal(pinned.estimated_wait_seconds, null);
    const family = body.models.find((m: { model: string }) => m.model === 'kling-v2');
    assert.equal(family.available, true);
    assert.deepEqual(
      family.routes.map((r: { provider: string; open: boolean }) => [r.provider, r.open]),
      [
        ['kling', false],
        ['fal', true],
        ['replicate', true],
      ],
    );
    // A quote of the family names an open route.
    const quote = await call('POST', '/v1/quotes', t.apiKey, { model: 'kling-v2', prompt: 'p', resolution: '720p', duration_seconds: 5 });
    assert.equal(quote.status, 200);
    assert.equal(quote.body.route.provider, 'fal');
  } finally {
    await tdb.database.db.transaction(async (tx) => {
      await lockProviderControl(tx, 'kling');
      await setProviderControl(tx, 'kling', { force: null, max_in_flight: null, reason: 'test over', actor: 'test' }, { queueLimit: false });
    });
  }
});

test('a route held after a breaking schema change (ops catalog sync) shows closed with why; its family stays available', async () => {
  const t = await createTestTenant(tdb.database, config);
  const family = MODEL_CATALOG.find((m) => m.model === 'kling-v2')!;
  const held = family.routes.find((r) => r.provider === 'fal')!;
  await tdb.database.db.transaction(async (tx) => {
    const revisionId = await recordRevision(tx, {
      provider: held.provider,
      model: held.model,
      providerVersion: null,
      digest: 'test',
      inputSchema: {},
      sourceUrl: 'http://127.0.0.1/openapi.json',
      changes: [{ path: 'input.style', kind: 'required-added', detail: 'test' }],
      breaking: true,
      actor: 'test',
    });
    await holdRoute(tx, { provider: held.provider, model: held.model, revisionId, reason: 'test', actor: 'test' });
  });
  try {
    const body = await eventually(async () => {
      const res = await call('GET', '/v1/models', t.apiKey);
      const entry = res.body.models.find((m: { model: string }) => m.model === 'kling-v2');
      const route = entry.routes.find((r: { provider: string }) => r.provider === 'fal');
      return route.open ? undefined : entry;
    }, 10_000);
    const route = body.routes.find((r: { provider: string }) => r.provider === 'fal');
    assert.match(route.closed_reason, /catalog sync/);
    assert.equal(body.available, true);
  } finally {
    await releaseRoute(tdb.database.db, held.provider, held.model);
  }
});

async function facts(tenantId: string) {
  const { rows } = await tdb.database.db.execute(sql`
    SELECT (SELECT count(*)::int FROM generation_task WHERE tenant_id = ${tenantId}) AS tasks,
           (SELECT count(*)::int FROM credit_ledger WHERE tenant_id = ${tenantId}) AS ledger,
           (SELECT count(*)::int FROM task_transition WHERE tenant_id = ${tenantId}) AS transitions,
           (SELECT count(*)::int FROM outbox_event) AS outbox,
           (SELECT count(*)::int FROM task_quote WHERE tenant_id = ${tenantId}) AS quotes,
           (SELECT balance::text || '/' || reserved::text || '/' || version FROM credit_account WHERE tenant_id = ${tenantId}) AS account`);
  return rows[0] as { tasks: number; ledger: number; transitions: number; outbox: number; quotes: number; account: string };
}

test('for every catalog model a quote writes only itself, and a create citing it reserves exactly the quoted amount', async () => {
  const t = await createTestTenant(tdb.database, config, '100000');
  for (const body of acceptedBodies()) {
    const before = await facts(t.tenantId);
    const quote = await call('POST', '/v1/quotes', t.apiKey, body);
    assert.equal(quote.status, 200, JSON.stringify(quote.body));
    const afterQuote = await facts(t.tenantId);
    assert.deepEqual(afterQuote, { ...before, quotes: before.quotes + 1 }, `${body.model}: the quote wrote nothing but itself`);
    assert.ok(Date.parse(quote.body.expires_at) - Date.now() > (config.QUOTE_TTL_SECONDS - 60) * 1000);

    const created = await call('POST', '/v1/tasks', t.apiKey, { ...body, quote_id: quote.body.quote_id }, { 'idempotency-key': `q-${body.model}` });
    assert.equal(created.status, 202, JSON.stringify(created.body));
    const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, created.body.task_id));
    assert.equal(task!.reserved_amount, quote.body.amount, `${body.model}: reserved = quoted`);
    // And the same body without a quote reserves the same: the quote is the create's reservation.
    const plain = await call('POST', '/v1/tasks', t.apiKey, body, { 'idempotency-key': `plain-${body.model}` });
    const [plainTask] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, plain.body.task_id));
    assert.equal(plainTask!.reserved_amount, quote.body.amount);
  }
});

test('a quote is refused exactly as the create would be (same status, same field errors), and writes nothing', async () => {
  const t = await createTestTenant(tdb.database, config);
  const bad = [
    { model: 'veo3.1', prompt: 'p', resolution: '480p', duration_seconds: 4 },
    { model: 'veo3.1', prompt: 'p', resolution: '720p', duration_seconds: 5 },
    { model: 'gen4_turbo', prompt: 'p', resolution: '720p', duration_seconds: 5 },
    { model: 'no-such-model', prompt: 'p', resolution: '720p', duration_seconds: 5 },
    { model: 'veo3.1', prompt: '', resolution: '720p', duration_seconds: 4, surprise: 1 },
  ];
  const before = await facts(t.tenantId);
  for (const [i, body] of bad.entries()) {
    const quote = await call('POST', '/v1/quotes', t.apiKey, body);
    const create = await call('POST', '/v1/tasks', t.apiKey, body, { 'idempotency-key': `bad-${i}` });
    assert.equal(quote.status, 400);
    assert.deepEqual(quote.body.errors, create.body.errors, JSON.stringify(body));
  }
  assert.deepEqual(await facts(t.tenantId), before);
});

test("a create citing an unknown, expired, another tenant's or another request's quote is refused naming quote_id, reserving nothing", async () => {
  const t = await createTestTenant(tdb.database, config);
  const other = await createTestTenant(tdb.database, config);
  const body = { model: 'gen4.5', prompt: 'a lighthouse', resolution: '720p', duration_seconds: 5 };
  const theirs = await call('POST', '/v1/quotes', other.apiKey, body);
  const mine = await call('POST', '/v1/quotes', t.apiKey, body);
  await tdb.database.db.execute(sql`UPDATE task_quote SET expires_at = now() - interval '1 second' WHERE quote_id = ${mine.body.quote_id}`);
  const fresh = await call('POST', '/v1/quotes', t.apiKey, body);
  const cases: [string, object, RegExp][] = [
    ['unknown', { ...body, quote_id: '00000000-0000-4000-8000-000000000000' }, /no such quote/],
    ["another tenant's", { ...body, quote_id: theirs.body.quote_id }, /no such quote/],
    ['expired', { ...body, quote_id: mine.body.quote_id }, /expired/],
    ['another request', { ...body, duration_seconds: 6, quote_id: fresh.body.quote_id }, /another request/],
  ];
  const before = await facts(t.tenantId);
  for (const [what, cited, message] of cases) {
    const res = await call('POST', '/v1/tasks', t.apiKey, cited, { 'idempotency-key': `cite-${what.replace(/[^a-z]/g, '-')}` });
    assert.equal(res.status, 400, what);
    assert.equal(res.body.errors[0].field, 'quote_id', what);
    assert.match(res.body.errors[0].message, message, what);
  }
  assert.deepEqual(await facts(t.tenantId), before);
});

test('a create citing a quote reserves at most the quoted amount, though the price is higher now', async () => {
  const t = await createTestTenant(tdb.database, config);
  const body = { model: 'gen4.5', prompt: 'a lighthouse', resolution: '720p' as const, duration_seconds: 5, priority: 0 };
  // A quote given before the price rose: stored as POST /v1/quotes stores one, at a lower amount.
  const quote = await insertQuote(tdb.database.db, {
    tenantId: t.tenantId,
    requestHash: requestHash(body),
    model: body.model,
    amount: '2.500000',
    ttlSeconds: 60,
  });
  const res = await call('POST', '/v1/tasks', t.apiKey, { ...body, quote_id: quote.quote_id }, { 'idempotency-key': 'capped' });
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, res.body.task_id));
  assert.equal(task!.reserved_amount, '2.500000');
  const [reserve] = await tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, res.body.task_id));
  assert.equal(reserve!.amount, '2.500000');
  // The replay of that create answers the same task (its quote is not looked at again).
  await tdb.database.db.execute(sql`UPDATE task_quote SET expires_at = now() - interval '1 second' WHERE quote_id = ${quote.quote_id}`);
  const again = await call('POST', '/v1/tasks', t.apiKey, { ...body, quote_id: quote.quote_id }, { 'idempotency-key': 'capped' });
  assert.equal(again.status, 202);
  assert.equal(again.body.task_id, res.body.task_id);
});
