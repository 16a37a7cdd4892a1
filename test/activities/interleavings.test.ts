// Forced interleavings of the workflow's steps, run as activities (MockActivityEnvironment)
// against real Postgres and the provider simulator. Each test arranges one race explicitly, so
// it happens every time, and checks the facts afterwards.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { asc, eq } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { createTask } from '../support/deps';
import { recordProviderEvent } from '../../db/inbox';
import { callbackInbox, creditLedger, generationTask, taskAttempt, taskTransition } from '../../db/schema';
import { buildProviders } from '../../config/services';
import type { ProviderAdapter, ProviderJob, ProviderJobState } from '../../providers/types';
import { freshActivities, runActivity, startActivityWorld, type ActivityWorld } from '../support/activities';
import { eventually } from '../support/stack';

let w: ActivityWorld;
before(async () => {
  w = await startActivityWorld();
});
after(async () => w?.close());
beforeEach(() => w.sim.sim.clearFaults());

/** Runs one activity as the worker would, with its own activity context. */
const run: ActivityWorld['run'] = (name, ...args) => w.run(name, ...args);

let seq = 0;
/** A task created through the API's service, dispatched and with attempt 1 prepared. */
async function preparedTask(): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `il-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `race ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await run('dispatchTask', taskId);
  const facts = await run('prepareAttempt', taskId);
  assert.equal(facts.status, 'SUBMITTING');
  return { taskId, attemptId: facts.activeAttemptId! };
}

async function submittedTask() {
  const t = await preparedTask();
  const r = await run('submitAttempt', t.taskId);
  assert.equal(r.facts.status, 'SUBMITTED');
  const [attempt] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, t.attemptId));
  return { ...t, jobId: attempt!.provider_job_id! };
}

const job = (jobId: string, state: ProviderJobState, at: string, extra: Partial<ProviderJob> = {}): ProviderJob => ({
  jobId,
  state,
  rawStatus: state === 'running' ? 'processing' : state === 'queued' ? 'starting' : state,
  updatedAt: new Date(at),
  outputUrl: state === 'succeeded' ? `${w.sim.baseUrl}/replicate/files/${jobId}/output.mp4` : null,
  error: null,
  correlationToken: null,
  metrics: null,
  ...extra,
});

async function inbox(taskId: string, attemptId: string, j: ProviderJob, source: 'callback' | 'poll', eventId: string | null = null) {
  return recordProviderEvent(w.tdb.database.db, {
    provider: 'replicate',
    job: j,
    providerEventId: eventId,
    source,
    attemptId,
    taskId,
    receivedRegion: w.config.REGION,
    signatureValid: true,
    raw: { status: j.rawStatus },
  });
}

const transitionsOf = async (taskId: string) =>
  (await w.tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(asc(taskTransition.to_version))).map(
    (t) => t.to_status,
  );
const taskOf = async (taskId: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId)))[0]!;

describe('submit: the provider is called at most once per attempt', () => {
  test('a retried submit after a crash mid-call never calls the provider again: the outcome is recorded as unknown', async () => {
    const { taskId, attemptId } = await preparedTask();
    // An earlier execution claimed the attempt and died before recording anything.
    await w.tdb.database.db.update(taskAttempt).set({ submit_state: 'SUBMITTING', submit_started_at: new Date() }).where(eq(taskAttempt.attempt_id, attemptId));
    const r = await run('submitAttempt', taskId);
    assert.equal(r.facts.status, 'SUBMIT_UNKNOWN');
    assert.equal(r.facts.attemptState, 'SUBMIT_UNKNOWN');
    assert.equal(w.sim.jobsFor(attemptId), 0, 'the provider was not called by the retry');
  });

  test('an execution cancelled mid-call (heartbeat timeout) leaves the attempt SUBMITTING; its retry records unknown without a second call', async () => {
    const { taskId, attemptId } = await preparedTask();
    w.sim.sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 1500 });
    const env = new MockActivityEnvironment();
    const first = env.run(w.activities.submitAttempt, taskId);
    // Mid-call: the provider has the request (and created the job) and has not answered yet.
    await eventually(() => Promise.resolve(w.sim.jobsFor(attemptId) === 1 ? true : undefined), 10_000, 20);
    env.cancel('TIMED_OUT');
    await first.catch(() => undefined);
    const r = await run('submitAttempt', taskId);
    assert.equal(r.facts.status, 'SUBMIT_UNKNOWN');
    await new Promise((r2) => setTimeout(r2, 1500));
    assert.equal(w.sim.jobsFor(attemptId), 1, 'exactly one provider job: the one the cancelled call created');
  });

  test('two workers executing the same submit at once call the provider once and end SUBMITTED', async () => {
    const { taskId, attemptId } = await preparedTask();
    w.sim.sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 500 });
    await Promise.all([run('submitAttempt', taskId), run('submitAttempt', taskId)]);
    assert.equal(w.sim.jobsFor(attemptId), 1);
    const [attempt] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
    assert.equal(attempt?.submit_state, 'SUBMITTED');
    assert.ok(attempt?.provider_job_id);
    assert.equal((await taskOf(taskId)).status, 'SUBMITTED');
  });

  test('a cancel recorded before the call cancels the task, releases the credits, and the provider is never called', async () => {
    const { taskId, attemptId } = await preparedTask();
    const t = await cancelTask(w.tdb.database.db, w.token, w.tenantId, taskId);
    assert.equal(t.status, 'SUBMITTING', 'recorded, not yet decided');
    const r = await run('submitAttempt', taskId);
    assert.equal(r.facts.status, 'CANCELLED');
    assert.equal(w.sim.jobsFor(attemptId), 0);
    const ledger = await w.tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId));
    assert.deepEqual(Object.fromEntries(ledger.map((l) => [l.entry_type, l.amount])), { RESERVE: '4.500000', SETTLE: '0.000000', RELEASE: '4.500000' });
  });
});

