// Evidence of a job decides against "never created" (db/job-evidence.ts, docs/design.md §5): a proof
// of absence and an operator's "not-submitted" are refused while the inbox holds anything that
// carries the attempt's token, so a second paid job never follows a job we have heard of. A task
// parked in MANUAL_REVIEW still applies what arrives: a job found binds the attempt.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { asc, eq, inArray } from 'drizzle-orm';
import { createTask } from '../support/deps';
import { recordProviderEvent } from '../../db/inbox';
import { generationTask, taskAttempt } from '../../db/schema';
import { provingAbsence, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  // Kling's lookup miss proves nothing (docs/providers.md "Proof of absence"): here it stands in for a provider whose miss would.
  w = await startActivityWorld({
    config: { UNKNOWN_PROOF_DELAY_MS: '0', SUBMIT_SEND_WINDOW_MS: '100' },
    deps: (d) => ({ ...d, providerHealth: () => ({}), providers: { ...d.providers, kling: provingAbsence(d.providers['kling']!) } }),
  });
});
after(() => w?.close());
beforeEach(async () => {
  w.sim.sim.clearFaults();
  // Earlier tests' open attempts would hold Kling's few bulkhead slots.
  await w.tdb.database.db
    .update(taskAttempt)
    .set({ submit_state: 'FAILED' })
    .where(inArray(taskAttempt.submit_state, ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN']));
});

const attemptsOf = (taskId: string) => w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)).orderBy(asc(taskAttempt.attempt_no));
const statusOf = async (taskId: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId)))[0]!.status;

let seq = 0;
/** A Kling task whose submit answered 500 after sending: SUBMIT_UNKNOWN, and the provider created nothing. */
async function unknownKlingTask(): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `evidence-${seq}-${Date.now()}`,
    body: { model: 'kling-v2-master', prompt: `evidence ${seq}`, duration_seconds: 5, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await w.run('dispatchTask', taskId);
  await w.run('prepareAttempt', taskId);
  w.sim.sim.setFaults({ providers: ['kling'], submit: 'error_5xx_before_accept' });
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
  w.sim.sim.clearFaults();
  // Nothing concludes "never sent" before the claim's send-by moment (docs/decisions/0063).
  await new Promise((r) => setTimeout(r, 150));
  const [attempt] = await attemptsOf(taskId);
  return { taskId, attemptId: attempt!.attempt_id };
}

/** A callback that reached the inbox for the attempt's token (a job the lookup does not show). */
const callbackFor = (taskId: string, attemptId: string, opts: { processed?: boolean } = {}) =>
  recordProviderEvent(w.tdb.database.db, {
    provider: 'kling',
    job: {
      jobId: `k-${attemptId.slice(0, 8)}`,
      state: 'queued',
      rawStatus: 'submitted',
      updatedAt: new Date(),
      outputUrl: null,
      error: null,
      correlationToken: attemptId,
      metrics: null,
    },
    providerEventId: null,
    source: 'callback',
    attemptId,
    taskId,
    receivedRegion: w.config.REGION,
    signatureValid: true,
    raw: { late: true },
    ...(opts.processed ? { processError: 'stale: older than the last applied provider event' } : {}),
  });

const refusedAsInvalid = (pattern: RegExp) => (err: unknown) =>
  err instanceof ApplicationFailure && err.type === 'InvalidState' && err.nonRetryable && pattern.test(err.message);

describe('evidence of a job refuses "never created"', () => {
  test('control: a lookup miss with no evidence proves absence (the task may dispatch a new attempt)', async () => {
    const { taskId } = await unknownKlingTask();
    assert.equal((await w.run('pollProvider', taskId)).result, 'absent');
    assert.equal(await statusOf(taskId), 'DISPATCHING');
  });

  test('a proof of absence is refused while the inbox holds a callback carrying the attempt token', async () => {
    const { taskId, attemptId } = await unknownKlingTask();
    await callbackFor(taskId, attemptId);
    assert.equal((await w.run('pollProvider', taskId)).result, 'not-found');
    const [attempt] = await attemptsOf(taskId);
    assert.equal(attempt!.submit_state, 'SUBMIT_UNKNOWN', 'not REJECTED');
    assert.equal(await statusOf(taskId), 'SUBMIT_UNKNOWN');
  });

  test('"not-submitted" is refused while an inbox row (even one already processed) carries the attempt token', async () => {
    const { taskId, attemptId } = await unknownKlingTask();
    await w.run('escalateTask', taskId, 'test: park');
    await callbackFor(taskId, attemptId, { processed: true });
    await assert.rejects(
      w.run('resolveReview', taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'console shows nothing' }),
      refusedAsInvalid(/inbox holds a callback for job k-/),
    );
    const [attempt] = await attemptsOf(taskId);
    assert.equal(attempt!.submit_state, 'SUBMIT_UNKNOWN');
    assert.equal(await statusOf(taskId), 'MANUAL_REVIEW');
  });

  test('control: "not-submitted" without evidence is applied', async () => {
    const { taskId } = await unknownKlingTask();
    await w.run('escalateTask', taskId, 'test: park');
    const facts = await w.run('resolveReview', taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'console shows nothing' });
    assert.equal(facts.status, 'DISPATCHING');
  });
});

describe('MANUAL_REVIEW keeps applying evidence', () => {
  test('a callback that arrives after the task parked binds the job and moves the task on', async () => {
    const { taskId, attemptId } = await unknownKlingTask();
    await w.run('escalateTask', taskId, 'test: park');
    await callbackFor(taskId, attemptId);
    const facts = await w.run('applyInbox', taskId);
    assert.equal(facts.status, 'SUBMITTED');
    const [attempt] = await attemptsOf(taskId);
    assert.equal(attempt!.provider_job_id, `k-${attemptId.slice(0, 8)}`);
    assert.equal(attempt!.submit_state, 'SUBMITTED');
  });

  test('evidence that says nothing new (the job state already known) leaves a parked task with the operator', async () => {
    const { taskId, attemptId } = await unknownKlingTask();
    await callbackFor(taskId, attemptId);
    assert.equal((await w.run('applyInbox', taskId)).status, 'SUBMITTED');
    await w.run('escalateTask', taskId, 'test: park with the job known');
    const again = await recordProviderEvent(w.tdb.database.db, {
      provider: 'kling',
      job: {
        jobId: `k-${attemptId.slice(0, 8)}`,
        state: 'queued',
        rawStatus: 'submitted',
        updatedAt: new Date(),
        outputUrl: null,
        error: null,
        correlationToken: attemptId,
        metrics: null,
      },
      providerEventId: null,
      source: 'poll',
      attemptId,
      taskId,
      receivedRegion: w.config.REGION,
      signatureValid: true,
      raw: { again: true },
    });
    assert.ok(again);
    assert.equal((await w.run('applyInbox', taskId)).status, 'MANUAL_REVIEW');
  });
});
