// Work before authentication is bounded (docs/security.md "API keys"): 10,000 requests with
// random bearers from one address cost Postgres no more than that address's share of
// AUTH_LOOKUPS_PER_SOURCE_PER_SECOND (every statement the API's pool runs is counted), the rest
// answer 429 without a query, another address is not limited by them, and a tenant's creates
// from the same address keep succeeding throughout.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import nodeHttp from 'node:http';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startApiInProcess, type InProcessApi } from '../../harness/world';
import { createMetrics } from '../../observability/metrics';
import { createGenerationFacade } from '../../temporal/facade';
import { createTestDatabase, createTestTenant, http, testConfig, testLogger, type TestDatabase } from '../support/stack';

const LOOKUPS_PER_SECOND = 20;
const config = testConfig({
  AUTH_LOOKUPS_PER_SOURCE_PER_SECOND: String(LOOKUPS_PER_SECOND),
  // The tenant's key is looked up again every second of the flood: a known key is not limited.
  AUTH_CACHE_TTL_MS: '1000',
  REDIS_URL: '',
});
let tdb: TestDatabase;
let api: InProcessApi;
let tenant: { tenantId: string; apiKey: string };
/** Connections (and so statements or transactions) the API's pool hands out. */
let checkouts = 0;

before(async () => {
  tdb = await createTestDatabase(config);
  // As the API process runs (api/server.ts): the admission's fence read cached for a second.
  api = await startApiInProcess(config, tdb.database, {
    facade: createGenerationFacade(async () => {
      throw new Error('no Temporal here');
    }, 'unused'),
    logger: testLogger,
    metrics: createMetrics({ service: 'api-test', pool: tdb.database.pool }),
  });
  tenant = await createTestTenant(tdb.database, config);
  tdb.database.pool.on('acquire', () => {
    checkouts += 1;
  });
});
after(async () => {
  await api?.close();
  await tdb?.drop();
});

const randomBearer = () => `vo_live_${randomBytes(24).toString('base64url')}`;
let seq = 0;
const createTask = () =>
  http(api.baseUrl, 'POST', '/v1/tasks', {
    apiKey: tenant.apiKey,
    headers: { 'idempotency-key': `preauth-${(seq += 1)}` },
    body: { model: 'minimax/video-01', prompt: `pre-auth ${seq}`, duration_seconds: 6, resolution: '720p' },
  });

test("10,000 requests with random bearers cost at most the pre-auth limit's share of Postgres statements while the tenant's creates succeed", async (t) => {
  // What one create costs the pool, measured warm.
  assert.equal((await createTask()).status, 202);
  const beforeCreates = checkouts;
  for (let i = 0; i < 3; i += 1) assert.equal((await createTask()).status, 202);
  const perCreate = Math.ceil((checkouts - beforeCreates) / 3);

  const statuses = new Map<number, number>();
  const sampled: Array<{ type: string | null; retryAfter: string | null; body: any }> = [];
  let flooding = true;
  const creates: number[] = [];
  const tenantLoop = (async () => {
    while (flooding) {
      creates.push((await createTask()).status);
      await sleep(200);
    }
  })();

  const started = Date.now();
  const from = checkouts;
  let sent = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (sent < 10_000) {
        sent += 1;
        const r = await fetch(`${api.baseUrl}/v1/tasks`, { headers: { authorization: `Bearer ${randomBearer()}` } });
        const body = await r.text();
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.status === 429 && sampled.length === 0)
          sampled.push({ type: r.headers.get('content-type'), retryAfter: r.headers.get('retry-after'), body: JSON.parse(body) });
      }
    }),
  );
  const seconds = (Date.now() - started) / 1000;
  const used = checkouts - from;
  flooding = false;
  await tenantLoop;

  const windows = Math.ceil(seconds) + 1;
  const lookups = statuses.get(401) ?? 0;
  // The pre-auth lookups, the tenant's key again each second, the admission's fence and backlog
  // reads (each at most once a second), and the creates.
  const budget = LOOKUPS_PER_SECOND * windows + 3 * windows + creates.length * perCreate + 10;
  t.diagnostic(`${used} pool checkouts (budget ${budget}), ${lookups} lookups, ${creates.length} creates, ${seconds.toFixed(1)} s`);
  assert.ok(
    used <= budget,
    `${used} pool checkouts for 10,000 unauthenticated requests and ${creates.length} creates in ${seconds.toFixed(1)} s (budget ${budget})`,
  );
  assert.ok(used < 1_000);
  assert.deepEqual([...statuses.keys()].sort(), [401, 429], JSON.stringify([...statuses]));
  assert.ok(lookups <= LOOKUPS_PER_SECOND * windows, `${lookups} keys looked up in ${seconds.toFixed(1)} s`);
  const [refused] = sampled;
  assert.ok(refused);
  assert.match(refused.type ?? '', /^application\/problem\+json/);
  assert.ok(Number(refused.retryAfter) >= 1);
  assert.equal(refused.body.status, 429);

  assert.ok(creates.length >= 3, `creates during the flood: ${creates.length}`);
  assert.deepEqual(
    creates.filter((s) => s !== 202),
    [],
    "the tenant's creates all succeed",
  );
});

/** GET /v1/tasks with a random bearer from another loopback address (node:http binds it; fetch cannot). */
function fromElsewhere(): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = nodeHttp.request(`${api.baseUrl}/v1/tasks`, { localAddress: '127.0.0.2', headers: { authorization: `Bearer ${randomBearer()}` } }, (res) => {
      res.resume().on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject).end();
  });
}

test('the limit is per source address: another address still gets its lookups while one is over it', async () => {
  const over = await Promise.all(
    Array.from({ length: LOOKUPS_PER_SECOND * 2 }, async () => {
      const r = await fetch(`${api.baseUrl}/v1/tasks`, { headers: { authorization: `Bearer ${randomBearer()}` } });
      await r.arrayBuffer();
      return r.status;
    }),
  );
  assert.ok(over.includes(429));
  assert.equal(await fromElsewhere(), 401);
  assert.equal((await http(api.baseUrl, 'GET', '/v1/tasks', { apiKey: tenant.apiKey })).status, 200);
});