describe('callbacks and polls share one path', () => {
  for (const order of ['callback first', 'poll first'] as const) {
    test(`a callback and a poll of the same success applied at once (${order}) make one transition`, async () => {
      const { taskId, attemptId, jobId } = await submittedTask();
      const succeeded = job(jobId, 'succeeded', '2026-01-01T00:00:02Z');
      if (order === 'callback first') {
        await inbox(taskId, attemptId, succeeded, 'callback', `evt-${jobId}`);
        await inbox(taskId, attemptId, succeeded, 'poll');
      } else {
        await inbox(taskId, attemptId, succeeded, 'poll');
        await inbox(taskId, attemptId, succeeded, 'callback', `evt-${jobId}`);
      }
      await Promise.all([run('applyInbox', taskId), run('applyInbox', taskId)]);
      const path = await transitionsOf(taskId);
      assert.equal(path.filter((s) => s === 'PROVIDER_SUCCEEDED').length, 1);
      const rows = await w.tdb.database.db.select().from(callbackInbox).where(eq(callbackInbox.task_id, taskId));
      assert.ok(rows.every((r) => r.processed_at !== null));
    });
  }

  test('a late "processing" after "succeeded" changes nothing', async () => {
    const { taskId, attemptId, jobId } = await submittedTask();
    await inbox(taskId, attemptId, job(jobId, 'succeeded', '2026-01-01T00:00:05Z'), 'callback', `s-${jobId}`);
    await run('applyInbox', taskId);
    await inbox(taskId, attemptId, job(jobId, 'running', '2026-01-01T00:00:03Z'), 'callback', `p-${jobId}`);
    const facts = await run('applyInbox', taskId);
    assert.equal(facts.status, 'PROVIDER_SUCCEEDED');
    const [late] = await w.tdb.database.db
      .select()
      .from(callbackInbox)
      .where(eq(callbackInbox.provider_event_id, `p-${jobId}`));
    assert.match(late?.process_error ?? '', /stale/);
  });

  test("out-of-order callbacks are applied in the provider's order", async () => {
    const { taskId, attemptId, jobId } = await submittedTask();
    await inbox(taskId, attemptId, job(jobId, 'succeeded', '2026-01-01T00:00:09Z'), 'callback', `b-${jobId}`);
    await inbox(taskId, attemptId, job(jobId, 'running', '2026-01-01T00:00:04Z'), 'callback', `a-${jobId}`);
    await run('applyInbox', taskId);
    assert.deepEqual((await transitionsOf(taskId)).slice(-2), ['RUNNING', 'PROVIDER_SUCCEEDED']);
  });

  test('a callback that arrives before the submit is recorded binds the job and is applied on the next pass', async () => {
    const { taskId, attemptId } = await preparedTask();
    await inbox(taskId, attemptId, job('early-job-1', 'running', '2026-01-01T00:00:01Z'), 'callback', 'early-1');
    const facts = await run('applyInbox', taskId);
    assert.equal(facts.status, 'RUNNING');
    const [attempt] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
    assert.equal(attempt?.provider_job_id, 'early-job-1');
  });

  test("an event for a job that is not the attempt's job is refused", async () => {
    const { taskId, attemptId } = await submittedTask();
    await inbox(taskId, attemptId, job('someone-elses-job', 'succeeded', '2026-01-01T00:00:01Z'), 'callback', 'foreign-1');
    const facts = await run('applyInbox', taskId);
    assert.equal(facts.status, 'SUBMITTED');
  });
});

