// A burst of admitted tasks against a provider's documented create limit (docs/decisions/0069):
// the simulator plays a Replicate account allowing 300 creates a minute (its documented limits
// scaled down: a 10 s burst, then the rate, over it the documented 429 throttle), and the product
// is told the same quota. Every worker's submits share one pace in Postgres, so 60 tasks created at
// once are sent over ~13 s and none is throttled; a task the pace holds back past its deadline
// fails then, with no call; and a throttle the provider still sends is a wait, not one of the
// task's MAX_SUBMIT_ATTEMPTS (MAX_THROTTLED_SUBMITS bounds those).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { asc, eq, sql } from 'drizzle-orm';
import { slotWait, taskAttempt } from '../../db/schema';
import { createPaceFor } from '../../domain/create-pace';
import type { SubmitReceived } from '../../providers/simulator/submit-log';
import { defaultRequest, startE2E, type E2E } from '../support/e2e';

const QUOTA = 5;
const TASKS = 60;

describe('creates paced within the account quota', () => {
  let e: E2E;
  const submits: SubmitReceived[] = [];
  let stopListening = () => {};
  before(async () => {
    e = await startE2E(
      'create-pace',
      // A short call timeout so a 10 s deadline leaves room for a call; the default attempt cap (3).
      { PROVIDER_CREATE_QUOTAS: `replicate=${QUOTA}`, PROVIDER_HTTP_TIMEOUT_MS: '2000' },
      { generationMs: 200, simulator: { SIMULATOR_REPLICATE_RATE_LIMITS: `${QUOTA * 60},3000` } },
    );
    stopListening = e.sim.sim.onSubmit((s) => submits.push(s));
  });
  after(async () => {
    stopListening();
    await e?.close();
  });

  test(`${TASKS} tasks created at once reach the provider at its pace: none throttled, one attempt and one job each`, async () => {
    const ids = await Promise.all(Array.from({ length: TASKS }, (_, i) => e.createTask(`pace-${i}`, { ...defaultRequest, prompt: `paced fox ${i}` })));
    for (const id of ids) await e.waitForStatus(id, 'SUCCEEDED', 120_000);
    const stats = e.sim.sim.stats();
    assert.equal(stats.replicate_throttled.create, 0, 'no create was throttled');
    for (const id of ids) {
      const attempts = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, id));
      assert.equal(attempts.length, 1, `task ${id}: one attempt`);
      assert.equal(e.sim.jobsFor(attempts[0]!.attempt_id), 1);
    }
    assert.equal((await e.tdb.database.db.select().from(slotWait)).length, 0, 'no slot left behind');
    // Paced: the creates take as long as the pace says, not the second a burst would.
    const pace = createPaceFor(QUOTA);
    const times = submits.filter((s) => s.provider === 'replicate').map((s) => s.atMs);
    assert.equal(times.length, TASKS);
    const spanS = (Math.max(...times) - Math.min(...times)) / 1_000;
    const least = (TASKS - pace.burst) / pace.ratePerSecond;
    assert.ok(spanS >= least * 0.95, `${TASKS} creates in ${spanS.toFixed(1)} s; the pace needs at least ${least.toFixed(1)} s`);
  });

  test('a task the pace holds back past its deadline fails at its deadline, the provider never called', async () => {
    // The pace a minute ahead (what a burst of 270 tasks before it would leave): the task sleeps
    // until a call could no longer finish by its deadline, then its claim fails it.
    await e.tdb.database.db.execute(sql`UPDATE provider_control SET create_tat = clock_timestamp() + interval '60 seconds' WHERE provider = 'replicate'`);
    try {
      const late = await e.createTask('pace-deadline', { ...defaultRequest, prompt: 'a fox with no time', deadline_seconds: 10 });
      const failed = await e.waitForStatus(late, 'FAILED', 30_000);
      assert.equal(failed.failure.code, 'DEADLINE_EXCEEDED');
      const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, late));
      assert.equal(attempt?.submit_state, 'CANCELLED');
      assert.match(attempt.last_error ?? '', /deadline exceeded/);
      assert.equal(e.sim.jobsFor(attempt.attempt_id), 0, 'no call past the deadline');
      assert.equal((await e.tdb.database.db.select().from(slotWait)).length, 0, 'no slot held');
    } finally {
      await e.tdb.database.db.execute(sql`UPDATE provider_control SET create_tat = NULL WHERE provider = 'replicate'`);
    }
  });
});

describe('a throttle is a wait, not a rejection', () => {
  let e: E2E;
  before(async () => {
    // One attempt allowed: before, a single 429 failed the task. (Each retry also spends the
    // provider's retry budget, one per 10 s when idle: that is why these stay small.)
    e = await startE2E('create-throttle', { MAX_SUBMIT_ATTEMPTS: '1', MAX_THROTTLED_SUBMITS: '1' });
  });
  after(async () => {
    await e?.close();
  });

  test('a 429 with MAX_SUBMIT_ATTEMPTS=1: the attempt after the reset is accepted, one job, the throttled one marked', async () => {
    e.sim.sim.setFaults({ submit: 'rate_limit', retry_after_s: 1, submit_fault_count: 1 });
    const taskId = await e.createTask('throttled-1', { ...defaultRequest, prompt: 'a patient fox' });
    await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
    const attempts = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)).orderBy(asc(taskAttempt.attempt_no));
    assert.deepEqual(
      attempts.map((a) => [a.submit_state, a.throttled, e.sim.jobsFor(a.attempt_id)]),
      [
        ['REJECTED', true, 0],
        ['SUCCEEDED', false, 1],
      ],
    );
    assert.ok(attempts[1]!.submit_started_at!.getTime() - attempts[0]!.submit_finished_at!.getTime() >= 900, "after the provider's reset");
  });

  test('past MAX_THROTTLED_SUBMITS the task fails, nothing charged', async () => {
    e.sim.sim.setFaults({ submit: 'rate_limit', retry_after_s: 1, submit_fault_count: 2 });
    const taskId = await e.createTask('throttled-2', { ...defaultRequest, prompt: 'a fox the provider keeps refusing' });
    const task = await e.waitForStatus(taskId, 'FAILED', 60_000);
    assert.equal(task.failure.code, 'PROVIDER_REJECTED');
    const attempts = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    assert.equal(attempts.length, 2, 'the one retried throttle and the second, which ends it');
    assert.ok(attempts.every((a) => a.throttled && e.sim.jobsFor(a.attempt_id) === 0));
    const ledger = await e.ledgerOf(taskId);
    assert.equal(Number(ledger['SETTLE'] ?? 0), 0, 'nothing charged');
    assert.equal(ledger['RELEASE'], ledger['RESERVE'], 'the whole reservation released');
    e.sim.sim.clearFaults();
  });
});
