// The create pace at the submit claim (domain/create-pace.ts, docs/decisions/0069), against real
// Postgres and the simulator: a claim that may not create now waits holding nothing (no slot, no
// place, the TAT unmoved) for as long as the claims before it need; claims at once from many
// connections send exactly one burst; the pace comes before the slot; and a wait never outlasts
// the task's deadline. The end-to-end run against a throttling account is test/e2e/create-pace.test.ts.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { eq, inArray, sql } from 'drizzle-orm';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { createTask, testActivityDeps } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import { generationTask, providerControl, slotWait, taskAttempt } from '../../db/schema';
import { createPaceFor } from '../../domain/create-pace';
import { createTestDatabase, createTestTenant, startSimulator, testConfig, type RunningSimulator, type TestDatabase } from '../support/stack';

// Replicate at half a create a second: an interval of 2.2 s, a burst of one.
const QUOTA = 0.5;
const INTERVAL_MS = 1_000 / createPaceFor(QUOTA).ratePerSecond;

let sim: RunningSimulator;
let tdb: TestDatabase;
let acts: TaskActivities;
let config: ReturnType<typeof testConfig>;
let tenantId: string;

before(async () => {
  sim = await startSimulator(testConfig(), { generationMs: 600_000 });
  config = testConfig({
    PROVIDER_REPLICATE_BASE_URL: `${sim.baseUrl}/replicate`,
    PROVIDER_FAL_BASE_URL: `${sim.baseUrl}/fal`,
    PROVIDER_FAL_JWKS_URL: `${sim.baseUrl}/fal/.well-known/jwks.json`,
    PROVIDER_RUNWAY_BASE_URL: `${sim.baseUrl}/runway`,
    PROVIDER_KLING_BASE_URL: `${sim.baseUrl}/kling`,
    BULKHEAD_RAMP_MS: '0',
    PROVIDER_CREATE_QUOTAS: `replicate=${QUOTA}`,
  });
  tdb = await createTestDatabase(config);
  acts = createTaskActivities(testActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) }));
  ({ tenantId } = await createTestTenant(tdb.database, config, '100000'));
});
after(async () => {
  await sim?.close();
  await tdb?.drop();
});
beforeEach(async () => {
  // Nothing in flight, nobody waiting, no pace yet.
  await tdb.database.db.delete(slotWait);
  await tdb.database.db
    .update(taskAttempt)
    .set({ submit_state: 'SUCCEEDED' })
    .where(inArray(taskAttempt.submit_state, ['PREPARED', 'SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN']));
  await tdb.database.db.delete(providerControl);
});

const run = <K extends keyof TaskActivities>(name: K, ...args: Parameters<TaskActivities[K]>) =>
  new MockActivityEnvironment().run(acts[name] as never, ...(args as unknown as never[])) as ReturnType<TaskActivities[K]>;

let seq = 0;
async function prepared(deadlineSeconds?: number): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
  const { task } = await createTask(tdb.database.db, token, {
    tenantId,
    idempotencyKey: `pace-${seq}`,
    body: {
      model: 'minimax/video-01',
      duration_seconds: 6,
      resolution: '720p',
      prompt: `pace ${seq}`,
      priority: 0,
      ...(deadlineSeconds ? { deadline_seconds: deadlineSeconds } : {}),
    },
  });
  await run('dispatchTask', task.task_id);
  const facts = await run('prepareAttempt', task.task_id);
  return { taskId: task.task_id, attemptId: facts.activeAttemptId! };
}

const tatOf = async () => (await tdb.database.db.select().from(providerControl).where(eq(providerControl.provider, 'replicate')))[0]?.create_tat ?? null;
const paceAhead = (seconds: number) =>
  tdb.database.db.execute(sql`UPDATE provider_control SET create_tat = clock_timestamp() + make_interval(secs => ${seconds}) WHERE provider = 'replicate'`);
const stateOf = async (t: { attemptId: string }) =>
  (await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, t.attemptId)))[0]!.submit_state;

