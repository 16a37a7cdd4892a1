// Once-only, decided where the money is spent (docs/design.md §1, docs/decisions/0063): evidence of
// an earlier attempt's job stops the next attempt before it is sent, the evidence check and the
// callback ingest are serialised by the attempt row's lock, and a submit execution that stalled
// past its claim's send-by moment never sends. Forced interleavings: activities run one at a time
// (MockActivityEnvironment) against Postgres and the provider simulator.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { asc, desc, eq, inArray } from 'drizzle-orm';
import { createTask } from '../support/deps';
import { recordAttemptCallback } from '../../db/inbox';
import { jobEvidence } from '../../db/job-evidence';
import { generationTask, taskAttempt, taskTransition } from '../../db/schema';
import { eventually } from '../support/stack';
import { runActivity, startActivityWorld, type ActivityWorld } from '../support/activities';
import { createTaskActivities } from '../../activities';
import type { SubmitSwitch } from '../../activities/deps';

const SEND_WINDOW_MS = 400;
/** The stall a test switch injects into the one submit that asks it to (a synchronous pause, as a long GC). */
const stall = { nextMs: 0 };
const stallingSwitch: SubmitSwitch = {
  closedReason() {
    const ms = stall.nextMs;
    stall.nextMs = 0;
    const until = Date.now() + ms;
    while (Date.now() < until) {
      // A paused process: nothing else runs.
    }
    return null;
  },
};

let w: ActivityWorld;
before(async () => {
  w = await startActivityWorld({
    config: { SUBMIT_SEND_WINDOW_MS: String(SEND_WINDOW_MS), PROVIDER_HTTP_TIMEOUT_MS: '4000' },
    deps: (d) => ({ ...d, providerHealth: () => ({}), submitSwitch: stallingSwitch }),
  });
});
after(async () => w?.close());
beforeEach(async () => {
  w.sim.sim.clearFaults();
  stall.nextMs = 0;
  // Earlier tests' open attempts would hold the provider's few bulkhead slots.
  await db()
    .update(taskAttempt)
    .set({ submit_state: 'FAILED' })
    .where(inArray(taskAttempt.submit_state, ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN']));
});

const db = () => w.tdb.database.db;
const attemptsOf = (taskId: string) => db().select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)).orderBy(asc(taskAttempt.attempt_no));
const taskOf = async (taskId: string) => (await db().select().from(generationTask).where(eq(generationTask.task_id, taskId)))[0]!;
/** Provider jobs the simulator created for any of the task's attempts. */
const jobsOf = async (taskId: string) => (await attemptsOf(taskId)).reduce((n, a) => n + w.sim.jobsFor(a.attempt_id), 0);
/** The provider's callback for `attemptId` (its token), stored through the ingest's own statement. */
const callbackFor = (attemptId: string, state: 'queued' | 'running', rawStatus: string) =>
  recordAttemptCallback(w.tdb.database.pool, {
    provider: 'runway',
    attemptId,
    job: { jobId: `rw-${attemptId.slice(0, 8)}`, state, rawStatus, updatedAt: new Date(), outputUrl: null, error: null, correlationToken: null, metrics: null },
    providerEventId: null,
    echoesAttempt: true,
    receivedRegion: w.config.REGION,
    raw: { late: true },
  });
const sendWindowPassed = () => new Promise((r) => setTimeout(r, SEND_WINDOW_MS + 100));

let seq = 0;
async function preparedTask(model = 'gen4.5'): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const created = await createTask(db(), w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `earlier-${seq}-${Date.now()}`,
    body: { model, prompt: `earlier job ${seq}`, duration_seconds: 5, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  const facts = await w.run('dispatchAndPrepare', taskId);
  assert.equal(facts.status, 'SUBMITTING');
  return { taskId, attemptId: facts.activeAttemptId! };
}

/** The operator confirms "not submitted" for an attempt whose create in fact reached the provider: attempt 2 is prepared. */
async function wronglyConfirmedAbsent(taskId: string): Promise<string> {
  assert.equal((await w.run('escalateTask', taskId, 'test: park')).status, 'MANUAL_REVIEW');
  await sendWindowPassed();
  assert.equal((await w.run('resolveReview', taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'console shows nothing' })).status, 'DISPATCHING');
  const second = await w.run('prepareAttempt', taskId);
  assert.equal(second.status, 'SUBMITTING');
  return second.activeAttemptId!;
}

