// fal's contract: every request our adapter can send (each fal model of the catalog with every
// resolution, duration, image and prompt the catalog admits; status, result, cancel) matches the
// published request shapes (test/providers/fixtures/fal-api.ts), and the official
// @fal-ai/client, pointed at the simulator, is accepted and parses every answer.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ApiError, createFalClient, ValidationError, type QueueStatus } from '@fal-ai/client';
import { createFalAdapter } from '../../providers/fal';
import { SIM_FAL_DEFAULTS } from '../../providers/simulator/fal';
import { contractProblems, headerProblems, recordingFetch, standIn, type RecordedRequest } from './fixtures/contract';
import { FAL_ENDPOINTS, FAL_HEADERS } from './fixtures/fal-api';
import { startHarness, submitEveryAdmitted, waitFor, type Harness } from './harness';

const MODEL = 'fal-ai/kling-video/v2/master/text-to-video';
let h: Harness;
before(async () => {
  h = await startHarness();
});
after(() => h.close());

const problems = (r: RecordedRequest) => [...contractProblems(FAL_ENDPOINTS, '', r), ...headerProblems(FAL_HEADERS, r)];

test('every request the fal adapter can send matches the documented request shapes (paths, methods, required fields, enums)', async () => {
  const calls: RecordedRequest[] = [];
  const fal = standIn((method, url) => {
    if (method === 'POST') return { status: 200, body: { status: 'IN_QUEUE', request_id: 'req-1', queue_position: 0 } };
    if (method === 'PUT') return { status: 202, body: { status: 'CANCELLATION_REQUESTED' } };
    if (url.pathname.endsWith('/status')) return { status: 200, body: { status: 'COMPLETED', logs: null, metrics: {} } };
    return { status: 200, body: { video: { url: 'https://v3.fal.media/files/out.mp4' } } };
  });
  const adapter = createFalAdapter({
    baseUrl: 'https://queue.fal.run',
    apiKey: 'key-id:key-secret',
    jwksUrl: 'https://rest.alpha.fal.ai/.well-known/jwks.json',
    expectedUserId: 'fal-user',
    timeoutMs: 1_000,
    fetch: recordingFetch(calls, fal),
  });
  await submitEveryAdmitted(adapter, 'fal');
  assert.ok(
    calls.every((c) => c.url.searchParams.get('fal_webhook')?.startsWith('https://api.example.com/')),
    'the webhook rides as fal_webhook',
  );
  const before = calls.length;
  await adapter.getJob('req-1', undefined, { model: MODEL });
  await adapter.cancel('req-1', undefined, { model: MODEL });
  assert.deepEqual(
    calls.slice(before).map((c) => `${c.method} ${c.url.pathname}`),
    ['GET /fal-ai/kling-video/requests/req-1/status', 'GET /fal-ai/kling-video/requests/req-1', 'PUT /fal-ai/kling-video/requests/req-1/cancel'],
  );
  for (const c of calls) assert.deepEqual(problems(c), [], `${c.method} ${c.url.pathname} ${String(JSON.stringify(c.body)).slice(0, 160)}`);
});

test('the fixture is not vacuous: an undocumented input field or value, or a sub-path on a status read, is a finding', () => {
  const r = (method: string, path: string, body?: unknown): RecordedRequest => ({
    method,
    url: new URL(`https://queue.fal.run${path}`),
    headers: { authorization: 'Key k' },
    body,
  });
  assert.equal(problems(r('POST', `/${MODEL}`, { prompt: 'p', duration: 2 })).length, 1);
  assert.equal(problems(r('POST', `/${MODEL}`, { prompt: 'p', duration: '5', resolution: '720p' })).length, 1);
  assert.equal(problems(r('GET', '/fal-ai/kling-video/v2/master/text-to-video/requests/x/status')).length, 1);
});

/** The official client, its queue.fal.run requests sent to the simulator (its documented requestMiddleware). */
const client = () =>
  createFalClient({
    credentials: SIM_FAL_DEFAULTS.apiKey,
    requestMiddleware: (req) => Promise.resolve({ ...req, url: req.url.replace('https://queue.fal.run', `${h.sim.baseUrl()}/fal`) }),
    retry: { maxRetries: 0 },
  });
const untilCompleted = (fal: ReturnType<typeof client>, requestId: string): Promise<QueueStatus> =>
  waitFor('COMPLETED', async () => {
    const s = await fal.queue.status(MODEL, { requestId, logs: true });
    return s.status === 'COMPLETED' ? s : undefined;
  });

test('@fal-ai/client against the simulator: queue.submit, status and result parse its answers; the status carries no outcome', async () => {
  const fal = client();
  const submitted = await fal.queue.submit(MODEL, { input: { prompt: 'a fox', duration: '5' }, webhookUrl: `${h.receiverUrl}/v1/callbacks/fal/sdk-1` });
  assert.equal(submitted.status, 'IN_QUEUE');
  assert.match(submitted.status_url, /\/requests\/[^/]+\/status$/);
  const done = await untilCompleted(fal, submitted.request_id);
  assert.deepEqual(Object.keys(done).sort(), ['cancel_url', 'logs', 'metrics', 'request_id', 'response_url', 'status', 'status_url']);
  const result = await fal.queue.result(MODEL, { requestId: submitted.request_id });
  assert.equal(result.requestId, submitted.request_id);
  assert.match(result.data.video.url, /output\.mp4/);
});

test("@fal-ai/client against the simulator: a failed request completes and its result raises the model's error; a cancel is accepted", async () => {
  const fal = client();
  const failed = await fal.queue.submit(MODEL, { input: { prompt: 'a fox [sim:fail]', duration: '5' } });
  await untilCompleted(fal, failed.request_id);
  await assert.rejects(fal.queue.result(MODEL, { requestId: failed.request_id }), (e: unknown) => e instanceof ValidationError && e.fieldErrors.length === 1);
  const slow = await fal.queue.submit(MODEL, { input: { prompt: 'slow [sim:gen=5000]', duration: '10' } });
  await fal.queue.cancel(MODEL, { requestId: slow.request_id });
  await untilCompleted(fal, slow.request_id);
  await assert.rejects(fal.queue.result(MODEL, { requestId: slow.request_id }), (e: unknown) => e instanceof ApiError);
});

test('@fal-ai/client against the simulator: an input outside the documented one is answered 422 naming the field, and nothing is created', async () => {
  const fal = client();
  const jobs = h.sim.stats().jobs_by_provider.fal;
  const bad = { prompt: 'a fox', duration: 2 } as unknown as { prompt: string };
  await assert.rejects(fal.queue.submit(MODEL, { input: bad }), (e: unknown) => e instanceof ValidationError && e.getFieldErrors('duration').length === 1);
  assert.equal(h.sim.stats().jobs_by_provider.fal, jobs);
});
