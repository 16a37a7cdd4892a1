// A submit execution that stalls mid-call (its heartbeat timed out, a retry recorded the outcome
// as unknown, the attempt was set aside as never sent and attempt 2 was prepared) and then records
// "unknown" must not move the task: task events from an attempt apply only while that attempt is
// the active one and its own compare-and-set took effect. (A stale execution that records an
// accepted job instead takes the task back to that job: test/activities/earlier-job.test.ts.)
// Forced interleaving: activities run one at a time (MockActivityEnvironment) against Postgres and
// the simulator.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { asc, eq } from 'drizzle-orm';
import { createTask } from '../support/deps';
import { generationTask, taskAttempt, taskTransition } from '../../db/schema';
import { eventually } from '../support/stack';
import { startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  w = await startActivityWorld({ config: { PROVIDER_HTTP_TIMEOUT_MS: '4000', SUBMIT_SEND_WINDOW_MS: '300' } });
});
after(async () => w?.close());

const db = () => w.tdb.database.db;
const attemptOf = async (attemptId: string) => (await db().select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId)))[0]!;
const taskOf = async (taskId: string) => (await db().select().from(generationTask).where(eq(generationTask.task_id, taskId)))[0]!;

test('a stale submit execution that records "unknown" after attempt 2 exists leaves attempt 2\'s task untouched', async () => {
  const created = await createTask(db(), w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `stale-${Date.now()}`,
    body: { model: 'gen4.5', prompt: 'stale', duration_seconds: 5, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  const prepared = await w.run('dispatchAndPrepare', taskId);
  assert.equal(prepared.status, 'SUBMITTING');
  const attemptId = prepared.activeAttemptId!;
  // The call times out (PROVIDER_HTTP_TIMEOUT_MS) without an answer: the stale execution records "unknown".
  w.sim.sim.setFaults({ providers: ['runway'], submit: 'accept_then_hang', submit_fault_count: 1 });
  // Execution 1 claims attempt 1 and stalls inside the provider call.
  const stale = w.run('submitAttempt', taskId);
  await eventually(async () => ((await attemptOf(attemptId)).submit_state === 'SUBMITTING' ? true : undefined), 5_000, 20);
  // Its heartbeat timed out: the retry records the outcome as unknown without calling.
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
  // An operator confirms nothing was created; attempt 2 follows.
  await w.run('escalateTask', taskId, 'test: park');
  await new Promise((r) => setTimeout(r, 400));
  assert.equal((await w.run('resolveReview', taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'console shows nothing' })).status, 'DISPATCHING');
  const second = await w.run('prepareAttempt', taskId);
  assert.equal(second.status, 'SUBMITTING');
  assert.notEqual(second.activeAttemptId, attemptId);
  const before = await taskOf(taskId);

  await stale.catch(() => undefined);

  const after = await taskOf(taskId);
  assert.equal(after.status, 'SUBMITTING', 'the task still waits for attempt 2 to be submitted');
  assert.equal(after.status_version, before.status_version, 'no transition from the stale execution');
  assert.equal(after.active_attempt_id, second.activeAttemptId);
  assert.equal((await attemptOf(second.activeAttemptId!)).submit_state, 'PREPARED');
  const path = await db().select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(asc(taskTransition.to_version));
  assert.equal(path.at(-1)?.attempt_id, second.activeAttemptId, "the last transition is attempt 2's preparation");
});
