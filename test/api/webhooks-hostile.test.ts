// Hostile input on the webhook endpoints, under the production URL rule (WEBHOOK_ALLOW_PRIVATE
// off): private, loopback, link-local and non-https URLs, bad event lists, unknown fields,
// oversized bodies, another tenant's endpoint. Each is a 4xx problem+json naming the field
// where there is one, never a 500, and writes nothing.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { loadConfig } from '../../config/env';
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

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('wh_hostile'), WEBHOOK_ALLOW_PRIVATE: 'false' });
let tdb: TestDatabase;
let api: RunningApi;
let closeClient: () => Promise<void>;
let mine: { apiKey: string };
let theirs: { apiKey: string };
let mineEndpoint = '';
let theirEndpoint = '';

before(async () => {
  tdb = await createTestDatabase(config);
  const t = await temporalClient(config);
  closeClient = t.close;
  api = await startApi(config, tdb.database, { client: t.client });
  mine = await createTestTenant(tdb.database, config, '100');
  theirs = await createTestTenant(tdb.database, config, '100');
  const a = await http(api.baseUrl, 'POST', '/v1/webhook-endpoints', { apiKey: mine.apiKey, body: { url: 'https://hooks.example.com/vidorch' } });
  const b = await http(api.baseUrl, 'POST', '/v1/webhook-endpoints', {
    apiKey: theirs.apiKey,
    body: { url: 'https://other.example.com/hook', events: ['task.failed'] },
  });
  assert.equal(a.status, 201, JSON.stringify(a.body));
  assert.equal(b.status, 201, JSON.stringify(b.body));
  mineEndpoint = a.body.id;
  theirEndpoint = b.body.id;
});
after(async () => {
  await api?.close();
  await closeClient?.();
  await tdb?.drop();
});

async function countWrites(): Promise<string> {
  const { rows } = await tdb.database.db.execute(sql`
    SELECT (SELECT count(*) FROM webhook_endpoint) AS endpoints, (SELECT count(*) FROM webhook_endpoint_secret) AS secrets,
      (SELECT count(*) FROM generation_task) AS tasks,
      (SELECT string_agg(url || coalesce(array_to_string(events, ','), '*') || enabled::text || coalesce(deleted_at::text, ''), ';' ORDER BY endpoint_id) FROM webhook_endpoint) AS shape,
      (SELECT string_agg(coalesce(expires_at::text, '-'), ';' ORDER BY secret_id) FROM webhook_endpoint_secret) AS expiries`);
  return JSON.stringify(rows[0]);
}

interface Case {
  readonly name: string;
  readonly method: string;
  readonly path: () => string;
  readonly body?: unknown;
  readonly raw?: string;
  readonly status: number;
  /** The field the problem must name. */
  readonly field?: string;
  readonly headers?: Record<string, string>;
}

const create = (body: unknown, field: string | undefined, name: string, status = 400): Case => ({
  name,
  method: 'POST',
  path: () => '/v1/webhook-endpoints',
  body,
  status,
  ...(field ? { field } : {}),
});

