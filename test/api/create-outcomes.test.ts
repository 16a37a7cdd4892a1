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
let api: InProcessApi;
let metrics: Metrics;
let apiKey: string;
const body = { model: 'minimax/video-01', prompt: 'outcomes', duration_seconds: 2, resolution: '480p', priority: 0 };
const mode = (m: SystemMode) => setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode: m, actor: 'operator:test', reason: 'test' });

before(async () => {
  tdb = await createTestDatabase(config);
  ({ apiKey } = await createTestTenant(tdb.database, config, '100'));
  metrics = createMetrics({ service: 'api-create-outcomes' });
  // The production admission cache (1 s): a mode set just now is not seen by the admission yet.
  api = await startApiInProcess(config, tdb.database, { facade: worldFacade(config, () => undefined), logger: testLogger, metrics, fenceCacheMs: 1_000 });
});
after(async () => {
  await api?.close();
  await tdb?.drop();
});

async function counts(): Promise<Record<string, number>> {
  const { values } = await metrics.tasksCreated.get();
  return Object.fromEntries(values.map((v) => [String(v.labels.outcome), v.value]));
}
const post = (key: string | undefined, b: unknown = body) =>
  http(api.baseUrl, 'POST', '/v1/tasks', { apiKey, body: b, headers: key === undefined ? {} : { 'Idempotency-Key': key } });

test('each create is counted once by its outcome: created, replayed, invalid, conflict and unavailable', async () => {
  const before = await counts();
  const delta = async () => {
    const now = await counts();
    return Object.fromEntries(Object.entries(now).flatMap(([k, v]) => (v - (before[k] ?? 0) > 0 ? [[k, v - (before[k] ?? 0)]] : [])));
  };

  assert.equal((await post('outcomes-1')).status, 202);
  assert.equal((await post('outcomes-1')).status, 202, 'the same key and body replay');
  assert.equal((await post('outcomes-1', { ...body, prompt: 'another' })).status, 422, 'the same key with another body');
  assert.equal((await post(undefined)).status, 400, 'no Idempotency-Key');
  assert.equal((await post('outcomes-2', { ...body, duration_seconds: 'long' })).status, 400);

  // The admission's read is cached for a second: this create is refused by its own transaction,
  // which reads the mode under the fence row (ModePausedError, answered 503).
  await mode('READ_ONLY');
  try {
    const inTx = await post('outcomes-3');
    assert.equal(inTx.status, 503);
    await new Promise((r) => setTimeout(r, 1_100));
    // Now the admission has read READ_ONLY and refuses before any transaction.
    const byAdmission = await post('outcomes-4');
    assert.equal(byAdmission.status, 503);
    assert.match(byAdmission.body.detail, /READ_ONLY/);
  } finally {
    await mode('NORMAL');
  }

  assert.deepEqual(await delta(), { created: 1, replayed: 1, conflict: 1, invalid: 2, unavailable: 2 });
});
