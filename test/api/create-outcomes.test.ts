// vidorch_tasks_created_total counts every create by how it ended, refusals included: an operator
// watching a degraded mode sees the creates it sheds (`unavailable`), whether the admission's cached
// mode refused them or the create's own transaction did (docs/modes.md "create").
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setMode } from '../../db/modes';
import type { SystemMode } from '../../domain/states';
import { startApiInProcess, worldFacade, type InProcessApi } from '../../harness/world';
import { createMetrics, type Metrics } from '../../observability/metrics';
import { createTestDatabase, createTestTenant, http, testConfig, testLogger, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
/** Its admission's mode read is kept for a minute: a mode set during the test is seen only by the create's own transaction. */
let cached: InProcessApi;
/** Its admission reads the mode on every request. */
let fresh: InProcessApi;
/** Each API registers its own metrics; the counts are their sum. */
const metrics: Metrics[] = [];
let apiKey: string;
const body = { model: 'minimax/video-01', prompt: 'outcomes', duration_seconds: 6, resolution: '720p', priority: 0 };
const mode = (m: SystemMode) => setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode: m, actor: 'operator:test', reason: 'test' });

before(async () => {
  tdb = await createTestDatabase(config);
  ({ apiKey } = await createTestTenant(tdb.database, config, '100'));
  const start = (service: string, fenceCacheMs: number) => {
    const m = createMetrics({ service });
    metrics.push(m);
    return startApiInProcess(config, tdb.database, { facade: worldFacade(config, () => undefined), logger: testLogger, metrics: m, fenceCacheMs });
  };
  cached = await start('api-create-outcomes-cached', 60_000);
  fresh = await start('api-create-outcomes-fresh', 0);
});
after(async () => {
  await cached?.close();
  await fresh?.close();
  await tdb?.drop();
});

async function counts(): Promise<Record<string, number>> {
  const sum: Record<string, number> = {};
  for (const m of metrics) for (const v of (await m.tasksCreated.get()).values) sum[String(v.labels.outcome)] = (sum[String(v.labels.outcome)] ?? 0) + v.value;
  return sum;
}
const post = (api: InProcessApi, key: string | undefined, b: unknown = body) =>
  http(api.baseUrl, 'POST', '/v1/tasks', { apiKey, body: b, headers: key === undefined ? {} : { 'Idempotency-Key': key } });

test('each create is counted once by its outcome: created, replayed, invalid, conflict and unavailable', async () => {
  const start = await counts();
  const delta = async () => {
    const now = await counts();
    return Object.fromEntries(Object.entries(now).flatMap(([k, v]) => (v - (start[k] ?? 0) > 0 ? [[k, v - (start[k] ?? 0)]] : [])));
  };

  // The first create also loads the cached API's mode read (NORMAL), kept for a minute.
  assert.equal((await post(cached, 'outcomes-1')).status, 202);
  assert.equal((await post(cached, 'outcomes-1')).status, 202, 'the same key and body replay');
  assert.equal((await post(cached, 'outcomes-1', { ...body, prompt: 'another' })).status, 422, 'the same key with another body');
  assert.equal((await post(cached, undefined)).status, 400, 'no Idempotency-Key');
  // Client text that looks like a database error is still the client's 400.
  const odd = await post(cached, 'outcomes-2', { ...body, 'Connection terminated': 1 });
  assert.equal(odd.status, 400);
  assert.match(JSON.stringify(odd.body), /Connection terminated/);

  await mode('READ_ONLY');
  try {
    // The cached admission still says NORMAL: the create's own transaction reads READ_ONLY under
    // the fence row and refuses (ModePausedError, answered 503).
    const inTx = await post(cached, 'outcomes-3');
    assert.equal(inTx.status, 503);
    assert.match(inTx.body.detail, /READ_ONLY/);
    // The other API's admission reads the mode now and refuses before any transaction.
    const byAdmission = await post(fresh, 'outcomes-4');
    assert.equal(byAdmission.status, 503);
    assert.match(byAdmission.body.detail, /READ_ONLY/);
  } finally {
    await mode('NORMAL');
  }

  assert.deepEqual(await delta(), { created: 1, replayed: 1, conflict: 1, invalid: 2, unavailable: 2 });
});
