// The simulator against clients no one here wrote: the official @fal-ai/client and
// @runwayml/sdk, pointed at it, must be answered in shapes they parse, and their requests must
// be accepted (docs/providers.md "Documented evidence"). A simulator that drifted from the
// providers' contracts fails here before it misleads the adapter tests.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ApiError, createFalClient, ValidationError, type QueueStatus } from '@fal-ai/client';
import RunwayML, { BadRequestError, NotFoundError } from '@runwayml/sdk';
import { SIM_FAL_DEFAULTS } from '../../providers/simulator/fal';
import { SIM_RUNWAY_DEFAULTS } from '../../providers/simulator/runway';
import { startHarness, waitFor, type Harness } from './harness';

const FAL_MODEL = 'fal-ai/kling-video/v2/master/text-to-video';
let h: Harness;
before(async () => {
  h = await startHarness();
});
after(() => h.close());

/** The official fal client, its queue.fal.run requests rewritten to the simulator (its documented requestMiddleware). */
const falClient = () =>
  createFalClient({
    credentials: SIM_FAL_DEFAULTS.apiKey,
    requestMiddleware: (req) => Promise.resolve({ ...req, url: req.url.replace('https://queue.fal.run', `${h.sim.baseUrl()}/fal`) }),
    retry: { maxRetries: 0 },
  });

const untilCompleted = (fal: ReturnType<typeof falClient>, requestId: string): Promise<QueueStatus> =>
  waitFor('COMPLETED', async () => {
    const s = await fal.queue.status(FAL_MODEL, { requestId, logs: true });
    return s.status === 'COMPLETED' ? s : undefined;
  });

test('@fal-ai/client: queue.submit, status and result parse the simulator\'s answers; the status carries no outcome', async () => {
  const fal = falClient();
  const submitted = await fal.queue.submit(FAL_MODEL, { input: { prompt: 'a fox', duration: '5' }, webhookUrl: `${h.receiverUrl}/v1/callbacks/fal/sdk-1` });
  assert.equal(submitted.status, 'IN_QUEUE');
  assert.ok(submitted.request_id);
  assert.match(submitted.status_url, /\/requests\/[^/]+\/status$/);
  const done = await untilCompleted(fal, submitted.request_id);
  assert.deepEqual(Object.keys(done).sort(), ['cancel_url', 'logs', 'metrics', 'request_id', 'response_url', 'status', 'status_url']);
  const result = await fal.queue.result(FAL_MODEL, { requestId: submitted.request_id });
  assert.equal(result.requestId, submitted.request_id);
  assert.match(result.data.video.url, /output\.mp4/);
});

test('@fal-ai/client: a failed request completes, and its result raises the model\'s error; a cancel is accepted', async () => {
  const fal = falClient();
  const failed = await fal.queue.submit(FAL_MODEL, { input: { prompt: 'a fox [sim:fail]', duration: '5' } });
  await untilCompleted(fal, failed.request_id);
  await assert.rejects(fal.queue.result(FAL_MODEL, { requestId: failed.request_id }), (e: unknown) => e instanceof ValidationError && e.fieldErrors.length === 1);
  const slow = await fal.queue.submit(FAL_MODEL, { input: { prompt: 'slow [sim:gen=5000]', duration: '10' } });
  await fal.queue.cancel(FAL_MODEL, { requestId: slow.request_id });
  await untilCompleted(fal, slow.request_id);
  await assert.rejects(fal.queue.result(FAL_MODEL, { requestId: slow.request_id }), (e: unknown) => e instanceof ApiError);
});

test('@fal-ai/client: an input outside the documented one is answered 422 as fal does', async () => {
  const fal = falClient();
  const bad = { prompt: 'a fox', duration: 2 } as unknown as { prompt: string };
  await assert.rejects(fal.queue.submit(FAL_MODEL, { input: bad }), (e: unknown) => e instanceof ValidationError && e.getFieldErrors('duration').length === 1);
});

const runwayClient = () => new RunwayML({ apiKey: SIM_RUNWAY_DEFAULTS.apiSecret, baseURL: `${h.sim.baseUrl()}/runway`, maxRetries: 0 });

test('@runwayml/sdk: imageToVideo and textToVideo create, tasks.retrieve reaches SUCCEEDED, tasks.delete then 404', async () => {
  const runway = runwayClient();
  const image = await runway.imageToVideo.create({ model: 'gen4_turbo', promptImage: 'https://example.com/a.png', promptText: 'a heron', ratio: '1280:720', duration: 5 });
  assert.ok(image.id);
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

test('@runwayml/sdk: a body outside the documented matrix is a BadRequestError', async () => {
  const runway = runwayClient();
  const undocumented = { model: 'gen4_turbo', promptText: 'a heron', ratio: '1280:720', duration: 5 } as unknown as Parameters<typeof runway.textToVideo.create>[0];
  await assert.rejects(runway.textToVideo.create(undocumented), (e: unknown) => e instanceof BadRequestError);
});
