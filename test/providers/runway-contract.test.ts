// Runway's contract: every request our adapter can send (each Runway model of the catalog with
// every resolution, duration, image and prompt the catalog admits; the task read; the cancel)
// matches the published request shapes (test/providers/fixtures/runway-api.ts), and the official
// @runwayml/sdk, pointed at the simulator, is accepted and parses every answer.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import RunwayML, { BadRequestError, NotFoundError } from '@runwayml/sdk';
import { createRunwayAdapter } from '../../providers/runway';
import { SIM_RUNWAY_DEFAULTS } from '../../providers/simulator/runway';
import { contractProblems, headerProblems, recordingFetch, standIn, type RecordedRequest } from './fixtures/contract';
import { RUNWAY_ENDPOINTS, RUNWAY_HEADERS } from './fixtures/runway-api';
import { startHarness, submitEveryAdmitted, waitFor, type Harness } from './harness';

let h: Harness;
before(async () => {
  h = await startHarness();
});
after(() => h.close());

const problems = (r: RecordedRequest) => [...contractProblems(RUNWAY_ENDPOINTS, '', r), ...headerProblems(RUNWAY_HEADERS, r)];

test('every request the Runway adapter can send matches the documented request shapes (paths, methods, required fields, enums)', async () => {
  const calls: RecordedRequest[] = [];
  let status = 'RUNNING';
  const runway = standIn((method) =>
    method === 'POST'
      ? { status: 200, body: { id: 'task-1' } }
      : method === 'DELETE'
        ? { status: 204 }
        : { status: 200, body: { id: 'task-1', status, createdAt: new Date().toISOString() } },
  );
  const adapter = createRunwayAdapter({
    baseUrl: 'https://api.dev.runwayml.com',
    apiSecret: 'key_contract',
    timeoutMs: 1_000,
    fetch: recordingFetch(calls, runway),
  });
  await submitEveryAdmitted(adapter, 'runway');
  await adapter.getJob('task-1');
  await adapter.cancel('task-1');
  status = 'SUCCEEDED';
  const before = calls.length;
  await adapter.cancel('task-1');
  assert.deepEqual(
    calls.slice(before).map((c) => c.method),
    ['GET'],
    'a finished task is never DELETEd (that would delete its output)',
  );
  for (const c of calls) assert.deepEqual(problems(c), [], `${c.method} ${c.url.pathname} ${String(JSON.stringify(c.body)).slice(0, 160)}`);
  assert.ok(calls.some((c) => c.url.pathname === '/v1/text_to_video') && calls.some((c) => c.url.pathname === '/v1/image_to_video'));
});

test('the fixture is not vacuous: an undocumented model, ratio or endpoint is a finding', () => {
  const post = (path: string, body: unknown): RecordedRequest => ({
    method: 'POST',
    url: new URL(`https://api.dev.runwayml.com${path}`),
    headers: { authorization: 'Bearer k', 'x-runway-version': '2024-11-06' },
    body,
  });
  assert.equal(problems(post('/v1/text_to_video', { model: 'gen4_turbo', promptText: 'p', ratio: '1280:720', duration: 5 })).length, 1);
  assert.equal(problems(post('/v1/image_to_video', { model: 'gen4_turbo', promptImage: 'i', ratio: '854:480', duration: 5 })).length, 1);
  assert.equal(problems(post('/v1/tasks', {})).length, 1);
  assert.equal(problems({ ...post('/v1/image_to_video', { model: 'gen4_turbo', promptImage: 'i', ratio: '1280:720' }), headers: {} }).length, 2);
});

const sdk = () => new RunwayML({ apiKey: SIM_RUNWAY_DEFAULTS.apiSecret, baseURL: `${h.sim.baseUrl()}/runway`, maxRetries: 0 });

test('@runwayml/sdk against the simulator: imageToVideo and textToVideo create, tasks.retrieve reaches SUCCEEDED, tasks.delete, then 404', async () => {
  const runway = sdk();
  const image = await runway.imageToVideo.create({
    model: 'gen4_turbo',
    promptImage: 'https://example.com/a.png',
    promptText: 'a heron',
    ratio: '1280:720',
    duration: 5,
  });
  assert.equal(typeof image.estimatedCost.credits, 'number');
  const text = await runway.textToVideo.create({ model: 'gen4.5', promptText: 'a heron', ratio: '1280:720', duration: 5 });
  for (const id of [image.id, text.id]) {
    const done = await waitFor('SUCCEEDED', async () => {
      const t = await runway.tasks.retrieve(id);
      return t.status === 'SUCCEEDED' ? t : undefined;
    });
    assert.equal(done.output.length, 1);
    assert.equal(typeof done.cost.credits, 'number');
  }
  await runway.tasks.delete(image.id);
  await assert.rejects(runway.tasks.retrieve(image.id), (e: unknown) => e instanceof NotFoundError);
});

test('@runwayml/sdk against the simulator: a body outside the documented matrix is a BadRequestError, and nothing is created', async () => {
  const runway = sdk();
  const jobs = h.sim.stats().jobs_by_provider.runway;
  const undocumented = { model: 'gen4_turbo', promptText: 'a heron', ratio: '1280:720', duration: 5 } as unknown as Parameters<
    typeof runway.textToVideo.create
  >[0];
  await assert.rejects(runway.textToVideo.create(undocumented), (e: unknown) => e instanceof BadRequestError);
  assert.equal(h.sim.stats().jobs_by_provider.runway, jobs);
});
