// A revoked API key loses what it had open (docs/security.md "API keys", docs/events.md): its
// event streams end within seconds on every API process (one in this test process, one an
// api/server.ts child), the key answers 401 at once though each process caches lookups for a
// minute here, and a key revoked with a grace period keeps its streams until the grace ends.
// Another key of the same tenant is not touched.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { configToEnv } from '../../config/env';
import { issueApiKey } from '../../db/tenants';
import { freePort, startNodeProcess, type ManagedProcess } from '../../harness';
import { uniqueName } from '../../harness/world';
import { revokeKey, rotateKey } from '../../ops/keys';
import { createTenant } from '../../ops/tenants';
import { createGenerationFacade } from '../../temporal/facade';
import { createTaskWithoutWorkflow } from '../support/deps';
import { createTestDatabase, eventually, http, startApi, testConfig, type RunningApi, type TestDatabase } from '../support/stack';

const config = testConfig({
  // Only a revocation's NOTIFY can make a cached key answer 401 within this test.
  AUTH_CACHE_TTL_MS: '60000',
  // No heartbeat (and its mode check) during the test: what ends a stream is the revocation.
  EVENTS_HEARTBEAT_MS: '60000',
  REDIS_URL: '',
});
const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
let tdb: TestDatabase;
let inProcess: RunningApi;
let child: ManagedProcess;
let childUrl = '';
const name = uniqueName('revoked');
let tenantId = '';
let keyA = { key: '', id: '' };
let keyB = { key: '', id: '' };
let taskId = '';

before(async () => {
  tdb = await createTestDatabase(config);
  inProcess = await startApi(config, tdb.database, {
    facade: createGenerationFacade(async () => {
      throw new Error('no Temporal here');
    }, 'unused'),
  });
  const port = await freePort();
  child = startNodeProcess(
    'api-2',
    'api/server.ts',
    { ...configToEnv(config), DATABASE_URL: tdb.url, PORT: String(port), OPS_PORT: String(await freePort()), LOG_LEVEL: 'warn', LOG_PRETTY: 'false' },
    { log: () => undefined },
  );
  childUrl = `http://127.0.0.1:${port}`;
  await eventually(async () => ((await fetch(`${childUrl}/healthz`).catch(() => null))?.ok ? true : undefined), 60_000, 200);

  const t = await createTenant(tdb.database.db, { name, credits: '100', ifMissing: false, actor: 'test', fence });
  tenantId = t.tenant_id;
  keyA = { key: t.api_key!, id: t.key_id! };
  const b = await issueApiKey(tdb.database.db, tenantId);
  keyB = { key: b.key, id: b.keyId };
  const { task } = await createTaskWithoutWorkflow(
    tdb.database.db,
    { ...fence, epoch: 1 },
    {
      tenantId,
      idempotencyKey: 'revoked-stream',
      body: { model: 'minimax/video-01', prompt: 'revoked', duration_seconds: 6, resolution: '720p', priority: 0 },
    },
  );
  taskId = task.task_id;
});
after(async () => {
  await child?.stop('SIGTERM', 10_000);
  await inProcess?.close();
  await tdb?.drop();
});

interface OpenStream {
  /** Resolves with the time the stream ended (the server closed it). */
  readonly ended: Promise<number>;
  isOpen(): boolean;
  close(): void;
}

async function openStream(baseUrl: string, path: string, key: string): Promise<OpenStream> {
  const abort = new AbortController();
  const res = await fetch(`${baseUrl}${path}`, { headers: { authorization: `Bearer ${key}` }, signal: abort.signal });
  assert.equal(res.status, 200, `${baseUrl}${path}: ${await (res.status === 200 ? Promise.resolve('') : res.text())}`);
  const reader = res.body!.getReader();
  let open = true;
  const ended = (async () => {
    try {
      for (;;) if ((await reader.read()).done) break;
    } catch {
      /* aborted or reset: ended either way */
    }
    open = false;
    return Date.now();
  })();
  return { ended, isOpen: () => open, close: () => abort.abort() };
}

const within = <T>(p: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([p, sleep(ms).then(() => Promise.reject(new Error(`${what}: not within ${ms} ms`)))]);
const status = async (baseUrl: string, key: string) => (await http(baseUrl, 'GET', '/v1/tasks', { apiKey: key })).status;

test("a revoked key's open streams end within 5 s on both API processes, and it answers 401 at once; the tenant's other key keeps its stream", async () => {
  const apis = [inProcess.baseUrl, childUrl];
  // Both processes have the key cached as valid (for a minute).
  for (const url of apis) assert.equal(await status(url, keyA.key), 200);
  const revokedStreams = [
    await openStream(inProcess.baseUrl, '/v1/events', keyA.key),
    await openStream(inProcess.baseUrl, `/v1/tasks/${taskId}/events`, keyA.key),
    await openStream(childUrl, '/v1/events', keyA.key),
    await openStream(childUrl, `/v1/tasks/${taskId}/events`, keyA.key),
  ];
  const others = [await openStream(inProcess.baseUrl, '/v1/events', keyB.key), await openStream(childUrl, '/v1/events', keyB.key)];
  await sleep(300);
  assert.ok(revokedStreams.every((s) => s.isOpen()));

  const revokedAt = Date.now();
  await revokeKey(tdb.database.db, { tenant: name, keyId: keyA.id, reason: 'leaked', actor: 'test', fence });
  const endedAt = await Promise.all(revokedStreams.map((s, i) => within(s.ended, 5_000, `stream ${i} of the revoked key`)));
  assert.ok(Math.max(...endedAt) - revokedAt < 5_000);
  for (const url of apis) assert.equal(await status(url, keyA.key), 401, `${url}: the cached answer was evicted`);

  await sleep(500);
  assert.ok(
    others.every((s) => s.isOpen()),
    "the tenant's other key keeps its streams",
  );
  for (const url of apis) assert.equal(await status(url, keyB.key), 200);
  for (const s of others) s.close();
});

test('a key rotated with a grace period keeps its streams and answers until the grace ends, then both end', async () => {
  const apis = [inProcess.baseUrl, childUrl];
  const streams = [await openStream(inProcess.baseUrl, '/v1/events', keyB.key), await openStream(childUrl, '/v1/events', keyB.key)];
  const rotated = await rotateKey(tdb.database.db, { tenant: name, keyId: keyB.id, reason: 'scheduled', actor: 'test', fence, graceSeconds: 3 });
  await sleep(1_000);
  assert.ok(
    streams.every((s) => s.isOpen()),
    'open during the grace',
  );
  for (const url of apis) assert.equal(await status(url, keyB.key), 200, `${url}: valid during the grace`);
  await Promise.all(streams.map((s, i) => within(s.ended, rotated.old_revoked_at.getTime() + 5_000 - Date.now(), `stream ${i} after the grace`)));
  for (const s of streams) assert.ok((await s.ended) >= rotated.old_revoked_at.getTime() - 50, 'not before the grace ends');
  for (const url of apis) assert.equal(await status(url, keyB.key), 401);
  for (const url of apis) assert.equal(await status(url, rotated.api_key), 200, 'the new key works');
});
