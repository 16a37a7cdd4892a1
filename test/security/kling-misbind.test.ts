// Attack: Kling's callbacks are unsigned, so the API re-reads the posted task id from Kling.
// A tenant could post their own job's id to a victim's callback URL: the re-read job is real,
// but it is the tenant's (its external_task_id is their attempt id). It must not be bound (the
// victim would be wedged on a job that is not theirs, the unique job index failing every retry);
// and a job id other than the one already bound must not even cost a Kling read.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { buildProviders } from '../../config/services';
import { eventually } from '../support/stack';
import { startCallbackWorld, type CallbackWorld } from './support';

let w: CallbackWorld;
before(async () => {
  w = await startCallbackWorld();
});
after(() => w?.close());

/** A real Kling job submitted for `attemptId` (through the simulator, as our submit step would). */
async function klingJob(attemptId: string): Promise<string> {
  const out = await buildProviders(w.config)['kling']!.submit({
    attemptId,
    model: 'kling-v2-master',
    input: { prompt: 'mine', duration: 5 },
    webhookUrl: 'http://127.0.0.1:9/unused',
  });
  assert.equal(out.kind, 'accepted');
  return out.kind === 'accepted' ? out.job.jobId : '';
}

const reads = (jobId: string) => w.providerReads.filter((r) => r === `GET /kling/v1/videos/text2video/${jobId}`).length;

test("a tenant's own Kling job posted to a victim's callback URL is not bound: 409 after the re-read, nothing stored", async () => {
  const victim = await w.attempt('kling');
  const attacker = await w.attempt('kling');
  const theirJob = await klingJob(attacker.attemptId);
  for (const body of [{ task_id: theirJob }, { task_id: theirJob, task_info: { external_task_id: victim.attemptId } }]) {
    const res = await w.post(`/v1/callbacks/kling/${victim.token}`, JSON.stringify(body));
    assert.equal(res.status, 409, JSON.stringify(res.body));
  }
  assert.equal(reads(theirJob), 2, 'each decided by the authenticated re-read');
  assert.equal(await w.inboxRows(), 0);
  assert.equal((await w.attemptRow(victim.attemptId)).provider_job_id, null);

  // The same job at its own attempt's URL is taken: the refusal above is the correlation check.
  const own = await w.post(`/v1/callbacks/kling/${attacker.token}`, JSON.stringify({ task_id: theirJob }));
  assert.equal(own.status, 200, JSON.stringify(own.body));
  await eventually(async () => ((await w.inboxRows()) === 1 ? true : undefined), 5_000);
});

test("a job id other than the bound one, or one the body says is someone else's, is refused without a Kling read", async () => {
  const victim = await w.attempt('kling', { jobId: 'victim-job' });
  const before = w.providerReads.length;
  const res = await w.post(`/v1/callbacks/kling/${victim.token}`, JSON.stringify({ task_id: 'another-job' }));
  assert.equal(res.status, 409, JSON.stringify(res.body));
  const unbound = await w.attempt('kling');
  const lie = await w.post(`/v1/callbacks/kling/${unbound.token}`, JSON.stringify({ task_id: 'x', task_info: { external_task_id: victim.attemptId } }));
  assert.equal(lie.status, 409, JSON.stringify(lie.body));
  assert.equal(w.providerReads.length, before, 'no provider read');
  assert.equal(await w.inboxRows(), 1, "only the first test's own-URL row");
});
