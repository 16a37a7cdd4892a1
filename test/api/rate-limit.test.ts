// Tenant rate limits: shared through Redis; with Redis unreachable each API process keeps a
// conservative local limit instead of none. Over the limit: 429 with Retry-After, no task.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { generationTask } from '../../db/schema';
import { createTestDatabase, createTestTenant, http, startApi, testConfig, type RunningApi, type TestDatabase } from '../support/stack';
import { createGenerationFacade } from '../../temporal/facade';

const body = { model: 'minimax/video-01', prompt: 'rate', duration_seconds: 6, resolution: '720p' };
// Workflow starts are irrelevant here: a facade that never reaches Temporal keeps tasks QUEUED.
const noTemporal = createGenerationFacade(async () => {
  throw new Error('no Temporal in this test');
}, 'unused');

let tdb: TestDatabase;
const apis: RunningApi[] = [];
before(async () => {
  tdb = await createTestDatabase(testConfig());
});
after(async () => {
  for (const a of apis) await a.close();
  await tdb?.drop();
});

async function burst(api: RunningApi, apiKey: string, n: number, prefix: string) {
  return Promise.all(
    Array.from({ length: n }, (_, i) => http(api.baseUrl, 'POST', '/v1/tasks', { apiKey, body, headers: { 'idempotency-key': `${prefix}-${i}` } })),
  );
}

test('over the shared per-tenant rate (Redis) creates get 429 with Retry-After and write nothing; other tenants are unaffected', async () => {
  const config = testConfig({ TENANT_CREATE_RATE_PER_SECOND: '5', REDIS_URL: 'redis://127.0.0.1:6379' });
  const api = await startApi(config, tdb.database, { facade: noTemporal });
  apis.push(api);
  const noisy = await createTestTenant(tdb.database, config, '1000');
  const quiet = await createTestTenant(tdb.database, config, '1000');
  await new Promise((r) => setTimeout(r, 200)); // let the Redis connection come up
  const results = await burst(api, noisy.apiKey, 12, 'redis');
  const limited = results.filter((r) => r.status === 429);
  assert.ok(limited.length >= 6, `expected ≥ 6 of 12 limited, got ${limited.length}`);
  assert.ok(Number(limited[0]!.headers.get('retry-after')) >= 1);
  const stored = await tdb.database.db.select().from(generationTask).where(eq(generationTask.tenant_id, noisy.tenantId));
  assert.equal(stored.length, results.filter((r) => r.status === 202).length);
  const other = await burst(api, quiet.apiKey, 3, 'quiet');
  assert.deepEqual(
    other.map((r) => r.status),
    [202, 202, 202],
  );
});

test('with Redis unreachable the local insurance limit still applies (rate / instances)', async () => {
  const config = testConfig({ TENANT_CREATE_RATE_PER_SECOND: '8', API_INSTANCES: '2', REDIS_URL: 'redis://127.0.0.1:1' });
  const api = await startApi(config, tdb.database, { facade: noTemporal });
  apis.push(api);
  const tenant = await createTestTenant(tdb.database, config, '1000');
  const results = await burst(api, tenant.apiKey, 10, 'local');
  const ok = results.filter((r) => r.status === 202).length;
  assert.ok(ok <= 4 && ok >= 1, `local limit is 8/2 = 4 per second, got ${ok} accepted`);
  assert.ok(results.every((r) => r.status === 202 || r.status === 429));
});
