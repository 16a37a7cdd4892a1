// Browser tokens and CORS against a running API on real Postgres (docs/decisions/0077): a token
// reads what its scope names and nothing else, ends at its expiry and at its revocation (or its
// key's), and only a configured origin's page may read the answers.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createBrowserTokens } from '../../api/browser-tokens';
import { apiDocument } from '../../api/openapi';
import { listApiKeys, revokeApiKey } from '../../db/tenants';
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

const APP = 'https://app.example.com';
const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('tokens'), CORS_ALLOWED_ORIGINS: `${APP}, https://other.example.com` });
const validator = contractValidator(apiDocument('http://127.0.0.1') as unknown as OpenApiDoc);
const request = { model: 'minimax/video-01', prompt: 'a red fox running through snow', duration_seconds: 6, resolution: '720p' };

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
  assert.deepEqual(errors, [], `${method} ${path} ${res.status} matches /openapi.json: ${errors.join('; ')}`);
  return res;
}

async function tenantWithTasks(n: number) {
  const t = await createTestTenant(tdb.database, config, '1000');
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await call('POST', '/v1/tasks', t.apiKey, { ...request, prompt: `task ${i}` }, { 'idempotency-key': `t-${i}` });
    assert.equal(res.status, 202);
    ids.push(res.body.task_id);
  }
  return { ...t, ids };
}

/** The status of an event stream's answer (the stream is aborted once its head arrives). */
async function streamStatus(path: string, token: string): Promise<number> {
  const ac = new AbortController();
  const res = await fetch(`${api.baseUrl}${path}`, { headers: { authorization: `Bearer ${token}` }, signal: ac.signal });
  ac.abort();
  return res.status;
}

describe('browser tokens', () => {
  test("a read token reads the tenant's tasks and stream, and cannot create, cancel, mint or touch webhooks", async () => {
    const alice = await tenantWithTasks(1);
    const minted = await call('POST', '/v1/tokens', alice.apiKey, {});
    assert.equal(minted.status, 201);
    const token = minted.body.token as string;
    assert.match(token, /^vbt_/);
    assert.equal(minted.body.task_ids, null);
    assert.equal((await call('GET', `/v1/tasks/${alice.ids[0]}`, token)).status, 200);
    assert.equal((await call('GET', '/v1/tasks', token)).status, 200);
    assert.equal(await streamStatus('/v1/events', token), 200);
    assert.equal(await streamStatus(`/v1/tasks/${alice.ids[0]}/events`, token), 200);
    assert.equal((await call('POST', '/v1/tasks', token, request, { 'idempotency-key': 'by-token' })).status, 401);
    assert.equal((await call('POST', '/v1/tasks/batch', token, { items: [{ idempotency_key: 'x', request }] }, { 'idempotency-key': 'b' })).status, 401);
    assert.equal((await call('POST', `/v1/tasks/${alice.ids[0]}/cancel`, token)).status, 401);
    assert.equal((await call('POST', '/v1/tokens', token, {})).status, 401);
    assert.equal((await call('GET', '/v1/webhook-endpoints', token)).status, 401);
    // Another tenant's task is not found through the token either.
    const bob = await tenantWithTasks(1);
    assert.equal((await call('GET', `/v1/tasks/${bob.ids[0]}`, token)).status, 404);
  });

  test('a token limited to one task reads it and its stream, and nothing else (another task: 404; the list and the tenant stream: 401)', async () => {
    const alice = await tenantWithTasks(2);
    const minted = await call('POST', '/v1/tokens', alice.apiKey, { task_ids: [alice.ids[0]], ttl_seconds: 120 });
    assert.equal(minted.status, 201);
    const token = minted.body.token as string;
    assert.equal((await call('GET', `/v1/tasks/${alice.ids[0]}`, token)).status, 200);
    assert.equal(await streamStatus(`/v1/tasks/${alice.ids[0]}/events`, token), 200);
    assert.equal((await call('GET', `/v1/tasks/${alice.ids[1]}`, token)).status, 404);
    assert.equal(await streamStatus(`/v1/tasks/${alice.ids[1]}/events`, token), 404);
    assert.equal((await call('GET', '/v1/tasks', token)).status, 401);
    assert.equal(await streamStatus('/v1/events', token), 401);
    // Minting for a task the tenant does not have is a 404; a ttl past the maximum a 400.
    const bob = await tenantWithTasks(1);
    assert.equal((await call('POST', '/v1/tokens', alice.apiKey, { task_ids: [bob.ids[0]] })).status, 404);
    const long = await call('POST', '/v1/tokens', alice.apiKey, { ttl_seconds: 86_400 });
    assert.equal(long.status, 400);
    assert.equal(long.body.errors[0].field, 'ttl_seconds');
  });

  test('an expired, forged or revoked token is a 401, and so is every token of a revoked key', async () => {
    const alice = await tenantWithTasks(1);
    const [key] = await listApiKeys(tdb.database.db, alice.tenantId);
    const signer = createBrowserTokens(config.BROWSER_TOKEN_SECRET);
    const expired = signer.mint({ tenantId: alice.tenantId, keyId: key!.key_id, ttlSeconds: 60, taskIds: null, now: new Date(Date.now() - 61_000) });
    assert.equal((await call('GET', `/v1/tasks/${alice.ids[0]}`, expired.token)).status, 401);
    const live = signer.mint({ tenantId: alice.tenantId, keyId: key!.key_id, ttlSeconds: 60, taskIds: null, now: new Date() });
    assert.equal((await call('GET', `/v1/tasks/${alice.ids[0]}`, live.token)).status, 200);
    const forged = createBrowserTokens('another-secret-of-at-least-32-characters!').mint({
      tenantId: alice.tenantId,
      keyId: key!.key_id,
      ttlSeconds: 60,
      taskIds: null,
      now: new Date(),
    });
    assert.equal((await call('GET', `/v1/tasks/${alice.ids[0]}`, forged.token)).status, 401);

    const minted = await call('POST', '/v1/tokens', alice.apiKey, {});
    assert.equal((await call('GET', '/v1/tasks', minted.body.token)).status, 200);
    assert.equal((await call('DELETE', `/v1/tokens/${minted.body.token_id}`, alice.apiKey)).status, 204);
    assert.equal((await call('GET', '/v1/tasks', minted.body.token)).status, 401);
    // Another tenant cannot revoke alice's token.
    const second = await call('POST', '/v1/tokens', alice.apiKey, {});
    const bob = await tenantWithTasks(0);
    assert.equal((await call('DELETE', `/v1/tokens/${second.body.token_id}`, bob.apiKey)).status, 204);
    assert.equal((await call('GET', '/v1/tasks', second.body.token)).status, 200);
    // Revoking the key that minted it ends it.
    await revokeApiKey(tdb.database.db, alice.tenantId, key!.key_id);
    assert.equal((await call('GET', '/v1/tasks', second.body.token)).status, 401);
  });
});

