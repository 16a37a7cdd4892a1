// Spend budgets (issue #52) over the task API against real Postgres and a real Temporal server (no
// worker polls this file's task queue): concurrent creates never pass a limit together, a refusal
// is a 402 naming the limit and what remains, each threshold emits tenant.budget_threshold once
// per period, a key's budget is its own, and one tenant's budget never touches another's.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { apiDocument } from '../../api/openapi';
import { issueApiKey } from '../../db/tenants';
import { changeBudget } from '../../ops/budgets';
import { contractValidator, type OpenApiDoc } from '../support/contract';
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

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('budgets') });
const validator = contractValidator(apiDocument('http://localhost') as unknown as OpenApiDoc);
const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
/** gen4.5 at 720p for 5 s: 1.0 × 1.5 × 5 = 7.5 credits. */
const BODY = { model: 'gen4.5', prompt: 'a red kite over a hill', resolution: '720p', duration_seconds: 5 };
const PRICE = 7.5;

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

const budget = (tenantName: string, keyId: string | null, limit: string | null, thresholds = [50, 80, 100]) =>
  changeBudget(tdb.database.db, { tenant: tenantName, keyId, limit, period: 'month', thresholds, reason: 'test', actor: 'test', fence });

const tenantName = async (tenantId: string) =>
  ((await tdb.database.db.execute(sql`SELECT name FROM tenant WHERE tenant_id = ${tenantId}`)).rows[0] as { name: string }).name;

/** Reserved less released this month, from the ledger, for the tenant. */
async function ledgerSpend(tenantId: string): Promise<number> {
  const { rows } = await tdb.database.db.execute(sql`
    SELECT COALESCE(sum(CASE entry_type WHEN 'RESERVE' THEN amount WHEN 'RELEASE' THEN -amount ELSE 0 END), 0)::float8 AS spent
    FROM credit_ledger WHERE tenant_id = ${tenantId}`);
  return (rows[0] as { spent: number }).spent;
}

async function budgetEvents(tenantId: string) {
  const { rows } = await tdb.database.db.execute(sql`
    SELECT data FROM webhook_event WHERE tenant_id = ${tenantId} AND event_type = 'tenant.budget_threshold' ORDER BY created_at, (data->>'threshold_percent')::int`);
  return rows.map((r) => (r as { data: { scope: string; threshold_percent: number; limit: string; key_id: string | null } }).data);
}

const createMany = (apiKey: string, n: number, prefix: string) =>
  Promise.all(Array.from({ length: n }, (_, i) => call('POST', '/v1/tasks', apiKey, BODY, { 'idempotency-key': `${prefix}-${i}` })));

test('50 concurrent creates against a budget that fits 10: exactly 10 accepted, the others 402 naming the limit and what remains', async () => {
  const t = await createTestTenant(tdb.database, config, '100000');
  const name = await tenantName(t.tenantId);
  await budget(name, null, String(PRICE * 10));
  // An endpoint subscribed to the event: its deliveries are written with the event.
  const hook = await call('POST', '/v1/webhook-endpoints', t.apiKey, { url: 'https://hooks.example.com/budget', events: ['tenant.budget_threshold'] });
  assert.equal(hook.status, 201, JSON.stringify(hook.body));

  const answers = await createMany(t.apiKey, 50, 'burst');
  const statuses = answers.map((a) => a.status);
  assert.equal(statuses.filter((s) => s === 202).length, 10, statuses.join(','));
  assert.equal(statuses.filter((s) => s === 402).length, 40);
  for (const refused of answers.filter((a) => a.status === 402)) {
    assert.equal(refused.body.type, 'https://docs.vidorch.dev/problems/budget-exceeded');
    assert.deepEqual(refused.body.errors, [{ field: 'budget:tenant', message: 'limit 75.000000, remaining 0.000000' }]);
    assert.match(refused.body.detail, /monthly|month budget is 75\.000000 credits; 0\.000000 remain until .*; the task needs 7\.500000/);
  }
  assert.equal(await ledgerSpend(t.tenantId), PRICE * 10);

  // Each threshold once; each event delivered to the subscribed endpoint.
  assert.deepEqual(
    (await budgetEvents(t.tenantId)).map((e) => [e.scope, e.threshold_percent, e.limit]),
    [
      ['tenant', 50, '75.000000'],
      ['tenant', 80, '75.000000'],
      ['tenant', 100, '75.000000'],
    ],
  );
  const { rows } = await tdb.database.db.execute(sql`
    SELECT count(*)::int AS n FROM webhook_delivery d JOIN webhook_event e USING (event_id)
    WHERE e.tenant_id = ${t.tenantId} AND e.event_type = 'tenant.budget_threshold' AND d.endpoint_id = ${hook.body.id}`);
  assert.equal((rows[0] as { n: number }).n, 3);
  const metrics = await (await fetch(`${api.opsUrl}/metrics`)).text();
  assert.match(metrics, /vidorch_budget_thresholds_total\{(?=[^}]*scope="tenant")(?=[^}]*threshold="100")[^}]*\} 1\n/);

  // GET /v1/budget: the limit, the spend and nothing left.
  const seen = await call('GET', '/v1/budget', t.apiKey);
  assert.equal(seen.status, 200);
  assert.deepEqual(
    seen.body.budgets.map((b: { scope: string; limit: string; spent: string; remaining: string }) => [b.scope, b.limit, b.spent, b.remaining]),
    [['tenant', '75.000000', '75.000000', '0.000000']],
  );

  // A cancelled task's release gives its room back; crossing 100 % again in the period emits nothing more.
  const admitted = answers.find((a) => a.status === 202)!;
  assert.equal((await call('POST', `/v1/tasks/${admitted.body.task_id}/cancel`, t.apiKey)).status, 202);
  const more = await createMany(t.apiKey, 3, 'after-release');
  assert.deepEqual(more.map((a) => a.status).sort(), [202, 402, 402]);
  assert.equal((await budgetEvents(t.tenantId)).length, 3);
  assert.equal(await ledgerSpend(t.tenantId), PRICE * 10);
});