describe('cancel against provider success: the state machine decides', () => {
  test('success that races a cancel wins: the task goes on to rescue the output', async () => {
    const { taskId, attemptId, jobId } = await submittedTask();
    assert.equal((await cancelTask(w.tdb.database.db, w.token, w.tenantId, taskId)).status, 'CANCEL_REQUESTED');
    await inbox(taskId, attemptId, job(jobId, 'succeeded', '2026-01-01T00:00:02Z'), 'callback', `w-${jobId}`);
    assert.equal((await run('applyInbox', taskId)).status, 'PROVIDER_SUCCEEDED');
  });

  test('cancel while running: the provider cancel is sent, its "canceled" ends the task CANCELLED and, being billed by the provider, charged', async () => {
    const { taskId, jobId } = await submittedTask();
    await cancelTask(w.tdb.database.db, w.token, w.tenantId, taskId);
    assert.deepEqual(await run('requestProviderCancel', taskId), { sent: true });
    await run('pollProvider', taskId);
    const facts = await run('applyInbox', taskId);
    assert.equal(facts.status, 'CANCELLED');
    const ledger = await w.tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId));
    assert.deepEqual(Object.fromEntries(ledger.map((l) => [l.entry_type, l.amount])), { RESERVE: '4.500000', SETTLE: '4.500000', RELEASE: '0.000000' });
    assert.ok(jobId);
  });

  test('a job the provider no longer knows while cancel-requested ends CANCELLED charged 0, even where the provider bills a cancel', async () => {
    const { taskId } = await submittedTask();
    await cancelTask(w.tdb.database.db, w.token, w.tenantId, taskId);
    assert.equal((await taskOf(taskId)).status, 'CANCEL_REQUESTED');
    // Replicate bills `canceled` (docs/providers.md), but a 404 is no state it reported.
    const replicate = buildProviders(w.config)['replicate']!;
    const gone: ProviderAdapter = Object.create(replicate) as ProviderAdapter;
    gone.getJob = () => Promise.reject(Object.assign(new Error('replicate get prediction: not found'), { name: 'ProviderNotFound' }));
    const acts = freshActivities(w, { replicate: gone });
    assert.deepEqual(await runActivity(acts, 'pollProvider', taskId), { result: 'recorded' });
    assert.equal((await runActivity(acts, 'applyInbox', taskId)).status, 'CANCELLED');
    const task = await taskOf(taskId);
    const ledger = await w.tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId));
    assert.deepEqual(
      { settled: task.settled_amount, ledger: Object.fromEntries(ledger.map((l) => [l.entry_type, l.amount])) },
      { settled: '0.000000', ledger: { RESERVE: '4.500000', SETTLE: '0.000000', RELEASE: '4.500000' } },
    );
  });

  test('a cancel-requested task parked in MANUAL_REVIEW whose provider then reports "canceled" ends CANCELLED, charged as the provider bills it', async () => {
    const { taskId } = await submittedTask();
    await cancelTask(w.tdb.database.db, w.token, w.tenantId, taskId);
    assert.deepEqual(await run('requestProviderCancel', taskId), { sent: true });
    // The reads after the cancel failed until their bound parked the task (activities/provider-reads.ts).
    await run('escalateTask', taskId, 'test: reads failing while cancelling');
    assert.equal((await taskOf(taskId)).status, 'MANUAL_REVIEW');
    await eventually(
      async () => {
        await run('pollProvider', taskId);
        return (await run('applyInbox', taskId)).status === 'MANUAL_REVIEW' ? undefined : true;
      },
      10_000,
      200,
    );
    const task = await taskOf(taskId);
    const ledger = await w.tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId));
    // Replicate bills `canceled` (docs/billing.md "CANCELLED after submit").
    assert.deepEqual(
      { status: task.status, failure: task.failure_code, ledger: Object.fromEntries(ledger.map((l) => [l.entry_type, l.amount])) },
      { status: 'CANCELLED', failure: null, ledger: { RESERVE: '4.500000', SETTLE: '4.500000', RELEASE: '0.000000' } },
    );
    assert.deepEqual((await transitionsOf(taskId)).slice(-3), ['CANCEL_REQUESTED', 'MANUAL_REVIEW', 'CANCELLED']);
  });

  test('a cancel while the submit outcome is unknown is honoured once the job is known', async () => {
    const { taskId, attemptId } = await preparedTask();
    await w.tdb.database.db.update(taskAttempt).set({ submit_state: 'SUBMITTING' }).where(eq(taskAttempt.attempt_id, attemptId));
    await run('submitAttempt', taskId); // → SUBMIT_UNKNOWN
    assert.equal((await cancelTask(w.tdb.database.db, w.token, w.tenantId, taskId)).status, 'SUBMIT_UNKNOWN');
    await inbox(taskId, attemptId, job('late-bound-1', 'running', '2026-01-01T00:00:01Z'), 'callback', 'late-bound-evt');
    assert.equal((await run('applyInbox', taskId)).status, 'CANCEL_REQUESTED');
  });
});
