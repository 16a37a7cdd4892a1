// A wait cycle applies the inbox once, after the wait (patch 'lean-steps',
// docs/decisions/0034-local-fact-steps.md). No wake may be lost for it: the wake flag is cleared
// only right before an activity that reads what a wake announces (submitAttempt, applyInbox),
// and every run starts woken. Here each wake arrives at the worst moment, and the poll fallback
// is pushed out to 10 minutes, so only a kept wake can finish the task in time: it must end
// SUCCEEDED without a single provider poll, with one provider job and one charge.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import type { History } from '@temporalio/common/lib/proto-utils';
import type { TaskFacts } from '../../domain/facts';
import { attemptIdFor } from '../../activities/dispatch';
import { callbackInbox } from '../../db/schema';
import { startE2E, startTaskWorkflow, type E2E } from '../support/e2e';
import { eventually, startWorker } from '../support/stack';
import { eventsWhere } from './support';

let e: E2E;
let polls = 0;
/** The task whose next applyInbox that leaves it waiting is held until the provider's success has woken the workflow. */
let holdApplyOf: string | null = null;
let heldFacts: TaskFacts | null = null;

before(async () => {
  // The provider finishes 3 s after the submit; the poll fallback is 10 minutes away.
  e = await startE2E('lean', { POLL_INITIAL_MS: '600000', POLL_MAX_MS: '600000', PROVIDER_HTTP_TIMEOUT_MS: '15000' }, { generationMs: 3_000, worker: false });
  e.worker = await startWorker(e.config, e.tdb.database, {
    wrapActivities: (a) => ({
      ...a,
      async pollProvider(taskId: string) {
        polls += 1;
        return a.pollProvider(taskId);
      },
      // A wait's reads are this activity's attempts once its first poll is due (decision 0050).
      async awaitProviderChange(...args: Parameters<typeof a.awaitProviderChange>) {
        polls += 1;
        return a.awaitProviderChange(...args);
      },
      async applyInbox(taskId: string) {
        const facts = await a.applyInbox(taskId);
        if (holdApplyOf === taskId && (facts.status === 'SUBMITTED' || facts.status === 'RUNNING')) {
          holdApplyOf = null;
          heldFacts = facts;
          // Still inside this apply: the success callback reaches the inbox, and its wake the
          // workflow, after the apply read the inbox and before it returns.
          const signalsBefore = await signalsOf(taskId);
          await eventually(async () => ((await succeededRows(taskId)) > 0 ? true : undefined), 10_000, 20);
          await eventually(async () => ((await signalsOf(taskId)) > signalsBefore ? true : undefined), 10_000, 20);
        }
        return facts;
      },
    }),
  });
});
after(async () => {
  await e?.close();
});
beforeEach(() => {
  e.sim.sim.clearFaults();
  polls = 0;
  holdApplyOf = null;
  heldFacts = null;
});

async function succeededRows(taskId: string): Promise<number> {
  const rows = await e.tdb.database.db
    .select({ id: callbackInbox.inbox_id })
    .from(callbackInbox)
    .where(and(eq(callbackInbox.task_id, taskId), eq(callbackInbox.event_type, 'succeeded')));
  return rows.length;
}

async function signalsOf(taskId: string): Promise<number> {
  const history = await e.client.workflow.getHandle(e.api.facade.workflowIdFor(taskId)).fetchHistory();
  return eventsWhere(history, (ev) => ev.workflowExecutionSignaledEventAttributes).length;
}

/** SUCCEEDED well before the poll fallback, never polled, one provider job, charged once. */
async function convergedByWakes(taskId: string) {
  await e.waitForStatus(taskId, 'SUCCEEDED', 45_000);
  assert.equal(polls, 0, 'no provider poll: the wakes alone moved the task');
  assert.equal(e.sim.jobsFor(attemptIdFor(taskId, 1)), 1, 'one provider job');
  assert.deepEqual(await e.ledgerOf(taskId), { RESERVE: '4.500000', SETTLE: '4.500000', RELEASE: '0.000000' });
}

test('a callback that lands while submitAttempt runs is applied as soon as the submit returns, without a poll', async () => {
  // The provider creates the job at once but answers the submit only after 6 s: the job's start
  // and success callbacks (and their wakes) arrive while the submit activity is still running.
  e.sim.sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 6_000, submit_fault_count: 1 });
  const taskId = await e.createTask('lean-in-submit');
  await eventually(async () => ((await succeededRows(taskId)) > 0 ? true : undefined), 30_000, 20);
  await convergedByWakes(taskId);
});

test('a callback that arrives during the trailing applyInbox wakes the next wait at once', async () => {
  const taskId = await e.createTask('lean-in-apply');
  holdApplyOf = taskId;
  await convergedByWakes(taskId);
  assert.ok(heldFacts !== null, 'the held apply ran: the start callback woke the workflow, the success came during its apply');
});

test('a wake taken into continue-as-new is not lost: every run starts by applying the inbox', async () => {
  // One step per run: the success callback's wake reaches the run whose submit is in flight,
  // and that run continues as new when the submit returns, taking the wake with it.
  e.sim.sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 6_000, submit_fault_count: 1 });
  const { taskId, handle } = await startTaskWorkflow(e, 'lean-can', { stepsPerRun: 1 });
  await convergedByWakes(taskId);
  // Some run was woken and continued as new without acting on the wake (no activity, local or
  // not, after it): the chain of runs is followed from the first one.
  let carried = 0;
  let runs = 0;
  for (let runId: string | undefined = handle.firstExecutionRunId; runId; runs++) {
    const history: History = await e.client.workflow.getHandle(handle.workflowId, runId).fetchHistory();
    const events = history.events ?? [];
    const last = events.at(-1)?.workflowExecutionContinuedAsNewEventAttributes;
    const lastSignal = events.findLastIndex((ev) => ev.workflowExecutionSignaledEventAttributes);
    const actedAfter = events.slice(lastSignal + 1).some((ev) => ev.markerRecordedEventAttributes || ev.activityTaskScheduledEventAttributes);
    if (last && lastSignal >= 0 && !actedAfter) carried += 1;
    runId = last?.newExecutionRunId ?? undefined;
  }
  assert.ok(runs >= 3, `the task spanned several runs (${runs})`);
  assert.ok(carried >= 1, 'a run continued as new with a wake it had not acted on');
});