test("a key's budget is its own: its creates stop at its limit while the tenant's other key goes on; the tenant's budget applies to both", async () => {
  const t = await createTestTenant(tdb.database, config, '100000');
  const name = await tenantName(t.tenantId);
  const keyA = (await tdb.database.db.execute(sql`SELECT key_id FROM api_key WHERE tenant_id = ${t.tenantId}`)).rows[0] as { key_id: string };
  const b = await issueApiKey(tdb.database.db, t.tenantId);
  await budget(name, keyA.key_id, String(PRICE * 2), [100]);

  const a = await createMany(t.apiKey, 5, 'key-a');
  assert.equal(a.filter((r) => r.status === 202).length, 2);
  const refused = a.find((r) => r.status === 402)!;
  assert.deepEqual(refused.body.errors, [{ field: 'budget:key', message: 'limit 15.000000, remaining 0.000000' }]);
  const other = await createMany(b.key, 5, 'key-b');
  assert.ok(other.every((r) => r.status === 202));
  assert.deepEqual(
    (await budgetEvents(t.tenantId)).map((e) => [e.scope, e.key_id, e.threshold_percent]),
    [['key', keyA.key_id, 100]],
  );

  // Now a tenant budget with 1 task's room left (7 tasks so far): it refuses the other key too.
  await budget(name, null, String(PRICE * 8));
  assert.equal((await createMany(b.key, 1, 'key-b-2'))[0]!.status, 202);
  const over = (await createMany(b.key, 1, 'key-b-3'))[0]!;
  assert.equal(over.status, 402);
  assert.equal(over.body.errors[0].field, 'budget:tenant');
  const seen = await call('GET', '/v1/budget', b.key);
  assert.deepEqual(
    seen.body.budgets.map((x: { scope: string; spent: string }) => [x.scope, x.spent]),
    [
      ['tenant', '60.000000'],
      ['key', '15.000000'],
    ],
  );
  // Lifted: creates go on.
  await budget(name, null, null);
  assert.equal((await createMany(b.key, 1, 'key-b-4'))[0]!.status, 202);
});

test("one tenant's budget neither refuses nor counts another tenant's creates", async () => {
  const spender = await createTestTenant(tdb.database, config, '100000');
  const neighbour = await createTestTenant(tdb.database, config, '100000');
  await budget(await tenantName(spender.tenantId), null, String(PRICE));
  assert.equal((await createMany(spender.apiKey, 1, 'iso'))[0]!.status, 202);
  assert.equal((await createMany(spender.apiKey, 1, 'iso-2'))[0]!.status, 402);
  const theirs = await createMany(neighbour.apiKey, 4, 'iso');
  assert.ok(theirs.every((r) => r.status === 202));
  assert.deepEqual((await call('GET', '/v1/budget', neighbour.apiKey)).body, { budgets: [] });
  assert.deepEqual(await budgetEvents(neighbour.tenantId), []);
});