describe('CORS on the routes a browser token may call', () => {
  const preflight = (origin: string, path = '/v1/tasks') =>
    fetch(`${api.baseUrl}${path}`, {
      method: 'OPTIONS',
      headers: { origin, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
    });

  test('an allowed origin is answered with what it may send; another origin gets no CORS headers', async () => {
    const ok = await preflight(APP);
    assert.equal(ok.status, 204);
    assert.equal(ok.headers.get('access-control-allow-origin'), APP);
    assert.match(ok.headers.get('access-control-allow-headers') ?? '', /Authorization/);
    assert.equal(ok.headers.get('access-control-allow-methods'), 'GET');
    const stream = await preflight(APP, '/v1/tasks/5f0c6a8e-7c55-4a43-9a55-0a4c7c1f1e11/events');
    assert.equal(stream.headers.get('access-control-allow-origin'), APP);

    const refused = await preflight('https://evil.example.net');
    assert.equal(refused.headers.get('access-control-allow-origin'), null);
    assert.equal(refused.headers.get('access-control-allow-methods'), null);
    // Routes a token may not call get no CORS at all.
    const create = await preflight(APP, '/v1/webhook-endpoints');
    assert.equal(create.headers.get('access-control-allow-origin'), null);
  });

  test("an allowed origin's GET carries Access-Control-Allow-Origin; another origin's does not", async () => {
    const alice = await tenantWithTasks(0);
    const minted = await call('POST', '/v1/tokens', alice.apiKey, {});
    const get = (origin: string) => fetch(`${api.baseUrl}/v1/tasks`, { headers: { origin, authorization: `Bearer ${minted.body.token}` } });
    const ok = await get(APP);
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get('access-control-allow-origin'), APP);
    const other = await get('https://evil.example.net');
    assert.equal(other.headers.get('access-control-allow-origin'), null);
  });
});
