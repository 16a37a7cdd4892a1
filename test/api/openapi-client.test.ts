// The generated contract files and the registry's extension points (docs/api.md): the committed
// openapi.json and client types are what `npm run openapi` renders now; a webhook event lands in
// OpenAPI's top-level `webhooks` and a text/event-stream answer is declared and checked event by
// event — shown with test-only contracts (the real events are the webhook and stream routes').
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import express from 'express';
import openapiTS, { astToString, type OpenAPI3 } from 'openapi-typescript';
import { z } from 'zod';
import { createVidorchClient, type VidorchClient } from '../../api/client';
import { defineRoute, defineWebhook, mountRoute, openApiDocument, sse, sseEvent, standardWebhookHeaders } from '../../api/contract';
import { problemAnswers } from '../../api/problem';
import { CONTRACT_FILES, renderContractFiles } from '../../scripts/openapi-files';
import { contractValidator, type OpenApiDoc } from '../support/contract';

test('the committed openapi.json and api/client/schema.d.ts are current (else run `npm run openapi`)', async () => {
  const now = await renderContractFiles();
  assert.equal(await fs.readFile(CONTRACT_FILES.document, 'utf8'), now.document, 'openapi.json is stale: run `npm run openapi`');
  assert.equal(await fs.readFile(CONTRACT_FILES.types, 'utf8'), now.types, 'api/client/schema.d.ts is stale: run `npm run openapi`');
});

// Test-only contracts: a stream of ticks, and a webhook event carrying one.
const tick = z.object({ n: z.int(), at: z.iso.datetime() });
const tickStream = defineRoute({
  method: 'get',
  path: '/v1/ticks/:id/events',
  operationId: 'streamTicks',
  summary: 'Ticks as Server-Sent Events',
  tags: ['example'],
  auth: 'bearer',
  request: { params: z.object({ id: z.string() }) },
  responses: {
    200: { description: 'The stream', content: sse(sseEvent(tick, { event: z.literal('tick') })) },
    ...problemAnswers([401, 429], { bearer: true }),
  },
});
const tickWebhook = defineWebhook({
  event: 'example.tick',
  operationId: 'onExampleTick',
  summary: 'A tick happened',
  headers: standardWebhookHeaders,
  body: z.object({ type: z.literal('example.tick'), data: tick }),
  responses: { 200: { description: 'Received' } },
});
const doc = openApiDocument({ serverUrl: 'http://127.0.0.1', version: '0', routes: [tickStream], webhooks: [tickWebhook] }) as unknown as OpenApiDoc &
  Record<string, any>;

test('a webhook contract is rendered under `webhooks`, typed by openapi-typescript, and payloads validate against it', async () => {
  const op = doc.webhooks?.['example.tick']?.['post'] as any;
  assert.equal(op.operationId, 'onExampleTick');
  assert.deepEqual(op.security, []);
  assert.deepEqual(
    op.parameters.map((p: { name: string; in: string }) => `${p.in}:${p.name}`),
    ['header:webhook-id', 'header:webhook-timestamp', 'header:webhook-signature'],
  );
  const types = astToString(await openapiTS(doc as unknown as OpenAPI3));
  assert.match(types, /export interface webhooks \{\s+"example\.tick"/);
  const v = contractValidator(doc);
  assert.deepEqual(v.webhookPayload('example.tick', { type: 'example.tick', data: { n: 1, at: new Date().toISOString() } }), []);
  assert.notDeepEqual(v.webhookPayload('example.tick', { type: 'example.tick', data: { n: 'one' } }), []);
});

test('a text/event-stream answer is declared, served through mountRoute, and a real stream validates event by event', async () => {
  assert.ok(doc.paths['/v1/ticks/{id}/events']?.['get']?.responses['200']?.content?.['text/event-stream']);
  const app = express();
  const router = express.Router();
  let good = true;
  mountRoute(router, '/v1', tickStream, (req, res) => {
    tickStream.request.params.parse(req.params);
    res.status(200).type('text/event-stream');
    res.write(': heartbeat\n\n');
    for (let n = 1; n <= 3; n++) res.write(`id: ${n}\nevent: tick\ndata: ${JSON.stringify({ n: good ? n : String(n), at: new Date().toISOString() })}\n\n`);
    res.end();
  });
  app.use('/v1', router);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  try {
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const v = contractValidator(doc);
    const read = async () => {
      const res = await fetch(`${base}/v1/ticks/a/events`);
      return v.check({ method: 'GET', path: '/v1/ticks/a/events' }, { status: res.status, headers: res.headers, text: await res.text() });
    };
    assert.deepEqual(await read(), []);
    good = false;
    assert.match((await read()).join(), /event 0: \/data\/n must be integer/);
  } finally {
    await new Promise((r) => server.close(r));
  }
});

test('mountRoute refuses a contract whose path is not under the router it is mounted on', () => {
  assert.throws(() => mountRoute(express.Router(), '/v2', tickStream, (_req, res) => res.end()), /not under \/v2/);
  assert.throws(() => openApiDocument({ serverUrl: 'x', version: '0', routes: [tickStream, tickStream], webhooks: [] }), /duplicate operationId/);
});

// Compile-time checks of the generated client (`npm run check` runs tsc over this file): a path,
// a parameter or a body the document does not have does not compile. Never called.
function clientTypeChecks(c: VidorchClient = createVidorchClient({ baseUrl: 'http://127.0.0.1' })) {
  // @ts-expect-error: no such route
  void c.GET('/v1/nope');
  // @ts-expect-error: the Idempotency-Key header is required
  void c.POST('/v1/tasks', { body: { model: 'm', prompt: 'p', duration_seconds: 2, resolution: '480p' } });
  void c.POST('/v1/tasks', {
    params: { header: { 'Idempotency-Key': 'k' } },
    // @ts-expect-error: not a resolution of the catalog
    body: { model: 'm', prompt: 'p', duration_seconds: 2, resolution: '4k' },
  });
  void c.GET('/v1/tasks/{id}', { params: { path: { id: 'x' } } });
  return async () => {
    const { data, error } = await c.POST('/v1/tasks', {
      params: { header: { 'Idempotency-Key': 'k' } },
      body: { model: 'm', prompt: 'p', duration_seconds: 2, resolution: '480p' },
    });
    if (error) return error.title satisfies string; // a Problem
    return data.task_id satisfies string;
  };
}
void clientTypeChecks;
