// A submit execution that stalls mid-call (its heartbeat timed out, a retry recorded the outcome
// as unknown, reconciliation proved the job absent and attempt 2 was prepared) and then records
// its own outcome must not move the task: task events from an attempt apply only while that
// attempt is the active one and its own compare-and-set took effect. Forced interleaving:
// activities run one at a time (MockActivityEnvironment) against Postgres and the simulator.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { asc, eq } from 'drizzle-orm';
import { createTask } from '../support/deps';
import { generationTask, taskAttempt, taskTransition } from '../../db/schema';
import { eventually } from '../support/stack';
import { startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  // Kling looks jobs up by our own key: after the simulator forgets the job, a miss proves absence.
  w = await startActivityWorld({ config: { UNKNOWN_PROOF_DELAY_MS: '0', PROVIDER_HTTP_TIMEOUT_MS: '4000' } });
});
after(async () => w?.close());

const db = () => w.tdb.database.db;
const attemptOf = async (attemptId: string) => (await db().select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId)))[0]!;
const taskOf = async (taskId: string) => (await db().select().from(generationTask).where(eq(generationTask.task_id, taskId)))[0]!;

let seq = 0;
async function preparedKlingTask(): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const created = await createTask(db(), w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `stale-${seq}-${Date.now()}`,
    body: { model: 'kling-v2-master', prompt: `stale ${seq}`, duration_seconds: 5, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await w.run('dispatchTask', taskId);
  const facts = await w.run('prepareAttempt', taskId);
  assert.equal(facts.status, 'SUBMITTING');
  return { taskId, attemptId: facts.activeAttemptId! };
}

const cases = [
  { outcome: 'accepted', faults: { submit: 'answer_after_ms', submit_delay_ms: 2_500, submit_fault_count: 1 } },
  // The call times out (PROVIDER_HTTP_TIMEOUT_MS): the stale execution records "unknown".
  { outcome: 'unknown', faults: { submit: 'accept_then_hang', submit_fault_count: 1 } },
] as const;

for (const c of cases) {
  test(`a stale submit execution that records "${c.outcome}" after attempt 2 exists leaves attempt 2's task untouched`, async () => {
    const { taskId, attemptId } = await preparedKlingTask();
    w.sim.sim.setFaults({ providers: ['kling'], ...c.faults });
    // Execution 1 claims attempt 1 and stalls inside the provider call.
    const stale = w.run('submitAttempt', taskId);
    await eventually(async () => ((await attemptOf(attemptId)).submit_state === 'SUBMITTING' ? true : undefined), 5_000, 20);
    // Its heartbeat timed out: the retry records the outcome as unknown without calling.
    assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMIT_UNKNOWN');
    // The provider forgets the job; the lookup by our key misses: proved absent, attempt 2 follows.
    w.sim.sim.reset();
    assert.equal((await w.run('pollProvider', taskId)).result, 'absent');
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
}
