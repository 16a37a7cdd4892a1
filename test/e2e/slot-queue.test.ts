// The slot queue end to end (docs/providers.md "The slot queue"), with real workflows: a task
// that finds its provider full sleeps until a grant wakes it (no retry loop), a workflow reset
// while waiting or just after a grant takes no second slot and loses no grant, and a worker
// SIGKILLed while its attempt holds the slot leaks nothing: the next waiter goes once that
// attempt has resolved.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { and, eq, inArray } from 'drizzle-orm';
import { callbackInbox, providerControl, slotWait, taskAttempt, taskTransition } from '../../db/schema';
import { FINISHED_PROVIDER_JOB_STATES } from '../../domain/states';
import { changeProviderControl } from '../../ops/providers';
import { startNodeProcess, type ManagedProcess } from '../../harness';
import { startE2E, type E2E } from '../support/e2e';
import { configToEnv, eventually, freePort, startWorker } from '../support/stack';
import { resetWithCli, resultOfRun, scheduledActivities } from '../workflows/support';

let e: E2E;
let child: ManagedProcess | null = null;

before(async () => {
  e = await startE2E(
    'slots',
    { PROVIDER_HTTP_TIMEOUT_MS: '8000', UNKNOWN_PROOF_DELAY_MS: '1000', BULKHEAD_RAMP_MS: '0', SLOT_WAIT_FALLBACK_MS: '120000' },
    { generationMs: 2_000 },
  );
});
after(async () => {
  await child?.stop('SIGKILL', 1000);
  await e?.close();
});

const setLimit = (n: number) =>
  e.tdb.database.db
    .insert(providerControl)
    .values({ provider: 'replicate', max_in_flight: n, queue_limit: n })
    .onConflictDoUpdate({ target: providerControl.provider, set: { max_in_flight: n, queue_limit: n } });
const attemptOf = async (taskId: string) => (await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)))[0];
const waitRow = async (taskId: string) => (await e.tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, taskId)))[0];
const workflowIdOf = (taskId: string) => e.api.facade.workflowIdFor(taskId);
/** When the task's attempt went to the provider (its SUBMITTING → SUBMITTED or → SUBMIT_UNKNOWN transition). */
async function leftStatusAt(taskId: string, from: string): Promise<Date> {
  const rows = await e.tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId));
  const row = rows.find((r) => r.from_status === from);
  assert.ok(row, `${taskId} left ${from}`);
  return row.created_at;
}
/**
 * The attempt's one job as the provider reports it (Replicate's documented GET
 * /v1/predictions/{id}: created_at, completed_at), read from the simulator's clock: the proof
 * that two jobs never ran at once at a 1-slot provider is the provider's own timeline.
 */
async function jobTimes(attemptId: string): Promise<{ created: number; completed: number | null }> {
  const [jobId] = e.sim.jobIdsFor(attemptId);
  assert.ok(jobId, `a job for attempt ${attemptId}`);
  const res = await fetch(`${e.sim.baseUrl}/replicate/v1/predictions/${jobId}`, {
    headers: { authorization: `Bearer ${e.config.PROVIDER_REPLICATE_API_TOKEN}` },
  });
  assert.equal(res.status, 200);
  const p = (await res.json()) as { created_at: string; completed_at: string | null };
  return { created: Date.parse(p.created_at), completed: p.completed_at === null ? null : Date.parse(p.completed_at) };
}
/** The waiter's job was created only after the holder's had completed, on the provider's clock. */
async function assertNoOverlapAtProvider(holderAttemptId: string, waiterAttemptId: string): Promise<void> {
  const holderJob = await jobTimes(holderAttemptId);
  const waiterJob = await jobTimes(waiterAttemptId);
  assert.ok(holderJob.completed !== null, "the holder's job completed");
  assert.ok(
    waiterJob.created >= holderJob.completed,
    `the waiter's job was created ${waiterJob.created - holderJob.completed} ms after the holder's completed: two jobs at once at a 1-slot provider`,
  );
}

test('a task that finds its provider full waits as a fact and sleeps; the freed slot wakes it at once, with one submit call and no retry loop', async () => {
  await setLimit(1);
  const first = await e.createTask('slots-first');
  await eventually(async () => ((await attemptOf(first))?.submit_state === 'SUBMITTED' ? true : undefined), 30_000, 50);
  const second = await e.createTask('slots-second');
  const waiting = await eventually(async () => waitRow(second), 30_000, 50);
  assert.equal(waiting.granted_at, null);
  const shown = await e.getTask(second);
  assert.equal(shown.status, 'SUBMITTING');
  assert.equal(shown.queue?.position, 1, 'GET /v1/tasks/:id shows its place');
  assert.equal(shown.queue?.reason, 'provider_full');
  await e.waitForStatus(first, 'SUCCEEDED', 30_000);
  await e.waitForStatus(second, 'SUCCEEDED', 30_000);
  const freedAt = await leftStatusAt(first, 'RUNNING');
  const submittedAt = await leftStatusAt(second, 'SUBMITTING');
  assert.ok(
    submittedAt.getTime() - freedAt.getTime() < 5_000,
    `woken by the grant, not the ${e.config.SLOT_WAIT_FALLBACK_MS} ms fallback (${submittedAt.getTime() - freedAt.getTime()} ms)`,
  );
  const history = await e.client.workflow.getHandle(workflowIdOf(second)).fetchHistory();
  const submits = scheduledActivities(history).filter((a) => a === 'submitAttempt');
  assert.ok(submits.length <= 3, `the waiter scheduled submitAttempt ${submits.length} times`);
  // The old loop retried the activity every 2–3 s (a retry is an attempt of one scheduled activity).
  const retries = Math.max(...(history.events ?? []).map((ev) => ev.activityTaskStartedEventAttributes?.attempt ?? 1));
  assert.equal(retries, 1, 'no activity retried while waiting for the slot');
  assert.ok(
    (history.events ?? []).some((ev) => ev.timerStartedEventAttributes),
    'it slept on a (fallback) timer',
  );
  const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, second));
  assert.equal(e.sim.jobsFor(attempt!.attempt_id), 1);
  await assertNoOverlapAtProvider((await attemptOf(first))!.attempt_id, attempt!.attempt_id);
});

