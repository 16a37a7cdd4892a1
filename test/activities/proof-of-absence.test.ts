// pollProvider and the proof-of-absence contract (docs/providers.md "Proof of absence"), with
// MockActivityEnvironment against real Postgres and the strict provider simulator: a Replicate
// miss proves nothing however long it lasts, pollProvider trusts "not-found-proven" only from an
// adapter that declares an exact lookup, and a Kling miss (of either shape) proves nothing either:
// the same create goes again with the same key, and Kling's answer settles it
// (activities/resend-unknown.ts).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import type { TaskActivities } from '../../activities';
import { createTask } from '../support/deps';
import { buildProviders } from '../../config/services';
import { setMode } from '../../db/modes';
import { generationTask, taskAttempt } from '../../db/schema';
import type { FaultConfig } from '../../providers/simulator/faults';
import type { ProviderAdapter } from '../../providers/types';
import { freshActivities, runActivity as run, startActivityWorld, type ActivityWorld } from '../support/activities';
import { eventually } from '../support/stack';

let w: ActivityWorld;
before(async () => {
  // No proof delay at all, and a short send window (a claim's send-by moment is evidence until it passes).
  w = await startActivityWorld({
    config: {
      UNKNOWN_PROOF_DELAY_MS: '0',
      SUBMIT_SEND_WINDOW_MS: '1000',
      UNKNOWN_OUTCOME_DEADLINE_MS: '600000',
      UNKNOWN_RESEND_LIMIT: '2',
      BULKHEAD_RAMP_MS: '0',
    },
  });
});
after(async () => w?.close());

const activities = (override: Record<string, ProviderAdapter> = {}): TaskActivities => freshActivities(w, override);

let seq = 0;
/** A Replicate task whose submit failed with a 5xx before the provider created anything: unknown. */
async function unknownTask(acts: TaskActivities): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `absence-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `absence ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await run(acts, 'dispatchTask', taskId);
  const prepared = await run(acts, 'prepareAttempt', taskId);
  w.sim.sim.setFaults({ submit: 'error_5xx_before_accept', submit_fault_count: 1 });
  const r = await run(acts, 'submitAttempt', taskId);
  w.sim.sim.clearFaults();
  assert.equal(r.facts.status, 'SUBMIT_UNKNOWN');
  await pastSendBy(prepared.activeAttemptId!);
  return { taskId, attemptId: prepared.activeAttemptId! };
}

/** Until the claim's send-by moment has passed: before it, the claimed create may still leave, and nothing is proved absent. */
async function pastSendBy(attemptId: string): Promise<void> {
  const [a] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
  const waitMs = (a?.send_by?.getTime() ?? 0) + 50 - Date.now();
  if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
}

const stateOf = async (taskId: string, attemptId: string) => {
  const [t] = await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
  const [a] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
  return [t!.status, a!.submit_state];
};

test('a Replicate miss proves nothing: with no proof delay the attempt stays SUBMIT_UNKNOWN poll after poll, and no second job is bought', async () => {
  const acts = activities();
  const { taskId, attemptId } = await unknownTask(acts);
  for (let i = 0; i < 3; i++) assert.equal((await run(acts, 'pollProvider', taskId)).result, 'not-found');
  assert.deepEqual(await stateOf(taskId, attemptId), ['SUBMIT_UNKNOWN', 'SUBMIT_UNKNOWN']);
  assert.equal(w.sim.jobsFor(attemptId), 0);
});

test('pollProvider trusts "not-found-proven" only from an adapter that declares an exact lookup', async () => {
  const real = buildProviders(w.config)['replicate']!;
  const lying: ProviderAdapter = { ...real, findByCorrelationToken: () => Promise.resolve({ kind: 'not-found-proven', evidence: 'says so' }) };
  const acts = activities({ replicate: lying });
  const { taskId, attemptId } = await unknownTask(acts);
  assert.equal((await run(acts, 'pollProvider', taskId)).result, 'not-found');
  assert.deepEqual(await stateOf(taskId, attemptId), ['SUBMIT_UNKNOWN', 'SUBMIT_UNKNOWN']);
  // The same answer from an adapter that declares 'exact-lookup' is proof.
  const exact: ProviderAdapter = { ...lying, capabilities: { ...real.capabilities, absenceProof: 'exact-lookup' } };
  assert.equal((await run(activities({ replicate: exact }), 'pollProvider', taskId)).result, 'absent');
  assert.deepEqual(await stateOf(taskId, attemptId), ['DISPATCHING', 'REJECTED']);
});

