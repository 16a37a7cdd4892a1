// MANUAL_REVIEW through the real workflow: a parked task keeps applying provider evidence (a
// webhook that arrives after it parked moves it on, with no second job), and every operator
// resolution works for every provider, or fails at once with its reason — never an Update
// that retries forever.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { eq } from 'drizzle-orm';
import { buildProviders } from '../../config/services';
import { recordProviderEvent } from '../../db/inbox';
import { taskAttempt } from '../../db/schema';
import { reconcileApply } from '../../ops/reconcile';
import type { SimProvider } from '../../providers/simulator/faults';
import { startE2E, type E2E } from '../support/e2e';

let e: E2E;
before(async () => {
  // Lookups fail (list faults) or do not exist (fal, Runway): the deadline parks the task.
  e = await startE2E('review-evidence', { PROVIDER_HTTP_TIMEOUT_MS: '700', UNKNOWN_PROOF_DELAY_MS: '1000', UNKNOWN_OUTCOME_DEADLINE_MS: '1500' });
});
after(async () => {
  await e?.close();
});
beforeEach(() => e.sim.sim.clearFaults());

/** A request each provider documents (fal's Kling takes 5 or 10 s; gen4_turbo is image to video). */
const REQUESTS: Record<SimProvider, Record<string, unknown>> = {
  replicate: { model: 'minimax/video-01', duration_seconds: 6, resolution: '720p' },
  fal: { model: 'fal-ai/kling-video/v2/master/text-to-video', duration_seconds: 5, resolution: '720p' },
  runway: { model: 'gen4_turbo', duration_seconds: 2, resolution: '720p', input_image_url: 'https://example.com/first-frame.png' },
  kling: { model: 'kling-v2-master', duration_seconds: 5, resolution: '720p' },
};

async function attemptOf(taskId: string) {
  const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  return attempt!;
}

/**
 * A task on `provider` whose submit hung after the job was created, parked in MANUAL_REVIEW: the
 * lookup fails until the unknown-outcome deadline. Replicate is looked up by its listing; Kling by
 * a get of the external id (docs/providers.md "Proof of absence"), so its status reads fail too.
 */
async function parked(provider: SimProvider, key: string, faults: { callback_delay_ms?: number } = {}) {
  e.sim.sim.setFaults({
    providers: [provider],
    submit: 'accept_then_hang',
    submit_fault_count: 1,
    list: 'error_5xx',
    ...(provider === 'kling' ? { status: 'error_5xx' as const } : {}),
    ...(faults.callback_delay_ms ? { callback_delay_ms: faults.callback_delay_ms } : { callbacks: 'off' as const }),
  });
  const taskId = await e.createTask(`${key}-${Date.now()}`, { ...REQUESTS[provider], prompt: `review ${key}` });
  // The operator's Update is validated against the workflow's facts, which follow Postgres.
  await e.waitForWorkflowStatus(taskId, 'MANUAL_REVIEW');
  return { taskId, attempt: await attemptOf(taskId) };
}

const causeChain = (err: unknown): string => {
  const parts: string[] = [];
  for (let c = err as Error | undefined; c; c = c.cause as Error | undefined) parts.push(c.message);
  return parts.join(' ← ');
};

/** The Update, or a failure when it has not returned in `ms` (the old code retried it forever). */
const withinMs = <T>(ms: number, p: Promise<T>): Promise<T> =>
  Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`the Update did not return in ${ms} ms`)), ms).unref())]);

describe('a parked task keeps applying evidence', () => {
  test('a webhook delivered after the task parked in MANUAL_REVIEW is applied: the task succeeds with one provider job', async () => {
    const { taskId, attempt } = await parked('replicate', 'late-webhook', { callback_delay_ms: 4_000 });
    assert.equal(attempt.provider_job_id, null, 'parked with no job known');
    const task = await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
    assert.equal(task.status, 'SUCCEEDED');
    assert.equal(e.sim.jobsFor(attempt.attempt_id), 1);
    const attempts = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    assert.equal(attempts.length, 1, 'no second attempt');
    assert.ok(attempts[0]!.provider_job_id, 'the late webhook bound the job');
  });

  test('ops reconcile wakes a task in MANUAL_REVIEW: evidence that reached the inbox without a wake is applied', async () => {
    const { taskId, attempt } = await parked('replicate', 'reconcile-wakes');
    e.sim.sim.clearFaults();
    // The job's final state reached the inbox, but nothing woke the workflow (an API that died
    // between the insert and the signal).
    const [jobId] = e.sim.jobIdsFor(attempt.attempt_id);
    const job = await buildProviders(e.config)['replicate']!.getJob(jobId!);
    await recordProviderEvent(e.tdb.database.db, {
      provider: 'replicate',
      job,
      providerEventId: null,
      source: 'callback',
      attemptId: attempt.attempt_id,
      taskId,
      receivedRegion: e.config.REGION,
      signatureValid: true,
      raw: { unsignalled: true },
    });
    const { applied } = await reconcileApply(e.tdb.database.db, e.api.facade, { actor: 'operator:test', reason: 'review sweep' });
    assert.ok(applied.workflowsWoken >= 1);
    await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
    assert.equal(e.sim.jobsFor(attempt.attempt_id), 1);
  });
});

describe('every review action works for every provider', () => {
  for (const provider of ['replicate', 'fal', 'runway', 'kling'] as const) {
    test(`bind-job on ${provider}: the operator's job id binds the attempt and the task succeeds with one job`, async () => {
      const { taskId, attempt } = await parked(provider, `bind-${provider}`);
      e.sim.sim.clearFaults();
      const [jobId] = e.sim.jobIdsFor(attempt.attempt_id);
      assert.ok(jobId, 'the operator finds the job in the provider console');
      const facts = await withinMs(
        20_000,
        e.api.facade.resolveReview(taskId, { kind: 'bind-job', operator: 'ops-carol', reason: 'job found in provider console', providerJobId: jobId }),
      );
      assert.equal(facts.status, 'SUBMITTED');
      await e.waitForStatus(taskId, 'SUCCEEDED');
      assert.equal(e.sim.jobsFor(attempt.attempt_id), 1);
    });
  }

  test('a bind-job whose provider read fails is refused at once with the reason, not retried forever', async () => {
    const { taskId, attempt } = await parked('fal', 'bind-read-fails');
    const [jobId] = e.sim.jobIdsFor(attempt.attempt_id);
    e.sim.sim.setFaults({ providers: ['fal'], status: 'error_5xx' });
    await assert.rejects(
      withinMs(
        20_000,
        e.api.facade.resolveReview(taskId, { kind: 'bind-job', operator: 'ops-carol', reason: 'job found in provider console', providerJobId: jobId! }),
      ),
      (err: unknown) => err instanceof WorkflowUpdateFailedError && /could not read job .* try the resolution again/.test(causeChain(err)),
    );
    e.sim.sim.clearFaults();
    // The workflow is not stuck behind the failed Update: the next resolution goes through.
    await withinMs(20_000, e.api.facade.resolveReview(taskId, { kind: 'fail', operator: 'ops-carol', reason: 'test cleanup' }));
    await e.waitForStatus(taskId, 'FAILED');
  });
});
