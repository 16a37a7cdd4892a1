// Operators reset stuck workflows from the Temporal UI or CLI; docs/design.md §3 says that must be
// safe because every step re-reads Postgres and changes it with a compare-and-set. These tests
// reset real workflows with the real `temporal workflow reset` binary at every stage of a task
// (provider call in flight, running at the provider, output rescued, settled) and to every kind
// of reset point (first workflow task, last workflow task, an event in the middle), and check
// that the task converges once: one provider job per correlation token, one ledger row per
// kind, one object per asset, gapless versions, and keys that do not depend on the run id.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { attemptIdFor } from '../../activities/dispatch';
import { opsAudit, taskAttempt } from '../../db/schema';
import { SA_NEEDS_ATTENTION, SA_TASK_STATUS, factsQuery, wakeSignal } from '../../workflows/definitions';
import { startE2E, type E2E } from '../support/e2e';
import { eventually } from '../support/stack';
import {
  assertConvergedOnce,
  eventsWhere,
  figuresOf,
  localActivities,
  resetWithCli,
  resultOfRun,
  scheduledActivities,
  type ResetPoint,
  wftAcceptingUpdate,
  wftSchedulingActivity,
} from './support';

/** Long enough at the provider to reset a task while it is RUNNING. */
const GENERATION_MS = 2_500;

let e: E2E;
before(async () => {
  e = await startE2E('reset', { PROVIDER_HTTP_TIMEOUT_MS: '10000', UNKNOWN_PROOF_DELAY_MS: '1000' }, { generationMs: GENERATION_MS });
});
after(async () => {
  await e?.close();
});
beforeEach(() => {
  e.sim.sim.clearFaults();
});

const workflowIdOf = (taskId: string) => e.api.facade.workflowIdFor(taskId);
const handleOf = (taskId: string, runId?: string) => e.client.workflow.getHandle(workflowIdOf(taskId), runId);

/** The task's current run, once its database status is one of `statuses`. */
async function runWhen(taskId: string, statuses: readonly string[]): Promise<string> {
  await eventually(async () => (statuses.includes((await e.getTask(taskId)).status) ? true : undefined), 30_000, 50);
  return (await handleOf(taskId).describe()).runId;
}

/** Resets, then waits for the new run to complete with the task SUCCEEDED; the old run is closed (terminated if it was open). */
async function resetAndConverge(taskId: string, point: ResetPoint, reason: string, oldRunId: string) {
  const newRunId = await resetWithCli(workflowIdOf(taskId), point, reason);
  assert.notEqual(newRunId, oldRunId);
  assert.notEqual((await handleOf(taskId, oldRunId).describe()).status.name, 'RUNNING', 'the reset run replaced the old one');
  const result = await resultOfRun(e.client, workflowIdOf(taskId), newRunId);
  assert.deepEqual(result, { taskId, status: 'SUCCEEDED' });
  return newRunId;
}

