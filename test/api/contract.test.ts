// The API contract (docs/api.md): the express app serves exactly the routes the OpenAPI document
// lists, and real answers of a running API — a task carried to SUCCEEDED by the worker, and each
// error class — are answers the document declares (status, headers, media type, body schema).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import express from 'express';
import { Webhook } from 'standardwebhooks';
import { createApp } from '../../api/app';
import { buildApiContext } from '../../api/context';
import { apiDocument } from '../../api/openapi';
import { setMode } from '../../db/modes';
import type { SystemMode } from '../../domain/states';
import { createMetrics } from '../../observability/metrics';
import { createCallbackTokens } from '../../providers/callback-token';
import { contractValidator, documentedRoutes, expressRoutes, type OpenApiDoc, type RouteKey } from '../support/contract';
import { defaultRequest, startE2E, type E2E } from '../support/e2e';
import { createTestTenant, startApi, testLogger, type RunningApi } from '../support/stack';

let e: E2E;
let limited: RunningApi;
let spoolDir: string;
const doc = apiDocument('http://127.0.0.1') as unknown as OpenApiDoc;
const validator = contractValidator(doc);

before(async () => {
  spoolDir = await fs.mkdtemp(path.join(os.tmpdir(), 'vidorch-contract-spool-'));
  e = await startE2E('contract', { CALLBACK_SPOOL_DIR: spoolDir }, { generationMs: 300 });
  // A second API on the same database with rates of 1/s and no shared Redis: the 429s.
  limited = await startApi(
    { ...e.config, TENANT_CREATE_RATE_PER_SECOND: 1, TENANT_READ_RATE_PER_SECOND: 1, TENANT_CANCEL_RATE_PER_SECOND: 1, REDIS_URL: '' },
    e.tdb.database,
    { client: e.client },
  );
});
after(async () => {
  await limited?.close();
  await e?.close();
  if (spoolDir) await fs.rm(spoolDir, { recursive: true, force: true });
});

const key = (r: RouteKey) => `${r.method.toUpperCase()} ${r.path}`;

describe('every route the app serves is in the document, and only those', () => {
  function appRoutes(extra?: (app: express.Express) => void) {
    const ctx = buildApiContext(e.config, {
      db: e.tdb.database.db,
      facade: e.api.facade,
      logger: testLogger,
      metrics: createMetrics({ service: 'contract-test' }),
    });
    const app = createApp(ctx);
    extra?.(app);
    return { routes: expressRoutes(app).map(key).sort(), close: () => ctx.close() };
  }

  test('the express router stack and the document list the same methods and paths', async () => {
    const { routes, close } = appRoutes();
    await close();
    assert.ok(routes.length >= 8, routes.join(', '));
    assert.deepEqual(routes, documentedRoutes(doc).map(key).sort());
  });

  test('a route mounted outside the registry is found by the walk (so the check above can fail)', async () => {
    const { routes, close } = appRoutes((app) => {
      const r = express.Router();
      r.delete('/things/:id', (_req, res) => res.end());
      app.use('/v2', r);
    });
    await close();
    assert.ok(routes.includes('DELETE /v2/things/{id}'), routes.join(', '));
    assert.notDeepEqual(routes, documentedRoutes(doc).map(key).sort());
  });

  test('every operation has an operation id, a summary, and its problem answers as application/problem+json', () => {
    const ids = new Set<string>();
    for (const [p, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item) as [
        string,
        { operationId: string; summary?: string; responses: Record<string, { content?: object; headers?: Record<string, unknown> }> },
      ][]) {
        assert.ok(op.operationId && !ids.has(op.operationId), `${method} ${p}: operationId`);
        ids.add(op.operationId);
        assert.ok(op.summary, `${method} ${p}: summary`);
        for (const [status, r] of Object.entries(op.responses)) {
          if (Number(status) >= 400 && !(p === '/readyz' && status === '503'))
            assert.deepEqual(Object.keys(r.content ?? {}), ['application/problem+json'], `${op.operationId} ${status}`);
          if (status === '429' || status === '503') assert.ok(r.headers?.['Retry-After'], `${op.operationId} ${status}: Retry-After`);
        }
      }
    }
  });
});

