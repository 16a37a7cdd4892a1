// What each provider job cost us is recorded on its attempt when the job's end is applied, from
// the provider's own answers (the simulator answers as each provider documents), and once: a
// repeated or later read of the finished job changes nothing (docs/decisions/0071).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { recordProviderEvent } from '../../db/inbox';
import { taskAttempt, type AttemptRow } from '../../db/schema';
import type { ProviderJob } from '../../domain/provider-job';
import { createTask } from '../support/deps';
import { eventually } from '../support/stack';
import { startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  w = await startActivityWorld({ generationMs: 1_000, config: { POLL_INITIAL_MS: '200', POLL_MAX_MS: '500' } });
});
after(async () => w?.close());

let seq = 0;
/** A task on `model` run until its provider job ended and the end was applied; its attempt row. */
async function finishedAttempt(model: string, seconds: number, prompt = 'a lighthouse at dusk'): Promise<AttemptRow> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `cost-${seq}-${Date.now()}`,
    body: { model, prompt: `${prompt} ${seq}`, duration_seconds: seconds, resolution: '720p', priority: 0 },
  });
  const id = created.task.task_id;
  await w.run('dispatchTask', id);
  await w.run('prepareAttempt', id);
  assert.equal((await w.run('submitAttempt', id)).facts.status, 'SUBMITTED');
  await eventually(
    async () => {
      await w.run('pollProvider', id);
      const status = (await w.run('applyInbox', id)).status;
      return status === 'PROVIDER_SUCCEEDED' || status === 'FAILED' ? true : undefined;
    },
    30_000,
    200,
  );
  return attemptOf(id);
}

async function attemptOf(taskId: string): Promise<AttemptRow> {
  const [a] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.ok(a);
  return a;
}

const costOf = (a: AttemptRow) => ({ amount: a.provider_cost, unit: a.provider_cost_unit, source: a.provider_cost_source });

describe('provider cost per attempt', () => {
  test("Runway: the terminal task's reported cost.credits, with the job's end", async () => {
    const a = await finishedAttempt('gen4.5', 5);
    assert.equal(a.submit_state, 'SUCCEEDED');
    // The simulator charges 5 credits a second, as its estimatedCost said.
    assert.deepEqual(costOf(a), { amount: '25.000000', unit: 'runway_credit', source: 'reported' });
    assert.ok(a.provider_cost_at);
  });

  test('Runway: a failed task reports its refund (0 credits), recorded as reported', async () => {
    const a = await finishedAttempt('gen4.5', 5, '[sim:fail] a storm');
    assert.equal(a.submit_state, 'FAILED');
    assert.deepEqual(costOf(a), { amount: '0.000000', unit: 'runway_credit', source: 'reported' });
  });

  test("fal: a COMPLETED request costs the model's published price per second × the seconds sent", async () => {
    const a = await finishedAttempt('fal-ai/kling-video/v2/master/text-to-video', 10);
    assert.deepEqual(costOf(a), { amount: '2.800000', unit: 'USD', source: 'computed' });
  });

  test('Replicate and Kling: no documented cost for these models, so unknown (never a guess)', async () => {
    const r = await finishedAttempt('minimax/video-01', 6);
    assert.deepEqual(costOf(r), { amount: null, unit: null, source: 'unknown' });
    // Replicate's run time is kept with the job's metrics, for whoever prices it later.
    assert.equal(typeof (r.provider_metrics as Record<string, unknown>)['predict_time'], 'number');
    const k = await finishedAttempt('kling-v2-master', 5);
    assert.deepEqual(costOf(k), { amount: null, unit: null, source: 'unknown' });
  });

  test('a duplicated or later read of the finished job changes the recorded cost not at all', async () => {
    const a = await finishedAttempt('gen4.5', 4);
    assert.equal(a.provider_cost, '20.000000');
    const job: ProviderJob = {
      jobId: a.provider_job_id!,
      state: 'succeeded',
      rawStatus: 'SUCCEEDED',
      updatedAt: null,
      outputUrl: a.output_url,
      error: null,
      correlationToken: null,
      metrics: { cost_credits: 999 },
    };
    for (const raw of [{ read: 1 }, { read: 2 }]) {
      const inboxId = await recordProviderEvent(w.tdb.database.db, {
        provider: 'runway',
        job,
        providerEventId: null,
        raw,
        signatureValid: true,
        receivedRegion: w.config.REGION,
        attemptId: a.attempt_id,
        taskId: a.task_id,
        source: 'poll',
      });
      assert.ok(inboxId, 'a new inbox row (not deduped away)');
      await w.run('applyInbox', a.task_id);
    }
    const again = await attemptOf(a.task_id);
    assert.deepEqual(costOf(again), costOf(a));
    assert.equal(again.provider_cost_at?.getTime(), a.provider_cost_at?.getTime());
  });
});