test('a claim that may not create now waits holding nothing (no slot, no place, the TAT unmoved), an interval longer for each unsent attempt before it', async () => {
  const [a, b, c] = [await prepared(), await prepared(), await prepared()];
  // The first claim creates the provider's row; then the pace is put half a minute ahead.
  assert.equal((await run('submitAttempt', a.taskId)).facts.status, 'SUBMITTED');
  await paceAhead(30);
  const tat = await tatOf();
  const waits = [];
  for (const t of [b, c]) {
    const r = await run('submitAttempt', t.taskId);
    assert.equal(r.facts.status, 'SUBMITTING');
    waits.push(r.waitMs!);
  }
  assert.ok(waits[0]! > 25_000 && waits[0]! <= 30_000, `b waits until the pace conforms: ${waits[0]} ms`);
  // c has b before it, unsent: one interval more (less the moments that passed between the claims).
  const more = waits[1]! - waits[0]!;
  assert.ok(more > INTERVAL_MS - 1_000 && more <= INTERVAL_MS + 1, `c waits an interval more than b: ${more} ms`);
  assert.deepEqual(await tatOf(), tat, 'nothing reserved: the TAT moves only when a create goes');
  assert.equal((await tdb.database.db.select().from(slotWait)).length, 0, 'no slot held while waiting');
  assert.deepEqual([await stateOf(b), await stateOf(c)], ['PREPARED', 'PREPARED']);
  assert.equal(sim.jobsFor(b.attemptId) + sim.jobsFor(c.attemptId), 0);

  // The pace caught up: b goes and moves the TAT one interval past now; c, right after, waits for it.
  await tdb.database.db.execute(sql`UPDATE provider_control SET create_tat = NULL WHERE provider = 'replicate'`);
  const sentAt = Date.now();
  assert.equal((await run('submitAttempt', b.taskId)).facts.status, 'SUBMITTED');
  const moved = (await tatOf())!.getTime() - sentAt;
  assert.ok(moved > INTERVAL_MS - 2_000 && moved < INTERVAL_MS + 2_000, `the TAT is an interval past the create: ${moved} ms`);
  const again = await run('submitAttempt', c.taskId);
  assert.ok(again.waitMs! > 0 && again.waitMs! <= INTERVAL_MS + 1, `c waits for the next moment only: ${again.waitMs} ms`);
  assert.equal(sim.jobsFor(b.attemptId), 1);
  assert.equal(sim.jobsFor(c.attemptId), 0);
});

test('claims at once from many connections: exactly one burst goes, the others wait (the row lock serialises the pace)', async () => {
  const ts = [];
  for (let i = 0; i < 8; i++) ts.push(await prepared());
  const results = await Promise.all(ts.map((t) => run('submitAttempt', t.taskId)));
  const sent = ts.filter((t) => sim.jobsFor(t.attemptId) === 1).length;
  assert.equal(sent, createPaceFor(QUOTA).burst, 'one burst');
  assert.equal(results.filter((r) => r.facts.status === 'SUBMITTED').length, sent);
  assert.ok(results.filter((r) => r.facts.status === 'SUBMITTING').every((r) => r.waitMs! > 0));
});

test('the pace comes before the slot: a claim the pace holds back takes no slot, and a waiter for a slot takes nothing from the pace', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1 });
  const [a, b, c] = [await prepared(), await prepared(), await prepared()];
  assert.equal((await run('submitAttempt', a.taskId)).facts.status, 'SUBMITTED');
  // The pace has room again; b finds the one slot taken and waits in the slot queue.
  await tdb.database.db.execute(sql`UPDATE provider_control SET create_tat = NULL WHERE provider = 'replicate'`);
  assert.equal((await run('submitAttempt', b.taskId)).facts.status, 'SUBMITTING');
  assert.equal(await tatOf(), null, 'a claim that waits for a slot does not move the pace');
  assert.equal((await tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, b.taskId))).length, 1);
  // The pace ahead: c waits for it and never reaches the slot queue.
  await paceAhead(30);
  assert.ok((await run('submitAttempt', c.taskId)).waitMs! > 25_000);
  assert.equal((await tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, c.taskId))).length, 0);
  assert.equal(sim.jobsFor(b.attemptId) + sim.jobsFor(c.attemptId), 0);
});

test('a claim the pace holds back sleeps no longer than its deadline allows, then fails DEADLINE_EXCEEDED with no call', async () => {
  const first = await prepared();
  assert.equal((await run('submitAttempt', first.taskId)).facts.status, 'SUBMITTED');
  const late = await prepared(60);
  await paceAhead(600);
  const waited = await run('submitAttempt', late.taskId);
  assert.ok(waited.waitMs! <= 60_000 - config.PROVIDER_HTTP_TIMEOUT_MS + 100, `it sleeps no longer than its deadline allows: ${waited.waitMs} ms`);
  await tdb.database.db
    .update(generationTask)
    .set({ deadline_at: new Date(Date.now() - 1_000) })
    .where(eq(generationTask.task_id, late.taskId));
  assert.equal((await run('submitAttempt', late.taskId)).facts.status, 'FAILED');
  const [t] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, late.taskId));
  assert.equal(t?.failure_code, 'DEADLINE_EXCEEDED');
  assert.equal(sim.jobsFor(late.attemptId), 0);
});
