// Every request the fal and Runway adapters can send, checked against the providers' documented
// request shapes (test/providers/fixtures): for each catalog route of the provider, every
// resolution, duration and image choice the catalog admits is submitted through the adapter and
// the request it sends must be documented (path, method, headers, required fields, enums); reads
// and cancels likewise. Nothing runs over the network: a recording fetch answers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL_CATALOG, RESOLUTIONS, routeRefusal, type ProviderRoute } from '../../domain/catalog';
import { createFalAdapter } from '../../providers/fal';
import { createRunwayAdapter } from '../../providers/runway';
import type { ProviderAdapter } from '../../providers/types';
import { recordingFetch, requestViolations, type ApiFixture, type SentRequest } from './fixtures/api-shapes';
import { FAL_API } from './fixtures/fal-api';
import { RUNWAY_API } from './fixtures/runway-api';

const routesOf = (provider: string): ProviderRoute[] => MODEL_CATALOG.flatMap((m) => m.routes).filter((r) => r.provider === provider);

/** Every request shape the catalog admits for a route, as the submit activity builds the input. */
function admittedInputs(route: ProviderRoute): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const resolution of RESOLUTIONS) {
    for (let duration = 1; duration <= 20; duration++) {
      for (const image of [undefined, 'https://example.com/first-frame.png']) {
        for (const prompt of ['a heron', 'x'.repeat(route.maxPromptChars ?? 2000)]) {
          const req = { prompt, duration_seconds: duration, resolution, input_image_url: image };
          if (routeRefusal(route, req)) continue;
          out.push({ prompt, duration, resolution, ...(image ? { first_frame_image: image } : {}) });
        }
      }
    }
  }
  return out;
}

async function checkSubmits(provider: string, adapter: ProviderAdapter, sent: SentRequest[], fixture: ApiFixture, base: string) {
  const routes = routesOf(provider);
  assert.ok(routes.length > 0);
  for (const route of routes) {
    const inputs = admittedInputs(route);
    assert.ok(inputs.length > 0, `${route.model} admits some request`);
    for (const input of inputs) {
      sent.length = 0;
      const out = await adapter.submit({ attemptId: '00000000-0000-4000-8000-000000000001', model: route.model, input, webhookUrl: 'https://api.example.com/v1/callbacks/x/00000000-0000-4000-8000-000000000001' });
      assert.equal(out.kind, 'accepted', `${route.model} ${JSON.stringify(input).slice(0, 100)} → ${JSON.stringify(out)}`);
      assert.equal(sent.length, 1);
      assert.deepEqual(requestViolations(fixture, base, sent[0]!), [], `${route.model} ${JSON.stringify(sent[0]!.body).slice(0, 120)}`);
    }
  }
}

test('Runway: every submit the catalog admits, and every read and cancel, is a request Runway documents', async () => {
  const base = 'https://api.dev.runwayml.com';
  const sent: SentRequest[] = [];
  let status = 'RUNNING';
  const adapter = createRunwayAdapter({
    baseUrl: base,
    apiSecret: 'key_contract',
    timeoutMs: 1_000,
    fetch: recordingFetch(sent, (r) => (r.method === 'POST' ? { status: 200, body: { id: 'task-1' } } : r.method === 'DELETE' ? { status: 204 } : { status: 200, body: { id: 'task-1', status, createdAt: new Date().toISOString() } })),
  });
  await checkSubmits('runway', adapter, sent, RUNWAY_API, base);

  sent.length = 0;
  await adapter.getJob('task-1');
  await adapter.cancel('task-1');
  assert.deepEqual(sent.map((r) => `${r.method} ${r.url.pathname}`), ['GET /v1/tasks/task-1', 'GET /v1/tasks/task-1', 'DELETE /v1/tasks/task-1']);
  status = 'SUCCEEDED';
  sent.length = 0;
  await adapter.cancel('task-1');
  assert.deepEqual(sent.map((r) => r.method), ['GET'], 'a finished task is never DELETEd (that would delete its output)');
  for (const r of sent) assert.deepEqual(requestViolations(RUNWAY_API, base, r), []);
});

test('fal: every submit the catalog admits, and every status, result and cancel, is a request fal documents', async () => {
  const base = 'https://queue.fal.run';
  const sent: SentRequest[] = [];
  const adapter = createFalAdapter({
    baseUrl: base,
    apiKey: 'key-id:key-secret',
    jwksUrl: 'https://rest.alpha.fal.ai/.well-known/jwks.json',
    timeoutMs: 1_000,
    fetch: recordingFetch(sent, (r) => {
      if (r.method === 'POST') return { status: 200, body: { status: 'IN_QUEUE', request_id: 'req-1', queue_position: 0 } };
      if (r.method === 'PUT') return { status: 202, body: { status: 'CANCELLATION_REQUESTED' } };
      if (r.url.pathname.endsWith('/status')) return { status: 200, body: { status: 'COMPLETED', logs: null, metrics: {} } };
      return { status: 200, body: { video: { url: 'https://v3.fal.media/files/out.mp4' } } };
    }),
  });
  await checkSubmits('fal', adapter, sent, FAL_API, base);
  const submitted = sent[0]!;
  assert.equal(submitted.url.searchParams.get('fal_webhook')?.startsWith('https://'), true, 'the webhook rides as fal_webhook');

  sent.length = 0;
  const ref = { model: 'fal-ai/kling-video/v2/master/text-to-video' };
  await adapter.getJob('req-1', undefined, ref);
  await adapter.cancel('req-1', undefined, ref);
  assert.deepEqual(sent.map((r) => `${r.method} ${r.url.pathname}`), [
    'GET /fal-ai/kling-video/requests/req-1/status',
    'GET /fal-ai/kling-video/requests/req-1',
    'PUT /fal-ai/kling-video/requests/req-1/cancel',
  ]);
  for (const r of sent) assert.deepEqual(requestViolations(FAL_API, base, r), []);
});

test('the fixtures are not vacuous: an undocumented body or endpoint is reported', () => {
  const runway = (path: string, body: unknown, method = 'POST'): SentRequest => ({
    method,
    url: new URL(`https://api.dev.runwayml.com${path}`),
    headers: { authorization: 'Bearer k', 'x-runway-version': '2024-11-06' },
    body,
  });
  assert.deepEqual(requestViolations(RUNWAY_API, 'https://api.dev.runwayml.com', runway('/v1/text_to_video', { model: 'gen4_turbo', promptText: 'p', ratio: '1280:720' })), [
    'text_to_video: no documented body for {"model":"gen4_turbo","promptText":"p","ratio":"1280:720"}',
  ]);
  assert.deepEqual(requestViolations(RUNWAY_API, 'https://api.dev.runwayml.com', runway('/v1/image_to_video', { model: 'gen4_turbo', promptImage: 'i', ratio: '854:480', duration: 5 })), [
    'image_to_video: ratio "854:480" is not one of 1280:720, 720:1280, 1104:832, 832:1104, 960:960, 1584:672',
  ]);
  assert.equal(requestViolations(RUNWAY_API, 'https://api.dev.runwayml.com', runway('/v1/tasks', undefined, 'GET')).length, 1);
  const fal: SentRequest = { method: 'POST', url: new URL('https://queue.fal.run/fal-ai/kling-video/v2/master/text-to-video'), headers: { authorization: 'Key k' }, body: { prompt: 'p', duration: 2, resolution: '720p' } };
  assert.deepEqual(requestViolations(FAL_API, 'https://queue.fal.run', fal), [
    'submit: duration is not a string',
    'submit: duration 2 is not one of 5, 10',
    'submit: resolution is not a documented field',
  ]);
});
