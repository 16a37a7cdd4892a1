// A grant nobody comes for (its workflow terminated, or gone with a
// lost history) must not come back: put back in the queue (db/slot-queue.ts takeSlot) it was, being the oldest
// waiter, granted again in the very same pass, and the slot it held never reached a live claimant:
// every grant TTL the dead waiter was re-granted and the live one waited. Real Postgres and simulator.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { createTask } from '../support/deps';
import { recordProviderEvent } from '../../db/inbox';
import { providerControl, slotWait, taskAttempt } from '../../db/schema';
import { startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;

before(async () => {
  w = await startActivityWorld({ generationMs: 600_000, credits: '100000', config: { BULKHEAD_RAMP_MS: '0', SLOT_QUEUE_AGING_MS: '0' } });
});
after(async () => {
  await w?.close();
});

let seq = 0;
async function prepared(): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const { task } = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `orphan-${seq}`,
    body: { model: 'minimax/video-01', prompt: `orphan ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  await w.run('dispatchTask', task.task_id);
  const facts = await w.run('prepareAttempt', task.task_id);
  return { taskId: task.task_id, attemptId: facts.activeAttemptId! };
}

async function finishJob(t: { taskId: string; attemptId: string }) {
  const [attempt] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, t.attemptId));
  await recordProviderEvent(w.tdb.database.db, {
    provider: 'replicate',
    job: {
      jobId: attempt!.provider_job_id!,
      state: 'failed',
      rawStatus: 'failed',
      updatedAt: new Date(),
      outputUrl: null,
      error: 'done',
      correlationToken: null,
      metrics: null,
    },
    providerEventId: `end-${t.attemptId}`,
    source: 'callback',
    attemptId: t.attemptId,
    taskId: t.taskId,
    receivedRegion: w.config.REGION,
    signatureValid: true,
    raw: {},
  });
  await w.run('applyInbox', t.taskId);
}

test('an expired grant of a dead waiter does not keep the slot away from a live claimant', { timeout: 60_000 }, async () => {
  await w.tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1 });
  const holder = await prepared();
  assert.equal((await w.run('submitAttempt', holder.taskId)).facts.status, 'SUBMITTED');
  // The waiter whose workflow is gone (terminated): it joins the queue and never claims again.
  const dead = await prepared();
  assert.equal((await w.run('submitAttempt', dead.taskId)).facts.status, 'SUBMITTING');
  await finishJob(holder);
  const [grant] = await w.tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, dead.taskId));
  assert.ok(grant?.granted_at, 'the freed slot went to the dead waiter');

  const live = await prepared();
  for (let round = 1; round <= 2; round += 1) {
    // Past SLOT_GRANT_TTL_MS (5 min): "grants nobody came for go back to the queue".
    await w.tdb.database.db
      .update(slotWait)
      .set({ granted_at: new Date(Date.now() - 10 * 60_000) })
      .where(eq(slotWait.task_id, dead.taskId));
    const r = await w.run('submitAttempt', live.taskId);
    const [again] = await w.tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, dead.taskId));
    assert.equal(
      r.facts.status,
      'SUBMITTED',
      `round ${round}: the live claimant still waits; the dead waiter was granted again at ${again?.granted_at?.toISOString() ?? '(not granted)'}`,
    );
  }
});
