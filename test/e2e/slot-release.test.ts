// Wedged tasks never block a provider: a task whose job the provider no longer knows (404), or
// that runs past the provider's maximum run time, ends in MANUAL_REVIEW with the evidence and
// gives its bulkhead slot back; a review resolved "fail" closes its attempt, so finished tasks
// hold no slot. Real worker, Postgres, Temporal and simulator.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { desc, eq, inArray } from 'drizzle-orm';
import { inFlightByProvider } from '../../db/provider-control';
import { taskAttempt, taskTransition } from '../../db/schema';
import { changeProviderControl } from '../../ops/providers';
import { startE2E, type E2E } from '../support/e2e';
import { eventually } from '../support/stack';

const READ_LIMIT = 3;
let e: E2E;

before(async () => {
  e = await startE2E(
    'slots',
    {
      PROVIDER_READ_FAILURE_LIMIT: String(READ_LIMIT),
      PROVIDER_MAX_RUN_MS: 'kling=3000',
      UNKNOWN_OUTCOME_DEADLINE_MS: '3000',
      PROVIDER_HTTP_TIMEOUT_MS: '1500',
    },
    { generationMs: 3_000 },
  );
});
after(async () => e?.close());

const attemptsOf = (ids: string[]) => e.tdb.database.db.select().from(taskAttempt).where(inArray(taskAttempt.task_id, ids));
/** The detail of the task's move into MANUAL_REVIEW (operators see it; the tenant's API does not). */
async function reviewEvidence(taskId: string): Promise<Record<string, unknown>> {
  const rows = await e.tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(desc(taskTransition.to_version));
  return (rows.find((r) => r.to_status === 'MANUAL_REVIEW')?.detail as Record<string, unknown> | null) ?? {};
}

test(
  'a job the provider answers 404 for ends in MANUAL_REVIEW within the read bound, frees its slot, and the next submit is not blocked',
  { timeout: 120_000 },
  async () => {
    await changeProviderControl(e.tdb.database.db, { provider: 'replicate', change: { kind: 'limit', maxInFlight: 1 }, actor: 'test', reason: 'one slot' });
    try {
      const wedged = await e.createTask('gone-1');
      await eventually(async () => (['SUBMITTED', 'RUNNING'].includes((await e.getTask(wedged)).status) ? true : undefined), 30_000, 100);
      e.sim.sim.reset(); // the provider forgets the job: every read of it answers 404

      await e.waitForStatus(wedged, 'MANUAL_REVIEW', 60_000);
      const evidence = await reviewEvidence(wedged);
      assert.equal(evidence['failure'], 'gone', JSON.stringify(evidence));
      assert.equal(evidence['http_status'], 404);
      assert.equal(evidence['consecutive_read_failures'], READ_LIMIT);
      assert.equal((await e.ledgerOf(wedged))['SETTLE'], undefined, 'the reservation waits for the operator');

      const next = await e.createTask('gone-2');
      await e.waitForStatus(next, 'SUCCEEDED', 60_000);
      assert.equal((await inFlightByProvider(e.tdb.database.db))['replicate'] ?? 0, 0, 'the parked task holds no slot');
    } finally {
      await changeProviderControl(e.tdb.database.db, { provider: 'replicate', change: { kind: 'limit', maxInFlight: null }, actor: 'test', reason: 'reset' });
    }
  },
);

test("a job still running past the provider's maximum run time ends in MANUAL_REVIEW with the evidence", { timeout: 120_000 }, async () => {
  const id = await e.createTask('overrun', { model: 'kling-v2-master', prompt: 'a slow fox [sim:gen=60000]', duration_seconds: 5, resolution: '720p' });
  await e.waitForStatus(id, 'MANUAL_REVIEW', 60_000);
  const evidence = await reviewEvidence(id);
  assert.equal(evidence['max_run_ms'], 3000, JSON.stringify(evidence));
  assert.ok(evidence['provider_job_id']);
  assert.equal((await inFlightByProvider(e.tdb.database.db))['kling'] ?? 0, 0, 'the parked task holds no slot');
});

test(
  'two reviews resolved "fail" on Runway (2 slots) close their attempts; a third Runway task still gets a slot and succeeds',
  { timeout: 150_000 },
  async () => {
    // gen4_turbo is image to video only (docs/providers.md "Documented evidence: Runway").
    const runway = {
      model: 'gen4_turbo',
      prompt: 'a runway fox',
      duration_seconds: 2,
      resolution: '720p',
      input_image_url: 'https://example.com/first-frame.png',
    };
    // The provider takes both submits and never answers: unknown outcomes, no lookup at Runway → review.
    e.sim.sim.setFaults({ providers: ['runway'], submit: 'accept_then_hang', submit_fault_count: 2 });
    const parked = [await e.createTask('rw-1', runway), await e.createTask('rw-2', runway)];
    for (const id of parked) await e.waitForStatus(id, 'MANUAL_REVIEW', 60_000);
    e.sim.sim.clearFaults();
    for (const id of parked) await e.api.facade.resolveReview(id, { kind: 'fail', operator: 'ops-test', reason: 'gave up on it' });
    for (const id of parked) await e.waitForStatus(id, 'FAILED', 30_000);
    const closed = await attemptsOf(parked);
    assert.deepEqual(
      closed.map((a) => a.submit_state),
      ['FAILED', 'FAILED'],
      'every terminal path closes the active attempt',
    );

    const third = await e.createTask('rw-3', runway);
    await e.waitForStatus(third, 'SUCCEEDED', 90_000);
    const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, third));
    assert.equal(e.sim.jobsFor(attempt!.attempt_id), 1);
  },
);