test('a proof of absence that comes back after an operator set READ_ONLY during the lookup writes nothing: the poll pauses, and proves it once the mode allows', async () => {
  const real = buildProviders(w.config)['replicate']!;
  const scope = w.config.FENCE_SCOPE;
  const exact: ProviderAdapter = {
    ...real,
    capabilities: { ...real.capabilities, absenceProof: 'exact-lookup' },
    async findByCorrelationToken() {
      // The operator narrows the mode while the provider is being asked (the epoch stays).
      await setMode(w.tdb.database.db, { scope, mode: 'READ_ONLY', actor: 'operator:test', reason: 'pitr repair' });
      return { kind: 'not-found-proven', evidence: 'the documented not-found answer' };
    },
  };
  const acts = activities({ replicate: exact });
  const { taskId, attemptId } = await unknownTask(activities());
  try {
    await assert.rejects(run(acts, 'pollProvider', taskId), /READ_ONLY/);
    assert.deepEqual(await stateOf(taskId, attemptId), ['SUBMIT_UNKNOWN', 'SUBMIT_UNKNOWN'], 'nothing written under READ_ONLY');
  } finally {
    await setMode(w.tdb.database.db, { scope, mode: 'NORMAL', actor: 'operator:test', reason: 'done' });
  }
  const lying: ProviderAdapter = { ...exact, findByCorrelationToken: () => Promise.resolve({ kind: 'not-found-proven', evidence: 'says so' }) };
  assert.equal((await run(activities({ replicate: lying }), 'pollProvider', taskId)).result, 'absent');
  assert.deepEqual(await stateOf(taskId, attemptId), ['DISPATCHING', 'REJECTED']);
});

/** A Kling task whose submit met `faults` (callbacks off): unknown outcome. */
async function unknownKlingTask(acts: TaskActivities, faults: FaultConfig): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `kling-absence-${seq}-${Date.now()}`,
    body: { model: 'kling-v2-master', prompt: `kling absence ${seq}`, duration_seconds: 5, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await run(acts, 'dispatchTask', taskId);
  const prepared = await run(acts, 'prepareAttempt', taskId);
  w.sim.sim.setFaults({ providers: ['kling'], callbacks: 'off', ...faults });
  const r = await run(acts, 'submitAttempt', taskId);
  assert.equal(r.facts.status, 'SUBMIT_UNKNOWN');
  return { taskId, attemptId: prepared.activeAttemptId! };
}

const attemptRow = async (attemptId: string) => (await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId)))[0]!;

for (const shape of ['404-1203', '400-1201'] as const) {
  test(`a Kling lookup miss (${shape}) proves nothing: the same create goes again with the same key, Kling refuses it as a duplicate while its task is not readable, and the task is bound once it is: one job, one attempt`, async () => {
    const acts = activities();
    // The create makes the task and hangs; Kling serves the task only 4 s later.
    const { taskId, attemptId } = await unknownKlingTask(acts, {
      submit: 'accept_then_hang',
      submit_fault_count: 1,
      kling_visible_after_ms: 4_000,
      kling_not_found: shape,
    });
    assert.equal((await run(acts, 'pollProvider', taskId)).result, 'not-found');
    const resent = await attemptRow(attemptId);
    assert.deepEqual([resent.submit_state, resent.resends, resent.key_taken_at !== null], ['SUBMIT_UNKNOWN', 1, true]);
    assert.match(resent.last_error ?? '', /re-send 1\/2: .*duplicate of external_task_id/);
    // Once Kling said the key is taken, nothing is sent again: the lookup waits for the task.
    assert.equal((await run(acts, 'pollProvider', taskId)).result, 'not-found');
    assert.equal((await attemptRow(attemptId)).resends, 1);
    await eventually(async () => ((await run(acts, 'pollProvider', taskId)).result === 'recorded' ? true : undefined), 15_000, 500);
    // Kling has been running the task all along: bound, it is RUNNING.
    assert.equal((await run(acts, 'applyInbox', taskId)).status, 'RUNNING');
    const [attempts, task] = [await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)), await stateOf(taskId, attemptId)];
    assert.equal(attempts.length, 1, 'never a second attempt');
    assert.deepEqual(task, ['RUNNING', 'RUNNING']);
    assert.equal(w.sim.jobsFor(attemptId), 1, 'one Kling job');
    w.sim.sim.clearFaults();
  });
}