test("a stale submit's accept after attempt 2 was prepared takes the task back to its job: attempt 2 is never sent, one provider job", async () => {
  const { taskId, attemptId } = await preparedTask();
  w.sim.sim.setFaults({ providers: ['runway'], submit: 'answer_after_ms', submit_delay_ms: 2_500, submit_fault_count: 1 });
  // Execution 1 claims attempt 1 and stalls inside the provider call.
  const stale = w.run('submitAttempt', taskId);
  await eventually(async () => ((await attemptsOf(taskId))[0]?.submit_state === 'SUBMITTING' ? true : undefined), 5_000, 20);
  // Its heartbeat timed out: the retry records the outcome as unknown without calling.
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
  const second = await wronglyConfirmedAbsent(taskId);
  await stale;

  // The next submit finds nothing to send: the task follows attempt 1's job.
  const after = await w.run('submitAttempt', taskId);
  assert.equal(after.facts.status, 'SUBMITTED');
  assert.equal(after.facts.activeAttemptId, attemptId);
  const [first, set] = await attemptsOf(taskId);
  assert.equal(first!.submit_state, 'SUBMITTED');
  assert.ok(first!.provider_job_id);
  assert.equal(set!.attempt_id, second);
  assert.equal(set!.submit_state, 'CANCELLED', 'attempt 2 set aside unsent');
  assert.equal(await jobsOf(taskId), 1, 'one provider job for the task');
  const path = await db().select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(asc(taskTransition.to_version));
  assert.deepEqual(
    path.slice(-2).map((t) => `${t.from_status}>${t.to_status}:${t.source_event}`),
    ['SUBMITTING>MANUAL_REVIEW:workflow.earlier-job', 'MANUAL_REVIEW>SUBMITTED:workflow.earlier-job-bound'],
  );
});

test('attempt 1\'s callback, arriving after an operator\'s wrong "not-submitted" while attempt 2 waits to be sent, stops attempt 2: one job, the task follows it', async () => {
  const { taskId, attemptId } = await preparedTask();
  // The create reaches the provider (a job exists) but its answer never comes back.
  w.sim.sim.setFaults({ providers: ['runway'], submit: 'accept_then_hang', submit_fault_count: 1 });
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
  w.sim.sim.clearFaults();
  await wronglyConfirmedAbsent(taskId);
  assert.equal(await jobsOf(taskId), 1);

  // The provider's callback for attempt 1 arrives (its token), while attempt 2 is PREPARED.
  const stored = await callbackFor(attemptId, 'running', 'RUNNING');
  assert.equal(stored.outcome, 'stored');

  const after = await w.run('submitAttempt', taskId);
  assert.equal(after.facts.activeAttemptId, attemptId, 'the task is back on attempt 1');
  assert.equal(after.facts.status, 'RUNNING', 'its job, applied from the callback');
  assert.equal(await jobsOf(taskId), 1, 'attempt 2 never reached the provider');
  const [first, second] = await attemptsOf(taskId);
  assert.equal(first!.provider_job_id, `rw-${attemptId.slice(0, 8)}`);
  assert.equal(second!.submit_state, 'CANCELLED');
});

test('the evidence check and the callback ingest are serialised by the attempt row: a callback racing "never sent" is stored after it and stops the next attempt', async () => {
  const { taskId, attemptId } = await preparedTask();
  w.sim.sim.setFaults({ providers: ['runway'], submit: 'accept_then_hang', submit_fault_count: 1 });
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
  w.sim.sim.clearFaults();
  await sendWindowPassed();

  // A conclusion of "never sent" in progress: evidence looked at, none found, the REJECTED write still to come.
  let ingest: Promise<unknown> = Promise.resolve();
  let committed = false;
  let ingestedDuringCheck = false;
  await db().transaction(async (tx) => {
    assert.equal(await jobEvidence(tx, attemptId), null);
    // The barrier: a callback for the attempt arrives on another connection now.
    ingest = callbackFor(attemptId, 'queued', 'PENDING').then((r) => {
      ingestedDuringCheck = !committed;
      return r;
    });
    await new Promise((r) => setTimeout(r, 300));
    await tx.update(taskAttempt).set({ submit_state: 'REJECTED' }).where(eq(taskAttempt.attempt_id, attemptId));
    await tx
      .update(generationTask)
      .set({ status: 'DISPATCHING', status_version: (await taskOf(taskId)).status_version + 1 })
      .where(eq(generationTask.task_id, taskId));
  });
  committed = true;
  await ingest;
  assert.equal(ingestedDuringCheck, false, 'the callback waited for the transaction that looked at the evidence');

  // The next attempt is not prepared: the task goes back to attempt 1 and its job.
  const facts = await w.run('prepareAttempt', taskId);
  assert.equal(facts.activeAttemptId, attemptId);
  assert.equal(facts.status, 'SUBMITTED');
  assert.equal((await attemptsOf(taskId)).length, 1, 'no attempt 2');
  assert.equal(await jobsOf(taskId), 1);
});

test("a submit that stalled past its claim's send-by moment never sends: the claim goes back to PREPARED and the next execution sends once", async () => {
  const { taskId, attemptId } = await preparedTask();
  // The process pauses between the claim's commit and the call (the switch is asked right there).
  let calls = 0;
  const counted: SubmitSwitch = {
    closedReason() {
      calls += 1;
      // The first question is before the claim, the second between the claim and the call.
      if (calls === 2) stall.nextMs = SEND_WINDOW_MS + 200;
      return stallingSwitch.closedReason();
    },
  };
  const stalled = createTaskActivities({ ...w.deps, submitSwitch: counted });
  await assert.rejects(runActivity(stalled, 'submitAttempt', taskId), /send-by moment .* passed before the provider was called; nothing was sent/);
  assert.equal(w.sim.jobsFor(attemptId), 0, 'nothing reached the provider');
  assert.equal(w.deps.providerGuard.snapshots()['runway']?.refusals['send_by/lapsed'], 1, 'counted for /metrics');
  const [claimed] = await attemptsOf(taskId);
  assert.equal(claimed!.submit_state, 'PREPARED');
  assert.equal(claimed!.send_by, null);

  const r = await w.run('submitAttempt', taskId);
  assert.equal(r.facts.status, 'SUBMITTED');
  assert.equal(w.sim.jobsFor(attemptId), 1);
});

