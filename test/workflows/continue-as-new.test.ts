// A task that waits on its provider across several runs: the workflow continues as new every
// few steps (the state is in Postgres, so a new run only re-reads it), and a callback that
// reaches the inbox while the runs roll over is still applied, once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { callbackInbox, taskAttempt, taskTransition } from '../../db/schema';
import { startE2E, startTaskWorkflow, type E2E } from '../support/e2e';

let e: E2E;
before(async () => {
  // Fast polls (so steps pile up) and a generation long enough to span several runs.
  e = await startE2E('can', { POLL_INITIAL_MS: '100', POLL_MAX_MS: '200' }, { generationMs: 4_000 });
});
after(async () => {
  await e?.close();
});

test('the inbox is applied across continue-as-new: a task polled over many runs ends SUCCEEDED with its one callback applied once', async () => {
  // Started here rather than by the API so the run length can be set low.
  const { taskId, handle } = await startTaskWorkflow(e, 'can', { stepsPerRun: 2 });
  const task = await e.waitForStatus(taskId, 'SUCCEEDED', 90_000);
  assert.equal(task.status, 'SUCCEEDED');

  // The first run continued as new; how many runs it took (the listing catches up with a lag).
  const first = await e.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId).describe();
  assert.equal(first.status.name, 'CONTINUED_AS_NEW');
  let runs = 0;
  for (let tries = 0; tries < 50 && runs < 3; tries++) {
    runs = 0;
    for await (const wf of e.client.workflow.list({ query: `WorkflowId = '${handle.workflowId}'` })) runs += wf ? 1 : 0;
    if (runs < 3) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(runs >= 3, `the task spanned several runs (${runs})`);

  const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.equal(e.sim.jobsFor(attempt!.attempt_id), 1, 'one provider job');
  const inbox = await e.tdb.database.db.select().from(callbackInbox).where(eq(callbackInbox.task_id, taskId));
  // Each source stored the success at most once (a callback dedupes on its webhook id, a poll on
  // the job's state); applying it twice is a no-op for the state machine: one transition.
  const succeeded = inbox.filter((r) => r.event_type === 'succeeded');
  assert.ok(succeeded.filter((r) => r.source === 'callback').length <= 1 && succeeded.filter((r) => r.source === 'poll').length <= 1);
  const moves = await e.tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId));
  assert.equal(moves.filter((m) => m.to_status === 'PROVIDER_SUCCEEDED').length, 1);
  assert.ok(
    inbox.every((r) => r.processed_at !== null),
    'every inbox row was applied',
  );
  assert.deepEqual(await e.ledgerOf(taskId), { RESERVE: '4.500000', SETTLE: '4.500000', RELEASE: '0.000000' });
});