test('a re-send Kling refused as a duplicate is evidence of a job: an operator\'s "not-submitted" is refused while the task is not readable yet', async () => {
  const acts = activities();
  const { taskId, attemptId } = await unknownKlingTask(acts, { submit: 'accept_then_hang', submit_fault_count: 1, kling_visible_after_ms: 600_000 });
  assert.equal((await run(acts, 'pollProvider', taskId)).result, 'not-found');
  assert.ok((await attemptRow(attemptId)).key_taken_at);
  await run(acts, 'escalateTask', taskId, 'test: park');
  await assert.rejects(
    run(acts, 'resolveReview', taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'console shows nothing' }),
    /re-sent create .*a job with its key exists/,
  );
  await run(acts, 'resolveReview', taskId, { kind: 'fail', operator: 'ops-eve', reason: 'test cleanup' });
  assert.equal(w.sim.jobsFor(attemptId), 1);
  w.sim.sim.clearFaults();
});

test('a Kling create answered 500 before it made anything: the re-sent create makes the one job, on the same attempt with the same key', async () => {
  const acts = activities();
  const { taskId, attemptId } = await unknownKlingTask(acts, { submit: 'error_5xx_before_accept', submit_fault_count: 1 });
  assert.equal(w.sim.jobsFor(attemptId), 0);
  assert.equal((await run(acts, 'pollProvider', taskId)).result, 'recorded');
  assert.equal((await run(acts, 'applyInbox', taskId)).status, 'SUBMITTED');
  const attempts = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.deepEqual(
    attempts.map((a) => [a.attempt_id, a.resends, a.provider_job_id !== null]),
    [[attemptId, 1, true]],
  );
  assert.equal(w.sim.jobsFor(attemptId), 1);
  w.sim.sim.clearFaults();
});

test('re-sends are counted and bounded: none while the mode starts no provider work, at most one per poll pace, at most UNKNOWN_RESEND_LIMIT; an answer that proves nothing leaves the attempt unknown', async () => {
  const acts = activities();
  // Every Kling create answers 500 and makes nothing: no re-send can settle the outcome.
  const { taskId, attemptId } = await unknownKlingTask(acts, { submit: 'error_5xx_before_accept' });
  const scope = w.config.FENCE_SCOPE;
  await setMode(w.tdb.database.db, { scope, mode: 'RECONCILE_ONLY', actor: 'operator:test', reason: 'no new cost' });
  try {
    assert.equal((await run(acts, 'pollProvider', taskId)).result, 'not-found');
  } finally {
    await setMode(w.tdb.database.db, { scope, mode: 'NORMAL', actor: 'operator:test', reason: 'done' });
  }
  assert.equal((await attemptRow(attemptId)).resends, 0, 'nothing sent in RECONCILE_ONLY');
  const backdate = () =>
    w.tdb.database.db
      .update(taskAttempt)
      .set({ resent_at: new Date(Date.now() - 3_600_000) })
      .where(eq(taskAttempt.attempt_id, attemptId));
  const resendsAfterPoll = async () => {
    assert.equal((await run(acts, 'pollProvider', taskId)).result, 'not-found');
    return (await attemptRow(attemptId)).resends;
  };
  assert.equal(await resendsAfterPoll(), 1);
  assert.equal(await resendsAfterPoll(), 1, 'not again within the poll pace');
  await backdate();
  assert.equal(await resendsAfterPoll(), 2);
  await backdate();
  assert.equal(await resendsAfterPoll(), 2, 'the limit');
  const a = await attemptRow(attemptId);
  assert.deepEqual([a.submit_state, a.key_taken_at], ['SUBMIT_UNKNOWN', null]);
  assert.match(a.last_error ?? '', /re-send 2\/2 proved nothing \(unknown\)/);
  assert.equal(w.sim.jobsFor(attemptId), 0);
  w.sim.sim.clearFaults();
});
