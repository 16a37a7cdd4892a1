// Metrics without load (docs/performance.md): metric scrapes cannot starve the API's request pool, and the public port
// discloses neither metrics nor readiness details. The heavy version (300,000 closed tasks) is
// `npm run bench -- metrics-load`; this is its guard at a size a test run affords.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { buildApiContext } from '../../api/context';
import { serveApi, type ServedApi } from '../../api/listen';
import { metricsLoad } from '../../bench/metrics-load';
import { startFactSampler, type FactSampler } from '../../observability/facts';
import { createMetrics } from '../../observability/metrics';
import { createGenerationFacade } from '../../temporal/facade';
import { createTestDatabase, createTestTenant, http, testConfig, testLogger, type TestDatabase } from '../support/stack';

test('40 scrapers looping on /metrics while 30 tasks are created over 20,000 closed tasks: no create answers 503 and the API pool never waits', async () => {
  const r = await metricsLoad({ closedTasks: 20_000, scrapers: 40, creates: 30, config: testConfig() });
  assert.deepEqual(r.creates, { '202': 30 }, JSON.stringify(r));
  assert.equal(r.poolMaxWaiting, 0, `the request pool had waiters: ${JSON.stringify(r)}`);
  assert.ok(r.poolSamples > 100, 'the pool was watched throughout');
  assert.ok(r.scrapes >= 40 && r.scrapeErrors === 0, JSON.stringify(r));
  assert.equal(r.publicMetricsStatus, 404, '/metrics is not served on the public port');
});

describe('the operator listener', () => {
  let tdb: TestDatabase;
  let served: ServedApi;
  let facts: FactSampler;
  let closeCtx: () => Promise<void>;
  const token = 'ops-token-0123456789abcdef';
  before(async () => {
    const config = testConfig();
    tdb = await createTestDatabase(config);
    facts = startFactSampler({ databaseUrl: tdb.url, intervalMs: 60_000, logger: testLogger, applicationName: 'facts-test' });
    const facade = createGenerationFacade(async () => {
      throw new Error('no Temporal here');
    }, 'unused');
    const ctx = buildApiContext(config, { db: tdb.database.db, facade, logger: testLogger, metrics: createMetrics({ service: 'api', facts: facts.latest }) });
    closeCtx = () => ctx.close();
    served = await serveApi(ctx, { ops: { bearerToken: token } });
  });
  after(async () => {
    await served?.close();
    await closeCtx?.();
    await facts?.stop();
    await tdb?.drop();
  });

  test('with OPS_BEARER_TOKEN, /metrics and /readyz answer 401 without it (no metric in the body) and 200 with it', async () => {
    for (const path of ['/metrics', '/readyz']) {
      const anonymous = await fetch(`${served.opsUrl}${path}`);
      assert.equal(anonymous.status, 401);
      assert.doesNotMatch(await anonymous.text(), /vidorch_|region/);
      const wrong = await fetch(`${served.opsUrl}${path}`, { headers: { authorization: 'Bearer not-the-token-at-all' } });
      assert.equal(wrong.status, 401);
      const ok = await fetch(`${served.opsUrl}${path}`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(ok.status, 200);
    }
  });

  test('the public /readyz says ready or not and nothing else; region, epoch, mode and backlog are on the operator listener', async () => {
    const pub = await http(served.url, 'GET', '/readyz');
    assert.equal(pub.status, 200);
    assert.deepEqual(pub.body, { status: 'ready' });
    const detail = (await http(served.opsUrl, 'GET', '/readyz', { headers: { authorization: `Bearer ${token}` } })).body;
    assert.equal(detail.region, 'region-a');
    assert.equal(detail.mode, 'NORMAL');
    assert.equal(typeof detail.epoch, 'number');
    assert.deepEqual(detail.outbox, { backlog: 0, oldest_age_seconds: 0 });
    assert.equal((await fetch(`${served.url}/metrics`)).status, 404);
  });

  test('the ledger check finds a closed task out of balance among recently changed ones, and keeps counting it until it balances', async () => {
    const tenant = await createTestTenant(tdb.database, testConfig());
    const db = tdb.database.db;
    const task = '00000000-0000-4000-8000-00000000abcd';
    // The ledger is append-only (docs/decisions/0017-append-only-record.md): rows cannot be aged
    // by an UPDATE, so they are written 2 days old and a sampler of their own looks back 3 days.
    const entry = (kind: string, amount: string, age: string) => sql`
      INSERT INTO credit_ledger (entry_id, tenant_id, task_id, business_key, entry_type, amount, region, write_epoch, created_at)
      VALUES (gen_random_uuid(), ${tenant.tenantId}, ${task}, ${`task:${task}:${kind.toLowerCase()}`}, ${kind}, ${amount}, 'region-a', 1, now() - ${age}::interval)`;
    await db.execute(entry('RESERVE', '2', '2 days'));
    await db.execute(entry('SETTLE', '1', '2 days'));
    const ledger = startFactSampler({
      databaseUrl: tdb.url,
      intervalMs: 60_000,
      logger: testLogger,
      applicationName: 'facts-ledger-test',
      ledgerLookbackMs: 3 * 86_400_000,
    });
    try {
      assert.equal((await ledger.refresh()).ledgerImbalance, 1, 'reserve 2 ≠ settle 1 + release 0');
      // Older than the window of every later pass: still counted, because it was found before.
      assert.equal((await ledger.refresh()).ledgerImbalance, 1);
      await db.execute(entry('RELEASE', '1', '0 seconds'));
      assert.equal((await ledger.refresh()).ledgerImbalance, 0);
    } finally {
      await ledger.stop();
    }
  });
});