const CASES: readonly Case[] = [
  create({ url: 'http://hooks.example.com/x' }, 'url', 'a non-https URL'),
  create({ url: 'https://127.0.0.1/x' }, 'url', 'a loopback address'),
  create({ url: 'https://localhost:8443/x' }, 'url', 'localhost'),
  create({ url: 'https://10.1.2.3/x' }, 'url', 'a private address'),
  create({ url: 'https://169.254.169.254/latest/meta-data' }, 'url', 'the cloud metadata address'),
  create({ url: 'https://[::1]/x' }, 'url', 'IPv6 loopback'),
  create({ url: 'https://[::ffff:10.0.0.1]/x' }, 'url', 'an IPv4-mapped private address'),
  create({ url: 'https://100.64.0.1/x' }, 'url', 'a CGNAT address'),
  create({ url: 'https://user:pass@hooks.example.com/x' }, 'url', 'a URL with credentials'),
  create({ url: 'ftp://hooks.example.com/x' }, 'url', 'another scheme'),
  create({ url: 'not a url' }, 'url', 'not a URL'),
  create({ url: `https://hooks.example.com/${'a'.repeat(3000)}` }, 'url', 'an overlong URL'),
  create({}, 'url', 'no URL'),
  create({ url: 'https://hooks.example.com/x', events: ['task.bogus'] }, 'events.0', 'an unknown event type'),
  create({ url: 'https://hooks.example.com/x', events: [] }, 'events', 'an empty events list'),
  create({ url: 'https://hooks.example.com/x', events: ['task.failed', 'task.failed'] }, 'events', 'a repeated event type'),
  create({ url: 'https://hooks.example.com/x', events: 'task.failed' }, 'events', 'events that is not a list'),
  create({ url: 'https://hooks.example.com/x', secret: 'whsec_mine' }, 'secret', 'a secret of our own choosing'),
  create({ url: 'https://hooks.example.com/x', description: 'd'.repeat(501) }, 'description', 'an overlong description'),
  {
    name: 'an oversized body',
    method: 'POST',
    path: () => '/v1/webhook-endpoints',
    raw: JSON.stringify({ url: 'https://hooks.example.com/x', description: 'x'.repeat(300 * 1024) }),
    status: 413,
  },
  {
    name: 'a body that is not JSON',
    method: 'POST',
    path: () => '/v1/webhook-endpoints',
    raw: 'url=https://hooks.example.com',
    headers: { 'content-type': 'text/plain' },
    status: 415,
  },
  {
    name: 'a PATCH to a private URL',
    method: 'PATCH',
    path: () => `/v1/webhook-endpoints/${mineEndpoint}`,
    body: { url: 'https://192.168.0.10/hook' },
    status: 400,
    field: 'url',
  },
  {
    name: 'a PATCH to an http URL',
    method: 'PATCH',
    path: () => `/v1/webhook-endpoints/${mineEndpoint}`,
    body: { url: 'http://hooks.example.com/hook' },
    status: 400,
    field: 'url',
  },
  {
    name: 'a PATCH with bad events',
    method: 'PATCH',
    path: () => `/v1/webhook-endpoints/${mineEndpoint}`,
    body: { events: ['task.progress'] },
    status: 400,
    field: 'events.0',
  },
  { name: 'an empty PATCH', method: 'PATCH', path: () => `/v1/webhook-endpoints/${mineEndpoint}`, body: {}, status: 400 },
  {
    name: 'a PATCH of enabled that is not a boolean',
    method: 'PATCH',
    path: () => `/v1/webhook-endpoints/${mineEndpoint}`,
    body: { enabled: 'yes' },
    status: 400,
    field: 'enabled',
  },
  { name: "GET another tenant's endpoint", method: 'GET', path: () => `/v1/webhook-endpoints/${theirEndpoint}`, status: 404 },
  { name: "PATCH another tenant's endpoint", method: 'PATCH', path: () => `/v1/webhook-endpoints/${theirEndpoint}`, body: { enabled: false }, status: 404 },
  { name: "DELETE another tenant's endpoint", method: 'DELETE', path: () => `/v1/webhook-endpoints/${theirEndpoint}`, status: 404 },
  { name: "rotate another tenant's secret", method: 'POST', path: () => `/v1/webhook-endpoints/${theirEndpoint}/rotate-secret`, body: {}, status: 404 },
  { name: "another tenant's deliveries", method: 'GET', path: () => `/v1/webhook-endpoints/${theirEndpoint}/deliveries`, status: 404 },
  {
    name: "a redeliver on another tenant's endpoint",
    method: 'POST',
    path: () => `/v1/webhook-endpoints/${theirEndpoint}/deliveries/0190a000-0000-7000-8000-000000000000/redeliver`,
    body: {},
    status: 404,
  },
  {
    name: 'a redeliver of an unknown delivery',
    method: 'POST',
    path: () => `/v1/webhook-endpoints/${mineEndpoint}/deliveries/0190a000-0000-7000-8000-000000000000/redeliver`,
    body: {},
    status: 404,
  },
  { name: 'an endpoint id that is not a uuid', method: 'GET', path: () => `/v1/webhook-endpoints/${'x'.repeat(500)}`, status: 404 },
  { name: 'bad percent-encoding in an endpoint id', method: 'GET', path: () => '/v1/webhook-endpoints/%ff%fe', status: 400 },
  { name: 'a deliveries limit of 0', method: 'GET', path: () => `/v1/webhook-endpoints/${mineEndpoint}/deliveries?limit=0`, status: 400, field: 'query.limit' },
  {
    name: 'a deliveries cursor that is not ours',
    method: 'GET',
    path: () => `/v1/webhook-endpoints/${mineEndpoint}/deliveries?cursor=abc`,
    status: 400,
    field: 'query.cursor',
  },
  {
    name: 'an unknown delivery state',
    method: 'GET',
    path: () => `/v1/webhook-endpoints/${mineEndpoint}/deliveries?state=lost`,
    status: 400,
    field: 'query.state',
  },
  {
    name: "a task's webhook_url to a private address",
    method: 'POST',
    path: () => '/v1/tasks',
    headers: { 'idempotency-key': 'wh-h-1' },
    body: { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p', webhook_url: 'https://10.0.0.5/hook' },
    status: 400,
    field: 'webhook_url',
  },
  {
    name: "a task's webhook_url over http",
    method: 'POST',
    path: () => '/v1/tasks',
    headers: { 'idempotency-key': 'wh-h-2' },
    body: { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p', webhook_url: 'http://hooks.example.com/hook' },
    status: 400,
    field: 'webhook_url',
  },
];

for (const c of CASES) {
  test(`${c.name}: ${c.status} problem+json${c.field ? ` naming ${c.field}` : ''}, nothing written`, async () => {
    const before = await countWrites();
    const body = c.raw ?? (c.body !== undefined ? JSON.stringify(c.body) : undefined);
    const res = await fetch(`${api.baseUrl}${c.path()}`, {
      method: c.method,
      headers: { authorization: `Bearer ${mine.apiKey}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...(c.headers ?? {}) },
      ...(body !== undefined ? { body } : {}),
    });
    const text = await res.text();
    assert.equal(res.status, c.status, text);
    assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/, text);
    const problem = JSON.parse(text) as { status: number; errors?: { field: string }[] };
    assert.equal(problem.status, res.status);
    if (c.field)
      assert.ok(
        problem.errors?.some((e) => e.field === c.field),
        `names ${c.field}: ${text}`,
      );
    assert.equal(await countWrites(), before);
  });
}

test("a task's webhook_url is refused while the tenant has no enabled endpoint to sign with", async () => {
  const other = await createTestTenant(tdb.database, config, '100');
  const before = await countWrites();
  const res = await http(api.baseUrl, 'POST', '/v1/tasks', {
    apiKey: other.apiKey,
    headers: { 'idempotency-key': 'wh-h-3' },
    body: { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p', webhook_url: 'https://hooks.example.com/per-task' },
  });
  assert.equal(res.status, 400, JSON.stringify(res.body));
  assert.equal(res.body.errors[0].field, 'webhook_url');
  assert.equal(await countWrites(), before);
});

test("another tenant's endpoint is untouched by every refused request", async () => {
  const res = await http(api.baseUrl, 'GET', `/v1/webhook-endpoints/${theirEndpoint}`, { apiKey: theirs.apiKey });
  assert.equal(res.status, 200);
  assert.equal(res.body.enabled, true);
  assert.deepEqual(res.body.events, ['task.failed']);
});

test('the production profile refuses WEBHOOK_ALLOW_PRIVATE=true and the dev WEBHOOK_SECRET_KEY, by name', () => {
  assert.throws(
    () => loadConfig({ VIDORCH_ENV: 'production', WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_SECRET_KEY: 'dev-webhook-secret-key-not-for-production' }),
    (err: Error & { issues?: { field: string }[] }) => {
      const fields = (err.issues ?? []).map((i) => i.field);
      return fields.includes('WEBHOOK_ALLOW_PRIVATE') && fields.includes('WEBHOOK_SECRET_KEY');
    },
  );
  // The dev key as a retired key would keep secrets sealed under a public key readable.
  assert.throws(
    () => loadConfig({ VIDORCH_ENV: 'production', WEBHOOK_SECRET_KEY_PREVIOUS: 'x'.repeat(40) + ', dev-webhook-secret-key-not-for-production' }),
    (err: Error & { issues?: { field: string; message: string }[] }) =>
      (err.issues ?? []).some((i) => i.field === 'WEBHOOK_SECRET_KEY_PREVIOUS' && /dev WEBHOOK_SECRET_KEY is refused/.test(i.message)),
  );
});
