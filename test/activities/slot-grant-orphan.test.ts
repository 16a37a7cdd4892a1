// A grant nobody comes for (its workflow terminated, or gone with a
// lost history) must not come back: put back in the queue (db/slot-queue.ts takeSlot) it was, being the oldest
// waiter, granted again in the very same pass, and the slot it held never reached a live claimant:
// every grant TTL the dead waiter was re-granted and the live one waited. Real Postgres and simulator.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { eq } from 'drizzle-orm';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { createTask, testActivityDeps } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import { recordProviderEvent } from '../../db/inbox';
import { providerControl, slotWait, taskAttempt } from '../../db/schema';
import { createTestDatabase, createTestTenant, startSimulator, testConfig, type RunningSimulator, type TestDatabase } from '../support/stack';

let sim: RunningSimulator;
let tdb: TestDatabase;
let acts: TaskActivities;
let config: ReturnType<typeof testConfig>;
let tenant: string;

before(async () => {
  sim = await startSimulator(testConfig(), { generationMs: 600_000 });
  config = testConfig({
    PROVIDER_REPLICATE_BASE_URL: `${sim.baseUrl}/replicate`,
    PROVIDER_FAL_BASE_URL: `${sim.baseUrl}/fal`,
    PROVIDER_FAL_JWKS_URL: `${sim.baseUrl}/fal/.well-known/jwks.json`,
    PROVIDER_RUNWAY_BASE_URL: `${sim.baseUrl}/runway`,
    PROVIDER_KLING_BASE_URL: `${sim.baseUrl}/kling`,
    BULKHEAD_RAMP_MS: '0',
    SLOT_QUEUE_AGING_MS: '0',
  });
  tdb = await createTestDatabase(config);
  acts = createTaskActivities(testActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) }));
  ({ tenantId: tenant } = await createTestTenant(tdb.database, config, '100000'));
});
after(async () => {
  await sim?.close();
  await tdb?.drop();
});

const run = <K extends keyof TaskActivities>(name: K, ...args: Parameters<TaskActivities[K]>) =>
  new MockActivityEnvironment().run(acts[name] as never, ...(args as unknown as never[])) as ReturnType<TaskActivities[K]>;

let seq = 0;
async function prepared(): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
  const { task } = await createTask(tdb.database.db, token, {
    tenantId: tenant,
    idempotencyKey: `orphan-${seq}`,
    body: { model: 'minimax/video-01', prompt: `orphan ${seq}`, duration_seconds: 1, resolution: '480p', priority: 0 },
  });
  await run('dispatchTask', task.task_id);
  const facts = await run('prepareAttempt', task.task_id);
  return { taskId: task.task_id, attemptId: facts.activeAttemptId! };
}

async function finishJob(t: { taskId: string; attemptId: string }) {
  const [attempt] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, t.attemptId));
  await recordProviderEvent(tdb.database.db, {
    provider: 'replicate',
    job: { jobId: attempt!.provider_job_id!, state: 'failed', rawStatus: 'failed', updatedAt: new Date(), outputUrl: null, error: 'done', correlationToken: null, metrics: null },
    providerEventId: `end-${t.attemptId}`,
    source: 'callback',
    attemptId: t.attemptId,
    taskId: t.taskId,
    receivedRegion: config.REGION,
    signatureValid: true,
    raw: {},
  });
  await run('applyInbox', t.taskId);
}

test('an expired grant of a dead waiter does not keep the slot away from a live claimant', { timeout: 60_000 }, async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1 });
  const holder = await prepared();
  assert.equal((await run('submitAttempt', holder.taskId)).facts.status, 'SUBMITTED');
  // The waiter whose workflow is gone (terminated): it joins the queue and never claims again.
  const dead = await prepared();
  assert.equal((await run('submitAttempt', dead.taskId)).facts.status, 'SUBMITTING');
  await finishJob(holder);
  const [grant] = await tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, dead.taskId));
  assert.ok(grant?.granted_at, 'the freed slot went to the dead waiter');

  const live = await prepared();
  for (let round = 1; round <= 2; round += 1) {
    // Past SLOT_GRANT_TTL_MS (5 min): "grants nobody came for go back to the queue".
    await tdb.database.db.update(slotWait).set({ granted_at: new Date(Date.now() - 10 * 60_000) }).where(eq(slotWait.task_id, dead.taskId));
    const r = await run('submitAttempt', live.taskId);
    const [again] = await tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, dead.taskId));
    assert.equal(
      r.facts.status,
      'SUBMITTED',
      `round ${round}: the live claimant still waits; the dead waiter was granted again at ${again?.granted_at?.toISOString() ?? '(not granted)'}`,
    );
  }
});
