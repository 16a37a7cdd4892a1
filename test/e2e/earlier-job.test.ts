// Once-only through the real workflow (docs/decisions/0063): an operator wrongly confirms that an
// unknown create never reached the provider, attempt 2 is prepared and waits for a provider slot,
// and then attempt 1's webhook arrives. The wake makes the waiting claim look again: it finds the
// evidence, sets attempt 2 aside unsent and follows attempt 1's job to SUCCEEDED. One provider job.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { asc, eq, sql } from 'drizzle-orm';
import { slotWait, taskAttempt } from '../../db/schema';
import { eventually } from '../support/stack';
import { startE2E, type E2E } from '../support/e2e';

let e: E2E;
before(async () => {
  e = await startE2E('earlier-job', { PROVIDER_HTTP_TIMEOUT_MS: '700', UNKNOWN_OUTCOME_DEADLINE_MS: '1500', BULKHEAD_RAMP_MS: '0' });
});
after(async () => {
  await e?.close();
});

const attemptsOf = (taskId: string) => e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)).orderBy(asc(taskAttempt.attempt_no));

test('attempt 1\'s webhook, arriving while attempt 2 waits for a slot after a wrong "not-submitted", stops attempt 2: the task succeeds on attempt 1\'s job, one provider job', async () => {
  // The create reaches Replicate but its answer never comes back; the lookups fail; the job's
  // webhooks come 10 s late: the deadline parks the task with no job known.
  e.sim.sim.setFaults({ providers: ['replicate'], submit: 'accept_then_hang', submit_fault_count: 1, list: 'error_5xx', callback_delay_ms: 10_000 });
  const taskId = await e.createTask(`earlier-${Date.now()}`, { model: 'minimax/video-01', prompt: 'earlier job', duration_seconds: 6, resolution: '720p' });
  await e.waitForWorkflowStatus(taskId, 'MANUAL_REVIEW');
  const [first] = await attemptsOf(taskId);
  assert.equal(first!.provider_job_id, null, 'parked with no job known');

  // Replicate is full: whatever is prepared next waits in its slot queue.
  await e.tdb.database.db.execute(sql`UPDATE provider_control SET max_in_flight = 0, queue_limit = 0 WHERE provider = 'replicate'`);
  try {
    const facts = await e.api.facade.resolveReview(taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'console shows nothing' });
    assert.equal(facts.status, 'DISPATCHING');
    await eventually(async () => ((await e.tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, taskId))).length > 0 ? true : undefined), 20_000);
    const [, second] = await attemptsOf(taskId);
    assert.equal(second!.submit_state, 'PREPARED', 'attempt 2 waits for a slot');

    const task = await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
    assert.equal(task.status, 'SUCCEEDED');
  } finally {
    await e.tdb.database.db.execute(sql`UPDATE provider_control SET max_in_flight = NULL, queue_limit = NULL WHERE provider = 'replicate'`);
  }
  const [one, two] = await attemptsOf(taskId);
  assert.equal(two!.submit_state, 'CANCELLED', 'attempt 2 set aside, never sent');
  assert.equal(e.sim.jobsFor(two!.attempt_id), 0);
  assert.equal(e.sim.jobsFor(one!.attempt_id), 1, 'the one provider job');
  assert.ok(one!.provider_job_id, "attempt 1's job bound");
});