test('a job heard of for an attempt the task moved past, after the next attempt was sent, parks the task with both named: never set aside quietly', async () => {
  const { taskId, attemptId } = await preparedTask();
  w.sim.sim.setFaults({ providers: ['runway'], submit: 'accept_then_hang', submit_fault_count: 1 });
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
  w.sim.sim.clearFaults();
  const second = await wronglyConfirmedAbsent(taskId);
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMITTED', 'attempt 2 was sent');

  const jobId = `rw-${attemptId.slice(0, 8)}`;
  await callbackFor(attemptId, 'running', 'RUNNING');
  const facts = await w.run('applyInbox', taskId);
  assert.equal(facts.status, 'MANUAL_REVIEW');
  assert.equal(facts.activeAttemptId, second, 'the task stays on the attempt it sent');
  const [parked] = await db().select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(desc(taskTransition.to_version)).limit(1);
  assert.equal(parked!.source_event, 'workflow.earlier-job');
  assert.equal((parked!.detail as Record<string, unknown>)['provider_job_id'], jobId);
  assert.equal((parked!.detail as Record<string, unknown>)['earlier_attempt_id'], attemptId);
});

test('"not-submitted" is refused until the claim\'s send-by moment has passed: the claimed create may still leave', async () => {
  const { taskId } = await preparedTask();
  w.sim.sim.setFaults({ providers: ['runway'], submit: 'error_5xx_before_accept', submit_fault_count: 1 });
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
  await w.run('escalateTask', taskId, 'test: park');
  await assert.rejects(
    w.run('resolveReview', taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'at once' }),
    /the claimed create may still leave until/,
  );
  await sendWindowPassed();
  assert.equal((await w.run('resolveReview', taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'after the window' })).status, 'DISPATCHING');
});

test("a stale submit's accept for a task that ended meanwhile binds the job on its attempt and throws nothing (the job id is kept)", async () => {
  const { taskId, attemptId } = await preparedTask();
  w.sim.sim.setFaults({ providers: ['runway'], submit: 'answer_after_ms', submit_delay_ms: 3_000, submit_fault_count: 1 });
  const stale = w.run('submitAttempt', taskId);
  await eventually(async () => ((await attemptsOf(taskId))[0]?.submit_state === 'SUBMITTING' ? true : undefined), 5_000, 20);
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
  assert.equal((await w.run('escalateTask', taskId, 'test: park')).status, 'MANUAL_REVIEW');
  await sendWindowPassed();
  assert.equal((await w.run('resolveReview', taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'console shows nothing' })).status, 'DISPATCHING');
  // The tenant's cancel arrives before the next attempt is prepared: the task ends CANCELLED.
  await db().update(generationTask).set({ cancel_requested_at: new Date() }).where(eq(generationTask.task_id, taskId));
  assert.equal((await w.run('prepareAttempt', taskId)).status, 'CANCELLED');

  await stale;
  const [first] = await attemptsOf(taskId);
  assert.ok(first!.provider_job_id, 'the paid job is kept on its attempt');
  assert.equal(first!.attempt_id, attemptId);
  assert.equal((await taskOf(taskId)).status, 'CANCELLED');
});

test("a stale submit's accept after the next attempt was refused by the provider takes the task back to its job: no false 'two jobs' park", async () => {
  // On fal, whose 429 on create is a throttle (Runway's is its daily cap: the attempt would wait
  // unsent); its webhooks held back, so attempt 1's job is known only from the stale accept.
  const { taskId, attemptId } = await preparedTask('fal-ai/kling-video/v2/master/text-to-video');
  w.sim.sim.setFaults({ providers: ['fal'], callbacks: 'off', submit: 'answer_after_ms', submit_delay_ms: 3_000, submit_fault_count: 1 });
  const stale = w.run('submitAttempt', taskId);
  await eventually(async () => ((await attemptsOf(taskId))[0]?.submit_state === 'SUBMITTING' ? true : undefined), 5_000, 20);
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
  const second = await wronglyConfirmedAbsent(taskId);
  // Attempt 2 is refused before acceptance (a throttle): it never created a job.
  w.sim.sim.setFaults({ providers: ['fal'], callbacks: 'off', submit: 'rate_limit', submit_fault_count: 1 });
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'DISPATCHING');
  assert.equal((await attemptsOf(taskId)).find((a) => a.attempt_id === second)?.submit_state, 'REJECTED');

  await stale;
  const task = await taskOf(taskId);
  assert.equal(task.active_attempt_id, attemptId, 'back on attempt 1');
  assert.equal(task.status, 'SUBMITTED', "following attempt 1's job");
});
