// The task's one deadline, set at the API edge and checked by every step that would start
// provider work (docs/design.md §6, docs/timeouts.md): past it, or too close to it for a provider
// call to finish, the task fails with its whole reservation released and no provider is called.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { createTask } from '../support/deps';
import { creditLedger, generationTask, taskAttempt } from '../../db/schema';
import { startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  // PROVIDER_HTTP_TIMEOUT_MS is 3 s in this world: a submit needs that much time left.
  w = await startActivityWorld();
});
after(() => w?.close());
beforeEach(() => w.sim.sim.clearFaults());

let seq = 0;
async function newTask(deadlineSeconds?: number): Promise<string> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `deadline-${seq}-${Date.now()}`,
    body: {
      model: 'minimax/video-01',
      prompt: `deadline ${seq}`,
      duration_seconds: 6,
      resolution: '720p',
      priority: 0,
      ...(deadlineSeconds ? { deadline_seconds: deadlineSeconds } : {}),
    },
    defaultDeadlineSeconds: 600,
  });
  await w.run('dispatchTask', created.task.task_id);
  return created.task.task_id;
}
const taskOf = async (id: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!;
const setDeadline = (id: string, at: Date) => w.tdb.database.db.update(generationTask).set({ deadline_at: at }).where(eq(generationTask.task_id, id));
const ledgerOf = async (id: string) =>
  (await w.tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, id))).map((l) => `${l.entry_type} ${l.amount}`).sort();

describe('the task deadline', () => {
  test("is set at creation from the request, else from the server's default, on the database clock", async () => {
    const own = await taskOf(await newTask(120));
    const dflt = await taskOf(await newTask());
    const secs = (t: typeof own) => (t.deadline_at!.getTime() - t.created_at.getTime()) / 1000;
    assert.equal(Math.round(secs(own)), 120);
    assert.equal(Math.round(secs(dflt)), 600);
  });

  test('past it before an attempt is prepared: FAILED with DEADLINE_EXCEEDED, everything released, no attempt', async () => {
    const id = await newTask();
    await setDeadline(id, new Date(Date.now() - 1_000));
    const facts = await w.run('prepareAttempt', id);
    assert.equal(facts.status, 'FAILED');
    const task = await taskOf(id);
    assert.equal(task.failure_code, 'DEADLINE_EXCEEDED');
    assert.deepEqual(await ledgerOf(id), ['RELEASE 4.500000', 'RESERVE 4.500000', 'SETTLE 0.000000']);
    assert.equal((await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, id))).length, 0);
  });

  test('too close to it for the provider call to finish: the call never starts, the attempt is cancelled unsent', async () => {
    const id = await newTask();
    const facts = await w.run('prepareAttempt', id);
    assert.equal(facts.status, 'SUBMITTING');
    await setDeadline(id, new Date(Date.now() + 1_000)); // less than the 3 s a call may take
    const r = await w.run('submitAttempt', id);
    assert.equal(r.facts.status, 'FAILED');
    assert.equal((await taskOf(id)).failure_code, 'DEADLINE_EXCEEDED');
    const [attempt] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, id));
    assert.equal(attempt!.submit_state, 'CANCELLED');
    assert.equal(w.sim.jobsFor(attempt!.attempt_id), 0, 'the provider was never called');
    assert.deepEqual(await ledgerOf(id), ['RELEASE 4.500000', 'RESERVE 4.500000', 'SETTLE 0.000000']);
  });

  test('with time left, the submit goes ahead; once accepted, the deadline passing changes nothing (the job is paid for)', async () => {
    const id = await newTask(60);
    await w.run('prepareAttempt', id);
    const r = await w.run('submitAttempt', id);
    assert.equal(r.facts.status, 'SUBMITTED');
    await setDeadline(id, new Date(Date.now() - 1_000));
    const polled = await w.run('pollProvider', id);
    assert.notEqual(polled.result, 'overdue');
    assert.equal((await taskOf(id)).status, 'SUBMITTED');
  });
});