describe('a reset never repeats a cost-bearing side effect', () => {
  test('before submit: reset to the first workflow task while the provider call is in flight → the attempt goes SUBMIT_UNKNOWN, is found by its token, one provider job', async (t) => {
    // The provider creates the job at once but answers only after 3 s: the submit activity sits in the call.
    e.sim.sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 3_000, submit_fault_count: 1 });
    const taskId = await e.createTask('reset-in-submit');
    const attemptId = attemptIdFor(taskId, 1);
    await eventually(
      async () => {
        const [a] = await e.tdb.database.db
          .select()
          .from(taskAttempt)
          .where(and(eq(taskAttempt.attempt_id, attemptId), eq(taskAttempt.submit_state, 'SUBMITTING')));
        return a && e.sim.jobsFor(attemptId) === 1 ? a : undefined;
      },
      15_000,
      20,
    );
    const oldRun = (await handleOf(taskId).describe()).runId;

    const newRun = await resetAndConverge(taskId, { type: 'FirstWorkflowTask' }, 'test: reset while submit in flight', oldRun);

    const f = await assertConvergedOnce(e, taskId);
    assert.deepEqual(f.attemptIds, [attemptId], 'same attempt id before and after the reset');
    // The new run's submit found the attempt SUBMITTING (the old execution was mid-call), so it
    // must not have called the provider: the outcome became unknown and was reconciled.
    const task = await e.getTask(taskId);
    const path = task.transitions.map((x: { to: string }) => x.to);
    assert.ok(path.includes('SUBMIT_UNKNOWN'), `went through SUBMIT_UNKNOWN: ${path.join(' → ')}`);
    assert.ok(scheduledActivities(await handleOf(taskId, newRun).fetchHistory()).includes('submitAttempt'), 'the new run did run submit');
    t.diagnostic(`provider jobs ${f.providerJobs}, ledger ${JSON.stringify(f.ledger)}, objects ${f.objects.length}, versions 0..${f.versions.at(-1)}`);
  });

  // That workflow task also ran the fact steps before it as local activities (patch 'lean-steps',
  // docs/decisions/0034-local-fact-steps.md), so the reset re-runs them: the new run reads the
  // facts afresh and has no step that would submit. (A submit re-run on SUBMITTED facts never
  // calls the provider either: test/activities/interleavings.test.ts.)
  test('after submit, running at the provider: reset to the workflow task that scheduled submitAttempt → the new run re-reads RUNNING, never submits again, one provider job', async (t) => {
    const taskId = await e.createTask('reset-mid-submit');
    const oldRun = await runWhen(taskId, ['RUNNING']);
    const history = await handleOf(taskId, oldRun).fetchHistory();
    const eventId = wftSchedulingActivity(history, 'submitAttempt');

    const newRun = await resetAndConverge(taskId, { eventId, runId: oldRun }, 'test: reset to before submitAttempt', oldRun);

    const f = await assertConvergedOnce(e, taskId);
    assert.deepEqual(f.attemptIds, [attemptIdFor(taskId, 1)]);
    // The reset run kept the history up to the reset point and re-ran its fact steps, which found the task at the provider.
    const newHistory = await handleOf(taskId, newRun).fetchHistory();
    assert.equal(scheduledActivities(newHistory).filter((a) => a === 'submitAttempt').length, 0, 'the new run did not submit');
    assert.ok(localActivities(newHistory).includes('getTaskFacts'), 'the new run re-read the facts');
    t.diagnostic(`reset to event ${eventId}; provider jobs ${f.providerJobs}, ledger ${JSON.stringify(f.ledger)}, objects ${f.objects.length}`);
  });

  test('after submit, running at the provider: reset to the last workflow task → one provider job, one settlement', async (t) => {
    const taskId = await e.createTask('reset-last-running');
    const oldRun = await runWhen(taskId, ['RUNNING']);
    await resetAndConverge(taskId, { type: 'LastWorkflowTask' }, 'test: reset last workflow task while running', oldRun);
    const f = await assertConvergedOnce(e, taskId);
    t.diagnostic(`provider jobs ${f.providerJobs}, ledger ${JSON.stringify(f.ledger)}, objects ${f.objects.length}`);
  });

  test('reset re-delivers wake signals: wakes sent while running are re-applied to the new run and change nothing', async (t) => {
    const taskId = await e.createTask('reset-signals');
    const oldRun = await runWhen(taskId, ['RUNNING']);
    for (let i = 0; i < 3; i += 1) await handleOf(taskId).signal(wakeSignal);
    await eventually(
      async () => {
        const h = await handleOf(taskId, oldRun).fetchHistory();
        return eventsWhere(h, (ev) => ev.workflowExecutionSignaledEventAttributes).length >= 3 ? true : undefined;
      },
      10_000,
      50,
    );

    // Reset to the first workflow task: every signal after it is re-applied to the new run.
    const newRun = await resetAndConverge(taskId, { type: 'FirstWorkflowTask' }, 'test: reset with signals after the point', oldRun);
    const redelivered = eventsWhere(await handleOf(taskId, newRun).fetchHistory(), (ev) => ev.workflowExecutionSignaledEventAttributes);
    assert.ok(redelivered.length >= 3, `the reset run got the wake signals again (${redelivered.length})`);

    const f = await assertConvergedOnce(e, taskId);
    assert.deepEqual(f.attemptIds, [attemptIdFor(taskId, 1)]);
    t.diagnostic(`signals re-delivered ${redelivered.length}; provider jobs ${f.providerJobs}, ledger ${JSON.stringify(f.ledger)}`);
  });

  test('after rescue: reset to the workflow task that scheduled rescueOutput once the output is stored → no second download, object or asset', async (t) => {
    const taskId = await e.createTask('reset-after-rescue');
    const oldRun = await runWhen(taskId, ['PROCESSING_MEDIA', 'SUCCEEDED']);
    const eventId = wftSchedulingActivity(await handleOf(taskId, oldRun).fetchHistory(), 'rescueOutput');
    const before = await figuresOf(e, taskId);
    assert.equal(before.assets['video'], 1, 'the video was stored before the reset');

    await resetAndConverge(taskId, { eventId, runId: oldRun }, 'test: reset to before rescueOutput', oldRun);

    const f = await assertConvergedOnce(e, taskId);
    assert.deepEqual(f.attemptIds, before.attemptIds);
    t.diagnostic(
      `reset to event ${eventId}; provider jobs ${f.providerJobs}, ledger ${JSON.stringify(f.ledger)}, assets ${JSON.stringify(f.assets)}, objects ${f.objects.length}`,
    );
  });

  test('after settlement: resets to an event in the middle, the last and the first workflow task of a completed workflow change no fact', async (t) => {
    const taskId = await e.createTask('reset-after-settle');
    await e.waitForStatus(taskId, 'SUCCEEDED');
    const firstRun = (await handleOf(taskId).describe()).runId;
    await resultOfRun(e.client, workflowIdOf(taskId), firstRun);
    const settled = await assertConvergedOnce(e, taskId);

    // Middle: re-run the workflow task that scheduled rescueOutput (which goes on into the media
    // step and settles, docs/decisions/0009).
    const mid = wftSchedulingActivity(await handleOf(taskId, firstRun).fetchHistory(), 'rescueOutput');
    const afterMid = await resetAndConverge(taskId, { eventId: mid, runId: firstRun }, 'test: reset settled task to before rescueOutput', firstRun);
    assert.deepEqual(await assertConvergedOnce(e, taskId), settled);

    const afterLast = await resetAndConverge(taskId, { type: 'LastWorkflowTask' }, 'test: reset settled task, last workflow task', afterMid);
    assert.deepEqual(await assertConvergedOnce(e, taskId), settled);

    await resetAndConverge(taskId, { type: 'FirstWorkflowTask' }, 'test: reset settled task, first workflow task', afterLast);
    assert.deepEqual(await assertConvergedOnce(e, taskId), settled);
    t.diagnostic(
      `3 resets; provider jobs ${settled.providerJobs}, ledger ${JSON.stringify(settled.ledger)}, assets ${JSON.stringify(settled.assets)}, versions 0..${settled.versions.at(-1)}`,
    );
  });
});

