// Hostile requests: every malformed part of a request — path, query, headers, body, callback
// provider and token — is answered 4xx application/problem+json naming what is wrong, never a
// 500, and writes nothing.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { createCallbackTokens } from '../../providers/callback-token';
import { createTestDatabase, createTestTenant, startApi, temporalClient, testConfig, uniqueQueue, type RunningApi, type TestDatabase } from '../support/stack';

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('hostile') });
let tdb: TestDatabase;
let api: RunningApi;
let closeClient: () => Promise<void>;
let apiKey: string;

before(async () => {
  tdb = await createTestDatabase(config);
  const t = await temporalClient(config);
  closeClient = t.close;
  api = await startApi(config, tdb.database, { client: t.client });
  ({ apiKey } = await createTestTenant(tdb.database, config, '100'));
});
after(async () => {
  await api?.close();
  await closeClient?.();
  await tdb?.drop();
});

const task = { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p' };
const json = { 'content-type': 'application/json' };
const auth = () => ({ authorization: `Bearer ${apiKey}` });
const uuid = '0190a000-0000-7000-8000-000000000000';
/** A callback URL token as the API hands them out (keyed: docs/decisions/0016). */
const token = createCallbackTokens(config.CALLBACK_TOKEN_SECRET).tokenFor(uuid);

interface Case {
  readonly name: string;
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly headers?: () => Record<string, string>;
  readonly body?: string;
  /** The 4xx expected (any 4xx when absent). */
  readonly status?: number;
  /** The field the problem must name. */
  readonly field?: string;
}

const CASES: readonly Case[] = [
  { name: 'bad percent-encoding in a task id', method: 'GET', path: '/v1/tasks/%ff%fe', headers: auth, status: 400 },
  { name: 'a lone percent sign in a task id', method: 'GET', path: '/v1/tasks/%', headers: auth, status: 400 },
  { name: 'bad percent-encoding in a cancel path', method: 'POST', path: '/v1/tasks/%E0%A4%A/cancel', headers: auth, status: 400 },
  { name: 'a task id that is not a uuid', method: 'GET', path: `/v1/tasks/${'a'.repeat(5000)}`, headers: auth },
  { name: 'bad percent-encoding in the query', method: 'GET', path: '/v1/tasks?status=%ff', headers: auth, status: 400 },
  { name: 'an invalid limit', method: 'GET', path: '/v1/tasks?limit=-1e309', headers: auth, status: 400 },
  { name: 'an oversized limit', method: 'GET', path: `/v1/tasks?limit=${'9'.repeat(400)}`, headers: auth, status: 400 },
  { name: 'a repeated status', method: 'GET', path: '/v1/tasks?status=QUEUED&status=FAILED', headers: auth, status: 400 },
  { name: 'an unknown status', method: 'GET', path: '/v1/tasks?status=__proto__', headers: auth, status: 400 },
  { name: 'a cursor that is not one of ours', method: 'GET', path: `/v1/tasks?cursor=${'%00'.repeat(50)}`, headers: auth, status: 400 },
  { name: 'an overlong cursor', method: 'GET', path: `/v1/tasks?cursor=${'x'.repeat(8000)}`, headers: auth, status: 400 },
  {
    name: 'an authorization header that is not Bearer',
    method: 'GET',
    path: '/v1/tasks',
    headers: () => ({ authorization: 'Basic Zm9vOmJhcg==' }),
    status: 401,
  },
  { name: 'a Bearer with a non-ASCII key', method: 'GET', path: '/v1/tasks', headers: () => ({ authorization: 'Bearer %ff\u00e9' }), status: 401 },
  { name: 'bad JSON', method: 'POST', path: '/v1/tasks', headers: () => ({ ...auth(), ...json, 'idempotency-key': 'h-1' }), body: '{"model":', status: 400 },
  {
    name: 'a JSON body that is not an object',
    method: 'POST',
    path: '/v1/tasks',
    headers: () => ({ ...auth(), ...json, 'idempotency-key': 'h-2' }),
    body: '"hello"',
    status: 400,
  },
  {
    name: 'a body that is not JSON (text/plain)',
    method: 'POST',
    path: '/v1/tasks',
    headers: () => ({ ...auth(), 'content-type': 'text/plain', 'idempotency-key': 'h-3' }),
    body: JSON.stringify(task),
    status: 415,
  },
  {
    name: 'a form body',
    method: 'POST',
    path: '/v1/tasks',
    headers: () => ({ ...auth(), 'content-type': 'application/x-www-form-urlencoded', 'idempotency-key': 'h-4' }),
    body: 'model=x',
    status: 415,
  },
  {
    name: 'an unsupported charset',
    method: 'POST',
    path: '/v1/tasks',
    headers: () => ({ ...auth(), 'content-type': 'application/json; charset=koi8-r', 'idempotency-key': 'h-5' }),
    body: JSON.stringify(task),
    status: 415,
  },
  {
    name: 'a __proto__ key in the body',
    method: 'POST',
    path: '/v1/tasks',
    headers: () => ({ ...auth(), ...json, 'idempotency-key': 'h-6' }),
    body: '{"__proto__":{"admin":true},"model":"minimax/video-01"}',
    status: 400,
  },
  {
    name: 'an overlong Idempotency-Key',
    method: 'POST',
    path: '/v1/tasks',
    headers: () => ({ ...auth(), ...json, 'idempotency-key': 'k'.repeat(5000) }),
    body: JSON.stringify(task),
    status: 400,
  },
  // Strings Postgres cannot store (db/storable.ts): refused naming where they are, before any statement.
  ...(
    [
      ['a prompt with U+0000', 'prompt', { ...task, prompt: 'a \u0000 fox' }],
      ['a prompt with a lone surrogate', 'prompt', { ...task, prompt: 'a \ud800 fox' }],
      ['a metadata value with U+0000', 'metadata.k', { ...task, metadata: { k: 'x\u0000' } }],
      ['a metadata key with U+0000', 'metadata.a\ufffdb', { ...task, metadata: { 'a\u0000b': 'x' } }],
    ] as const
  ).map(([name, field, body], i): Case => ({
    name,
    method: 'POST',
    path: '/v1/tasks',
    headers: () => ({ ...auth(), ...json, 'idempotency-key': `h-nul-${i}` }),
    body: JSON.stringify(body),
    status: 400,
    field,
  })),
  {
    name: 'a webhook endpoint URL with U+0000',
    method: 'POST',
    path: '/v1/webhook-endpoints',
    headers: () => ({ ...auth(), ...json }),
    body: JSON.stringify({ url: 'https://hooks.example.com/a\u0000b', events: ['task.succeeded'] }),
    status: 400,
    field: 'url',
  },
  {
    name: 'a body nested 50,000 deep',
    method: 'POST',
    path: '/v1/tasks',
    headers: () => ({ ...auth(), ...json, 'idempotency-key': 'h-deep' }),
    body: `${'['.repeat(50_000)}${']'.repeat(50_000)}`,
    status: 400,
  },
  { name: 'a query value with U+0000', method: 'GET', path: '/v1/tasks?status=QUEUED%00', headers: auth, status: 400 },
  { name: 'a callback for provider "constructor"', method: 'POST', path: '/v1/callbacks/constructor/x', headers: () => json, body: '{}', status: 404 },
  { name: 'a callback for provider "__proto__"', method: 'POST', path: '/v1/callbacks/__proto__/x', headers: () => json, body: '{}', status: 404 },
  { name: 'a callback for provider "hasOwnProperty"', method: 'POST', path: '/v1/callbacks/hasOwnProperty/x', headers: () => json, body: '{}', status: 404 },
  {
    name: 'a callback token that is not an attempt id',
    method: 'POST',
    path: '/v1/callbacks/replicate/not-a-token',
    headers: () => json,
    body: '{}',
    status: 404,
  },
  { name: 'an overlong callback token', method: 'POST', path: `/v1/callbacks/replicate/${'t'.repeat(6000)}`, headers: () => json, body: '{}', status: 404 },
  { name: 'bad percent-encoding in a callback token', method: 'POST', path: '/v1/callbacks/fal/%ff%fe', headers: () => json, body: '{}', status: 400 },
  {
    name: 'an unsigned callback for a well-formed token',
    method: 'POST',
    path: `/v1/callbacks/replicate/${token}`,
    headers: () => json,
    body: '{}',
    status: 401,
  },
];

async function countWrites(): Promise<number> {
  const { rows } = await tdb.database.db.execute(sql`
    SELECT (SELECT count(*) FROM generation_task) + (SELECT count(*) FROM callback_inbox)
         + (SELECT count(*) FROM credit_ledger) + (SELECT count(*) FROM outbox_event) AS n`);
  return Number((rows[0] as { n: string }).n);
}

for (const c of CASES) {
  test(`${c.name}: ${c.status ?? '4xx'} problem+json, nothing written`, async () => {
    const before = await countWrites();
    const res = await fetch(`${api.baseUrl}${c.path}`, { method: c.method, headers: c.headers?.() ?? {}, ...(c.body !== undefined ? { body: c.body } : {}) });
    const text = await res.text();
    if (c.status) assert.equal(res.status, c.status, text);
    assert.ok(res.status >= 400 && res.status < 500, `${res.status}: ${text}`);
    assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/, text);
    const problem = JSON.parse(text) as { status: number; title: string };
    assert.equal(problem.status, res.status);
    if (c.field)
      assert.ok(
        (problem as { errors?: { field: string }[] }).errors?.some((e) => e.field === c.field),
        text,
      );
    assert.equal(await countWrites(), before);
  });
}