test('reset while waiting, and reset just after a grant nobody was woken for: one slot, the grant kept, one provider job', async () => {
  await setLimit(1);
  const holder = await e.createTask('slots-reset-holder');
  await eventually(async () => ((await attemptOf(holder))?.submit_state === 'SUBMITTED' ? true : undefined), 30_000, 50);
  const waiter = await e.createTask('slots-reset-waiter');
  await eventually(async () => waitRow(waiter), 30_000, 50);
  // Reset while waiting: the new run re-claims and keeps its place (the same row, the same since).
  const before = await waitRow(waiter);
  const run2 = await resetWithCli(workflowIdOf(waiter), { type: 'FirstWorkflowTask' }, 'test: reset while waiting for a slot');
  await eventually(
    async () => ((await e.client.workflow.getHandle(workflowIdOf(waiter), run2).fetchHistory()).events?.length ?? 0) > 10 || undefined,
    15_000,
    100,
  );
  const afterReset = await waitRow(waiter);
  assert.equal(afterReset?.since.getTime(), before?.since.getTime(), 'its place in the queue survived the reset');
  assert.equal(afterReset?.granted_at, null);
  // Stop the worker so that nobody hears the grant, then grant by raising the limit.
  await e.worker?.stop();
  e.worker = null;
  await changeProviderControl(e.tdb.database.db, {
    provider: 'replicate',
    change: { kind: 'limit', maxInFlight: 2 },
    actor: 'test',
    reason: 'grant while no worker listens',
  });
  assert.ok((await waitRow(waiter))?.granted_at, 'granted in Postgres');
  // Reset just after the grant, then bring a worker back: the new run re-reads the grant and uses it.
  const run3 = await resetWithCli(workflowIdOf(waiter), { type: 'FirstWorkflowTask' }, 'test: reset just after a grant');
  e.worker = await startWorker(e.config, e.tdb.database);
  assert.deepEqual(await resultOfRun(e.client, workflowIdOf(waiter), run3), { taskId: waiter, status: 'SUCCEEDED' });
  const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, waiter));
  assert.equal(e.sim.jobsFor(attempt!.attempt_id), 1, 'one provider job');
  assert.equal(await waitRow(waiter), undefined, 'the grant was used, not left holding a slot');
  await e.waitForStatus(holder, 'SUCCEEDED', 30_000);
});

test('a worker SIGKILLed while its attempt holds the only slot: the slot is not leaked, and the waiter goes once that attempt has resolved', async () => {
  await setLimit(1);
  await e.worker?.stop();
  e.worker = null;
  const env = { ...configToEnv(e.config), DATABASE_URL: e.tdb.url, WORKER_METRICS_PORT: String(await freePort()), LOG_LEVEL: 'warn' };
  child = startNodeProcess('doomed-worker', 'workers/main.ts', env);
  // The provider takes the request and answers late: the worker dies in the call, holding the slot.
  e.sim.sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 4000, submit_fault_count: 1 });
  const holder = await e.createTask('slots-crash-holder');
  await eventually(async () => ((await attemptOf(holder))?.submit_state === 'SUBMITTING' ? true : undefined), 60_000, 50);
  const waiter = await e.createTask('slots-crash-waiter');
  await eventually(async () => waitRow(waiter), 30_000, 50);
  await child.stop('SIGKILL', 1000);
  child = null;
  e.worker = await startWorker(e.config, e.tdb.database);
  await e.waitForStatus(holder, 'SUCCEEDED', 90_000);
  await e.waitForStatus(waiter, 'SUCCEEDED', 60_000);
  const holderAttempt = await attemptOf(holder);
  const waiterAttempt = await attemptOf(waiter);
  assert.equal(e.sim.jobsFor(holderAttempt!.attempt_id), 1);
  assert.equal(e.sim.jobsFor(waiterAttempt!.attempt_id), 1);
  // The holder's slot was held through SUBMIT_UNKNOWN and freed only when its job finished: the
  // first evidence of that is either the provider's finished callback in the inbox (which frees
  // the slot before the workflow applies it: db/slot-queue.ts holdsSlot) or the task leaving
  // RUNNING (SUBMITTED) on a poll.
  const left = await leftStatusAt(holder, 'RUNNING').catch(() => leftStatusAt(holder, 'SUBMITTED'));
  const finishedCallbacks = await e.tdb.database.db
    .select({ at: callbackInbox.received_at })
    .from(callbackInbox)
    .where(and(eq(callbackInbox.task_id, holder), inArray(callbackInbox.event_type, [...FINISHED_PROVIDER_JOB_STATES])));
  const holderFreed = Math.min(left.getTime(), ...finishedCallbacks.map((r) => r.at.getTime()));
  const waiterWent = (await leftStatusAt(waiter, 'SUBMITTING')).getTime();
  assert.ok(
    waiterWent >= holderFreed,
    `the waiter went only after the holder's job finished: never two jobs at a 1-slot provider (went ${waiterWent - holderFreed} ms after)`,
  );
  await assertNoOverlapAtProvider(holderAttempt!.attempt_id, waiterAttempt!.attempt_id);
});
