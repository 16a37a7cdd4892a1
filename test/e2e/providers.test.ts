// Every provider protocol end to end: the same workflow and activities, driven only by each
// adapter's capabilities (fal: ED25519-signed callbacks with keys from a JWKS; Runway: polling
// only; Kling: an unsigned callback that triggers an authenticated re-fetch).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { callbackInbox, taskAttempt } from '../../db/schema';
import { startE2E, type E2E } from '../support/e2e';

let e: E2E;
before(async () => {
  e = await startE2E('providers', {}, { generationMs: 500 });
});
after(async () => {
  await e?.close();
});

const cases = [
  // fal's Kling text-to-video takes 5 or 10 seconds (docs/providers.md "Documented evidence: fal").
  { provider: 'fal', model: 'fal-ai/kling-video/v2/master/text-to-video', resolution: '720p', expectCallbacks: true, duration: 5 },
  // gen4_turbo is image to video only (docs/providers.md "Documented evidence: Runway").
  { provider: 'runway', model: 'gen4_turbo', resolution: '720p', expectCallbacks: false, image: 'https://example.com/first-frame.png' },
  // Kling 2.0 Master takes 5 or 10 seconds at 720p (docs/providers.md "Model input schemas").
  { provider: 'kling', model: 'kling-v2-master', resolution: '720p', expectCallbacks: true, duration: 5 },
];

for (const c of cases) {
  test(`${c.provider}: a task reaches SUCCEEDED through the provider's own protocol, with one provider job`, async () => {
    const image = 'image' in c ? { input_image_url: c.image } : {};
    const taskId = await e.createTask(`prov-${c.provider}`, {
      model: c.model,
      prompt: `a ${c.provider} fox`,
      duration_seconds: 'duration' in c ? c.duration : 2,
      resolution: c.resolution,
      ...image,
    });
    const task = await e.waitForStatus(taskId, 'SUCCEEDED', 90_000);
    assert.equal(task.provider, c.provider);
    assert.equal(task.output.media.videoCodec, 'h264');
    const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    assert.equal(attempt?.provider, c.provider);
    assert.equal(e.sim.jobsFor(attempt.attempt_id), 1);
    const inbox = await e.tdb.database.db.select().from(callbackInbox).where(eq(callbackInbox.task_id, taskId));
    const sources = new Set(inbox.map((r) => r.source));
    if (c.expectCallbacks) assert.ok(sources.has('callback'), `callbacks stored: ${[...sources].join(',')}`);
    else assert.ok(!sources.has('callback') && sources.has('poll'), 'polling only');
  });
}

test('a model family fails over after a proven rejection: kling answers 429, the task succeeds at fal with one job', async () => {
  e.sim.sim.setFaults({ providers: ['kling'], submit: 'rate_limit', retry_after_s: 1 });
  try {
    const taskId = await e.createTask('family-failover', {
      model: 'kling-v2',
      prompt: 'a fox that changes provider',
      duration_seconds: 5,
      resolution: '720p',
      provider: 'kling',
    });
    const task = await e.waitForStatus(taskId, 'SUCCEEDED', 90_000);
    assert.equal(task.provider, 'fal');
    const attempts = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    const byNo = attempts.sort((a, b) => a.attempt_no - b.attempt_no);
    assert.deepEqual(
      byNo.map((a) => [a.provider, a.submit_state]),
      [
        ['kling', 'REJECTED'],
        ['fal', 'SUCCEEDED'],
      ],
    );
    assert.equal(e.sim.jobsFor(byNo[0]!.attempt_id), 0);
    assert.equal(e.sim.jobsFor(byNo[1]!.attempt_id), 1);
  } finally {
    e.sim.sim.clearFaults();
  }
});