describe('a reset re-delivers an operator Update, and that is harmless', () => {
  let review: E2E;
  before(async () => {
    // Lookups fail, so an unknown outcome cannot be proved either way; the deadline parks it.
    review = await startE2E('reset-review', { PROVIDER_HTTP_TIMEOUT_MS: '700', UNKNOWN_PROOF_DELAY_MS: '1000', UNKNOWN_OUTCOME_DEADLINE_MS: '1500' });
  });
  after(async () => {
    await review?.close();
  });

  async function parkInReview(key: string): Promise<string> {
    review.sim.sim.setFaults({ submit: 'error_5xx_before_accept', submit_fault_count: 1, list: 'error_5xx', callbacks: 'off' });
    const taskId = await review.createTask(key);
    await review.waitForStatus(taskId, 'MANUAL_REVIEW');
    review.sim.sim.clearFaults();
    // The workflow has read MANUAL_REVIEW (the Update validator checks its last facts).
    const handle = review.client.workflow.getHandle(review.api.facade.workflowIdFor(taskId));
    await eventually(async () => ((await handle.query(factsQuery))?.status === 'MANUAL_REVIEW' ? true : undefined), 10_000, 50);
    return taskId;
  }

  const auditRows = (taskId: string) => review.tdb.database.db.select().from(opsAudit).where(eq(opsAudit.target_id, taskId));
  const attemptsOf = (taskId: string) => review.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));

  test('confirm-not-submitted, then reset to the workflow task that accepted it: the re-delivered Update is refused by the facts; one audit row, one job for the second attempt, one settlement', async (t) => {
    const taskId = await parkInReview('reset-review-resubmit');
    await review.api.facade.resolveReview(taskId, { kind: 'not-submitted', operator: 'ops-erin', reason: 'provider console shows nothing' });
    await review.waitForStatus(taskId, 'SUCCEEDED');
    const workflowId = review.api.facade.workflowIdFor(taskId);
    const oldRun = (await review.client.workflow.getHandle(workflowId).describe()).runId;
    await resultOfRun(review.client, workflowId, oldRun);
    const eventId = wftAcceptingUpdate(await review.client.workflow.getHandle(workflowId, oldRun).fetchHistory());

    const newRun = await resetWithCli(workflowId, { eventId, runId: oldRun }, 'test: reset to the review Update');
    assert.deepEqual(await resultOfRun(review.client, workflowId, newRun), { taskId, status: 'SUCCEEDED' });

    const history = await review.client.workflow.getHandle(workflowId, newRun).fetchHistory();
    assert.equal(eventsWhere(history, (ev) => ev.workflowExecutionUpdateAdmittedEventAttributes).length, 1, 'the Update was re-delivered');
    const attempts = await attemptsOf(taskId);
    assert.deepEqual(attempts.map((a) => a.attempt_id).sort(), [attemptIdFor(taskId, 1), attemptIdFor(taskId, 2)].sort());
    assert.deepEqual(attempts.map((a) => review.sim.jobsFor(a.attempt_id)).sort(), [0, 1], 'no job for the first attempt, one for the second');
    assert.equal((await auditRows(taskId)).length, 1, 'one audit row');
    const f = await figuresOf(review, taskId);
    assert.deepEqual(f.ledger, { RESERVE: 1, SETTLE: 1, RELEASE: 1 });
    assert.deepEqual(
      f.versions,
      f.versions.map((_, i) => i),
    );
    t.diagnostic(`reset to event ${eventId}; jobs per attempt [0, 1], ledger ${JSON.stringify(f.ledger)}, audit rows 1`);
  });

  // The re-delivered Update passes the validator (the replayed memory still says MANUAL_REVIEW)
  // and its activity refuses it (the task is FAILED). Unless a refused Update also wakes the
  // main loop, the new run waits in MANUAL_REVIEW forever with NeedsAttention=true.
  test('fail, then reset to the workflow task that accepted it: the refused re-delivered Update still wakes the new run, which re-reads FAILED and completes', async (t) => {
    const taskId = await parkInReview('reset-review-fail');
    await review.api.facade.resolveReview(taskId, { kind: 'fail', operator: 'ops-frank', reason: 'customer withdrew the order' });
    await review.waitForStatus(taskId, 'FAILED');
    const workflowId = review.api.facade.workflowIdFor(taskId);
    const oldRun = (await review.client.workflow.getHandle(workflowId).describe()).runId;
    await resultOfRun(review.client, workflowId, oldRun);
    const eventId = wftAcceptingUpdate(await review.client.workflow.getHandle(workflowId, oldRun).fetchHistory());

    const newRun = await resetWithCli(workflowId, { eventId, runId: oldRun }, 'test: reset to the failing review Update');
    const handle = review.client.workflow.getHandle(workflowId, newRun);
    try {
      const closed = await Promise.race([handle.result(), new Promise<null>((r) => setTimeout(() => r(null), 5_000))]);
      const d = await handle.describe();
      t.diagnostic(
        `new run ${d.status.name}; TaskStatus=${d.typedSearchAttributes.get(SA_TASK_STATUS)}, NeedsAttention=${d.typedSearchAttributes.get(SA_NEEDS_ATTENTION)}`,
      );
      assert.deepEqual(closed, { taskId, status: 'FAILED' }, 'the reset run converges to the task status in Postgres');
    } finally {
      if ((await handle.describe()).status.name === 'RUNNING') await handle.terminate('test cleanup');
    }
    assert.equal((await auditRows(taskId)).length, 1, 'one audit row');
    assert.deepEqual(await review.ledgerOf(taskId), { RESERVE: '4.500000', SETTLE: '0.000000', RELEASE: '4.500000' });
  });
});
