// pollProvider and the proof-of-absence contract (docs/providers.md "Proof of absence"), with
// MockActivityEnvironment against real Postgres and the strict provider simulator: a Replicate
// miss proves nothing however long it lasts, and pollProvider trusts "not-found-proven" only
// from an adapter that declares an exact lookup.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import type { TaskActivities } from '../../activities';
import { createTask } from '../support/deps';
import { buildProviders } from '../../config/services';
import { setMode } from '../../db/modes';
import { generationTask, taskAttempt } from '../../db/schema';
import type { ProviderAdapter } from '../../providers/types';
import { freshActivities, runActivity as run, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  // No proof delay at all: whatever a miss may prove, it proves at once.
  w = await startActivityWorld({ config: { UNKNOWN_PROOF_DELAY_MS: '0', UNKNOWN_OUTCOME_DEADLINE_MS: '600000' } });
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
    body: { model: 'minimax/video-01', prompt: `absence ${seq}`, duration_seconds: 2, resolution: '480p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await run(acts, 'dispatchTask', taskId);
  const prepared = await run(acts, 'prepareAttempt', taskId);
  w.sim.sim.setFaults({ submit: 'error_5xx_before_accept', submit_fault_count: 1 });
  const r = await run(acts, 'submitAttempt', taskId);
  w.sim.sim.clearFaults();
  assert.equal(r.facts.status, 'SUBMIT_UNKNOWN');
  return { taskId, attemptId: prepared.activeAttemptId! };
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
