// The API at the edge (README.md "Deploying", "At the edge"), the HTTP side: /openapi.json does not reflect the Host header, reads and
// cancels are rate-limited per tenant (a refused cancel writes nothing), and slow clients are
// cut off by the server's header and request timeouts instead of Node's 300 s default.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { creditLedger, generationTask } from '../../db/schema';
import { createGenerationFacade } from '../../temporal/facade';
import { createTestDatabase, createTestTenant, http, startApi, testConfig, type RunningApi, type TestDatabase } from '../support/stack';

let tdb: TestDatabase;
let api: RunningApi;
let alice: { tenantId: string; apiKey: string };
let bob: { tenantId: string; apiKey: string };
const config = testConfig({
  PUBLIC_BASE_URL: 'https://api.vidorch.example',
  TENANT_READ_RATE_PER_SECOND: '3',
  TENANT_CANCEL_RATE_PER_SECOND: '2',
  REDIS_URL: '',
  API_HEADERS_TIMEOUT_MS: '500',
  API_REQUEST_TIMEOUT_MS: '1000',
});

before(async () => {
  tdb = await createTestDatabase(config);
  const inner = createGenerationFacade(async () => {
    throw new Error('no Temporal here');
  }, config.TEMPORAL_TASK_QUEUE);
  api = await startApi(config, tdb.database, { facade: { ...inner, wakeTask: async () => true } });
  alice = await createTestTenant(tdb.database, config);
  bob = await createTestTenant(tdb.database, config);
});
after(async () => {
  await api?.close();
  await tdb?.drop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const body = { model: 'minimax/video-01', prompt: 'hardening', duration_seconds: 6, resolution: '720p' };

test('/openapi.json names PUBLIC_BASE_URL whatever Host header the request carries', async () => {
  const res = await new Promise<string>((resolve, reject) => {
    const url = new URL(api.baseUrl);
    const socket = net.connect(Number(url.port), url.hostname, () => {
      socket.write('GET /openapi.json HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n');
    });
    let text = '';
    socket.on('data', (b: Buffer) => (text += b.toString()));
    socket.on('end', () => resolve(text));
    socket.on('error', reject);
  });
  assert.match(res, /^HTTP\/1\.1 200/);
  assert.doesNotMatch(res, /evil\.example/);
  assert.match(res, /"servers":\[\{"url":"https:\/\/api\.vidorch\.example"\}\]/);
});

describe('per-tenant limits on reads and cancels', () => {
  test("past TENANT_READ_RATE_PER_SECOND a tenant's reads answer 429 with Retry-After; another tenant is not affected", async () => {
    await sleep(1_100); // a fresh one-second window
    const statuses: number[] = [];
    for (let i = 0; i < 5; i += 1) statuses.push((await http(api.baseUrl, 'GET', '/v1/tasks', { apiKey: alice.apiKey })).status);
    assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
    const limited = await http(api.baseUrl, 'GET', '/v1/tasks/00000000-0000-4000-8000-000000000001', { apiKey: alice.apiKey });
    assert.equal(limited.status, 429);
    assert.ok(Number(limited.headers.get('retry-after')) >= 1);
    assert.match(limited.headers.get('content-type') ?? '', /application\/problem\+json/);
    assert.equal((await http(api.baseUrl, 'GET', '/v1/tasks', { apiKey: bob.apiKey })).status, 200);
  });

  test('past TENANT_CANCEL_RATE_PER_SECOND a cancel answers 429 and writes nothing: the task stays QUEUED, its credits reserved', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i += 1) {
      const res = await http(api.baseUrl, 'POST', '/v1/tasks', { apiKey: alice.apiKey, body, headers: { 'idempotency-key': `cancel-limit-${i}` } });
      assert.equal(res.status, 202, JSON.stringify(res.body));
      ids.push(res.body.task_id);
    }
    await sleep(1_100);
    const statuses: number[] = [];
    for (const id of ids) statuses.push((await http(api.baseUrl, 'POST', `/v1/tasks/${id}/cancel`, { apiKey: alice.apiKey, body: {} })).status);
    assert.deepEqual(statuses, [202, 202, 429]);
    const [refused] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, ids[2]!));
    assert.equal(refused?.status, 'QUEUED');
    assert.equal(refused?.cancel_requested_at, null);
    const ledger = await tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, ids[2]!));
    assert.deepEqual(
      ledger.map((e) => e.entry_type),
      ['RESERVE'],
      'no release was written',
    );
  });
});

/** Opens a socket, sends `first`, then `repeat` every `everyMs`; resolves with what the server sent and when it closed. */
function slowClient(port: number, first: string, repeat: string, everyMs: number): Promise<{ reply: string; closedAfterMs: number }> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const socket = net.connect(port, '127.0.0.1');
    let reply = '';
    socket.once('connect', () => socket.write(first));
    const timer = setInterval(() => {
      if (socket.writable) socket.write(repeat);
    }, everyMs);
    socket.on('data', (b: Buffer) => (reply += b.toString()));
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ reply, closedAfterMs: Date.now() - t0 });
    });
    socket.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNRESET' || err.code === 'EPIPE' ? undefined : reject(err)));
    setTimeout(() => socket.destroy(), 15_000).unref();
  });
}

describe('slow clients', () => {
  test('headers that never finish are cut off after API_HEADERS_TIMEOUT_MS with 408', async () => {
    const port = Number(new URL(api.baseUrl).port);
    const r = await slowClient(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n', 'X-Slow: 1\r\n', 150);
    assert.match(r.reply, /^HTTP\/1\.1 408/);
    assert.ok(r.closedAfterMs < 5_000, `closed after ${r.closedAfterMs} ms`);
  });

  test('a body dribbled byte by byte is cut off after API_REQUEST_TIMEOUT_MS', async () => {
    const port = Number(new URL(api.baseUrl).port);
    const head = `POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${alice.apiKey}\r\nIdempotency-Key: slow-body\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n`;
    const r = await slowClient(port, head, ' ', 100);
    assert.ok(r.closedAfterMs < 6_000, `closed after ${r.closedAfterMs} ms`);
    const tasks = await tdb.database.db.select().from(generationTask).where(eq(generationTask.idempotency_key, 'slow-body'));
    assert.equal(tasks.length, 0, 'no task was written');
  });
});