/** Sends a request and checks the answer against the document; returns the answer. */
async function answer(method: string, url: string, init: { headers?: Record<string, string>; body?: string; api?: string } = {}) {
  const res = await fetch(`${init.api ?? e.api.baseUrl}${url}`, {
    method,
    headers: init.headers ?? {},
    ...(init.body !== undefined ? { body: init.body } : {}),
  });
  const text = await res.text();
  const errors = validator.check({ method, path: url }, { status: res.status, headers: res.headers, text });
  assert.deepEqual(errors, [], `${method} ${url} → ${res.status} ${text.slice(0, 300)}`);
  return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : null };
}

const auth = (apiKey = e.tenant.apiKey) => ({ authorization: `Bearer ${apiKey}` });
const jsonHeaders = (idem?: string, apiKey?: string) => ({ ...auth(apiKey), 'content-type': 'application/json', ...(idem ? { 'idempotency-key': idem } : {}) });
const mode = (m: SystemMode) => setMode(e.tdb.database.db, { scope: e.config.FENCE_SCOPE, mode: m, actor: 'test', reason: 'contract test' });

describe('real answers validate against the document', () => {
  let succeeded: any;

  test('public probes and the document itself', async () => {
    assert.equal((await answer('GET', '/healthz')).status, 200);
    assert.equal((await answer('GET', '/readyz')).status, 200);
    assert.equal((await answer('GET', '/openapi.json')).body.openapi, '3.1.0');
  });

  test('create (new and replayed), list and a SUCCEEDED task with its output, attempts, transitions and ledger', async () => {
    const created = await answer('POST', '/v1/tasks', { headers: jsonHeaders('contract-1'), body: JSON.stringify(defaultRequest) });
    assert.equal(created.status, 202);
    assert.equal(created.headers.get('location'), `/v1/tasks/${created.body.task_id}`);
    const replayed = await answer('POST', '/v1/tasks', { headers: jsonHeaders('contract-1'), body: JSON.stringify(defaultRequest) });
    assert.equal(replayed.headers.get('idempotent-replayed'), 'true');
    await e.waitForStatus(created.body.task_id, 'SUCCEEDED');
    succeeded = (await answer('GET', `/v1/tasks/${created.body.task_id}`, { headers: auth() })).body;
    assert.ok(succeeded.output?.download_url && succeeded.attempts.length > 0 && succeeded.ledger.length > 0);
    const page = await answer('GET', '/v1/tasks?limit=1', { headers: auth() });
    assert.equal(page.body.tasks.length, 1);
    assert.equal((await answer('GET', '/v1/tasks?status=SUCCEEDED', { headers: auth() })).status, 200);
  });

  test('cancel: 202, and 409 for a task already SUCCEEDED, 404 for an unknown one', async () => {
    const created = await answer('POST', '/v1/tasks', {
      headers: jsonHeaders('contract-cancel'),
      body: JSON.stringify({ ...defaultRequest, prompt: 'a fox to cancel [sim:gen=30000]' }),
    });
    assert.equal((await answer('POST', `/v1/tasks/${created.body.task_id}/cancel`, { headers: auth() })).status, 202);
    assert.equal((await answer('POST', `/v1/tasks/${succeeded.task_id}/cancel`, { headers: auth() })).status, 409);
    assert.equal((await answer('POST', `/v1/tasks/${randomUUID()}/cancel`, { headers: auth() })).status, 404);
  });

  test('webhook endpoints: create, list, get, update, rotate, deliveries, redeliver, delete and their problems', async () => {
    const hook = 'http://127.0.0.1:9/contract-hook';
    const created = await answer('POST', '/v1/webhook-endpoints', { headers: jsonHeaders(), body: JSON.stringify({ url: hook, events: ['task.succeeded'] }) });
    assert.equal(created.status, 201);
    assert.match(created.body.secret, /^whsec_/);
    const id: string = created.body.id;
    assert.equal((await answer('GET', '/v1/webhook-endpoints', { headers: auth() })).status, 200);
    assert.equal((await answer('GET', `/v1/webhook-endpoints/${id}`, { headers: auth() })).body.url, hook);
    const patched = await answer('PATCH', `/v1/webhook-endpoints/${id}`, { headers: jsonHeaders(), body: JSON.stringify({ description: 'contract' }) });
    assert.equal(patched.body.description, 'contract');
    assert.match((await answer('POST', `/v1/webhook-endpoints/${id}/rotate-secret`, { headers: auth() })).body.secret, /^whsec_/);
    assert.equal((await answer('GET', `/v1/webhook-endpoints/${id}/deliveries?limit=5`, { headers: auth() })).status, 200);
    assert.equal((await answer('POST', `/v1/webhook-endpoints/${id}/deliveries/${randomUUID()}/redeliver`, { headers: auth() })).status, 404);
    assert.equal(
      (await answer('POST', '/v1/webhook-endpoints', { headers: jsonHeaders(), body: JSON.stringify({ url: hook, events: ['task.nope'] }) })).status,
      400,
    );
    assert.equal((await answer('DELETE', `/v1/webhook-endpoints/${id}`, { headers: auth() })).status, 204);
    assert.equal((await answer('GET', `/v1/webhook-endpoints/${id}`, { headers: auth() })).status, 404);
  });

  test('400, 401, 402, 404, 413, 415 and 422 problems', async () => {
    const body = JSON.stringify(defaultRequest);
    assert.equal((await answer('POST', '/v1/tasks', { headers: jsonHeaders(), body })).status, 400, 'no Idempotency-Key');
    assert.equal((await answer('POST', '/v1/tasks', { headers: jsonHeaders('contract-bad'), body: '{"model":"minimax/video-01","extra":1}' })).status, 400);
    assert.equal((await answer('POST', '/v1/tasks', { headers: jsonHeaders('contract-json'), body: '{"model":' })).status, 400);
    assert.equal((await answer('GET', '/v1/tasks?limit=0', { headers: auth() })).status, 400);
    assert.equal((await answer('GET', '/v1/tasks/%ff%fe', { headers: auth() })).status, 400);
    const unauthorized = await answer('GET', '/v1/tasks', {});
    assert.equal(unauthorized.status, 401);
    assert.equal((await answer('POST', '/v1/tasks', { headers: { 'content-type': 'application/json', 'idempotency-key': 'k' }, body })).status, 401);
    const poor = await createTestTenant(e.tdb.database, e.config, '0');
    assert.equal((await answer('POST', '/v1/tasks', { headers: jsonHeaders('contract-poor', poor.apiKey), body })).status, 402);
    assert.equal((await answer('GET', `/v1/tasks/${randomUUID()}`, { headers: auth() })).status, 404);
    assert.equal((await answer('GET', '/v1/tasks/not-a-uuid', { headers: auth() })).status, 404);
    assert.equal(
      (await answer('POST', '/v1/tasks', { headers: jsonHeaders('contract-big'), body: JSON.stringify({ ...defaultRequest, prompt: 'x'.repeat(300_000) }) }))
        .status,
      413,
    );
    assert.equal(
      (await answer('POST', '/v1/tasks', { headers: { ...auth(), 'content-type': 'text/plain', 'idempotency-key': 'contract-text' }, body })).status,
      415,
    );
    assert.equal(
      (await answer('POST', '/v1/tasks', { headers: jsonHeaders('contract-1'), body: JSON.stringify({ ...defaultRequest, prompt: 'another' }) })).status,
      422,
    );
  });

  test("429 with Retry-After on create, read and cancel past the tenant's rate", async () => {
    const t = await createTestTenant(e.tdb.database, e.config, '100');
    const burst = async (send: () => Promise<{ status: number }>) => {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await send()).status);
      return statuses;
    };
    const creates = await burst(() =>
      answer('POST', '/v1/tasks', {
        api: limited.baseUrl,
        headers: jsonHeaders(`contract-rl-${randomUUID()}`, t.apiKey),
        body: JSON.stringify(defaultRequest),
      }),
    );
    assert.ok(creates.includes(429), creates.join(','));
    const reads = await burst(() => answer('GET', '/v1/tasks', { api: limited.baseUrl, headers: auth(t.apiKey) }));
    assert.ok(reads.includes(429), reads.join(','));
    const cancels = await burst(() => answer('POST', `/v1/tasks/${randomUUID()}/cancel`, { api: limited.baseUrl, headers: auth(t.apiKey) }));
    assert.ok(cancels.includes(429), cancels.join(','));
  });

  test('503 with Retry-After in MAINTENANCE: creates, reads, cancels and /readyz', async () => {
    await mode('MAINTENANCE');
    try {
      assert.equal((await answer('POST', '/v1/tasks', { headers: jsonHeaders('contract-maint'), body: JSON.stringify(defaultRequest) })).status, 503);
      assert.equal((await answer('GET', '/v1/tasks', { headers: auth() })).status, 503);
      assert.equal((await answer('GET', `/v1/tasks/${succeeded.task_id}`, { headers: auth() })).status, 503);
      assert.equal((await answer('POST', `/v1/tasks/${succeeded.task_id}/cancel`, { headers: auth() })).status, 503);
      assert.equal((await answer('GET', '/readyz')).status, 503);
    } finally {
      await mode('NORMAL');
    }
  });

  test('callbacks: 200 stored and duplicate, 202 spooled, 400, 401, 404', async () => {
    const attempt = succeeded.attempts[0];
    const token = createCallbackTokens(e.config.CALLBACK_TOKEN_SECRET).tokenFor(attempt.attempt_id);
    const url = `/v1/callbacks/replicate/${token}`;
    const signed = (status: string) => {
      const now = new Date();
      const body = JSON.stringify({
        id: attempt.provider_job_id,
        version: 'minimax/video-01',
        input: { prompt: 'x' },
        output: null,
        error: null,
        logs: '',
        status,
        created_at: now.toISOString(),
        started_at: now.toISOString(),
        completed_at: null,
        webhook: `${e.config.PUBLIC_BASE_URL}${url}`,
        metrics: {},
      });
      const id = `msg_${randomUUID()}`;
      const signature = new Webhook(e.config.PROVIDER_REPLICATE_WEBHOOK_SECRET).sign(id, now, body);
      return {
        body,
        headers: {
          'content-type': 'application/json',
          'webhook-id': id,
          'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
          'webhook-signature': signature,
        },
      };
    };
    const first = signed('processing');
    const stored = await answer('POST', url, first);
    assert.deepEqual(stored.body, { received: true, duplicate: false });
    assert.deepEqual((await answer('POST', url, first)).body, { received: true, duplicate: true });
    await mode('READ_ONLY');
    try {
      assert.equal((await answer('POST', url, signed('starting'))).status, 202);
    } finally {
      await mode('NORMAL');
    }
    assert.equal((await answer('POST', url, { headers: { 'content-type': 'application/json' }, body: '{}' })).status, 401);
    assert.equal((await answer('POST', '/v1/callbacks/replicate/not-a-token', { headers: { 'content-type': 'application/json' }, body: '{}' })).status, 404);
    assert.equal((await answer('POST', '/v1/callbacks/fal/%ff%fe', { headers: { 'content-type': 'application/json' }, body: '{}' })).status, 400);
  });

  test('an answer the document does not declare is reported (so the checks above can fail)', () => {
    const headers = new Headers({ 'content-type': 'application/json' });
    assert.match(validator.check({ method: 'GET', path: '/healthz' }, { status: 418, headers, text: '{}' }).join(), /418 is not declared/);
    assert.match(validator.check({ method: 'GET', path: '/healthz' }, { status: 200, headers, text: '{"status":"ok","extra":1}' }).join(), /additional/);
    const problem = new Headers({ 'content-type': 'application/problem+json' });
    const body = JSON.stringify({ type: 'https://docs.vidorch.dev/problems/rate-limited', title: 't', status: 429 });
    assert.match(validator.check({ method: 'POST', path: '/v1/tasks' }, { status: 429, headers: problem, text: body }).join(), /Retry-After is required/);
    assert.match(
      validator.check({ method: 'POST', path: '/v1/tasks' }, { status: 202, headers: problem, text: '{}' }).join(),
      /content type application\/problem\+json is not declared/,
    );
  });
});
