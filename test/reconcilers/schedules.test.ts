// Each reconciler, run by its Temporal Schedule (triggered through the schedule handle, as the
// Temporal UI's "Trigger" does), against the inconsistency it exists for: it finds it, mends it
// through the state machine, and a second run changes nothing. Retention removes rows past their
// window only, and a task that waits across a retention run still completes.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { MockActivityEnvironment } from '@temporalio/testing';
import { and, eq, sql } from 'drizzle-orm';
import { Registry } from 'prom-client';
import { createTaskActivities } from '../../activities';
import { createTask as createTaskRow, testActivityDeps } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import { recordProviderEvent } from '../../db/inbox';
import { callbackInbox, creditAccount, creditLedger, generationTask, outboxEvent, reconcileRun, taskAttempt, type ReconcileRunRow } from '../../db/schema';
import { registerReconcileMetrics } from '../../observability/metrics';
import { RECONCILERS } from '../../reconcilers';
import { ensureReconcileSchedules, scheduleIdFor } from '../../reconcilers/schedules';
import { queues } from '../../temporal/queues';
import { defaultRequest, startE2E, type E2E } from '../support/e2e';
import { eventually } from '../support/stack';

const registry = new Registry();
const recordRun = registerReconcileMetrics(registry);
let e: E2E;
before(async () => {
  e = await startE2E(
    'reconcilers',
    // Every reconciler acts at once (no grace); the unknown-outcome lookup waits two minutes, so
    // only a wake moves a task sooner; accept-then-hang submits time out quickly.
    { RECONCILE_GRACE_MS: '0', RECONCILE_LONG_RUNNING_MS: '600000', PROVIDER_HTTP_TIMEOUT_MS: '700', UNKNOWN_PROOF_DELAY_MS: '120000' },
    // No outbox relay: the outbox reconciler is what publishes a lost start here.
    { reconcile: { onRun: recordRun }, outboxRelay: false },
  );
  // Hourly: in this file they run when triggered.
  await ensureReconcileSchedules(
    e.client,
    e.config.TEMPORAL_TASK_QUEUE,
    RECONCILERS.map((r) => ({ name: r.name, intervalMs: 3_600_000 })),
  );
});
after(async () => {
  if (!e) return;
  for (const r of RECONCILERS)
    await e.client.schedule
      .getHandle(scheduleIdFor(e.config.TEMPORAL_TASK_QUEUE, r.name))
      .delete()
      .catch(() => undefined);
  await e.close();
});

const db = () => e.tdb.database.db;
const fence = () => ({ scope: e.config.FENCE_SCOPE, region: e.config.REGION, epoch: 1 });

/** Triggers the reconciler's Schedule and waits for the run it records. */
async function triggerRun(name: string): Promise<ReconcileRunRow> {
  const handle = e.client.schedule.getHandle(scheduleIdFor(e.config.TEMPORAL_TASK_QUEUE, name));
  // Overlap policy SKIP: a trigger while a run is going is dropped.
  await eventually(async () => ((await handle.describe()).info.runningActions.length === 0 ? true : undefined), 20_000);
  const before = await db().select({ id: reconcileRun.run_id }).from(reconcileRun).where(eq(reconcileRun.reconciler, name));
  await handle.trigger();
  return eventually(async () => {
    const runs = await db().select().from(reconcileRun).where(eq(reconcileRun.reconciler, name)).orderBy(reconcileRun.started_at);
    return runs.length > before.length ? runs.at(-1) : undefined;
  }, 30_000);
}

/** A task committed as the API commits one, with no workflow started (its start was lost). */
async function committedTask(key: string) {
  const created = await createTaskRow(db(), fence(), {
    tenantId: e.tenant.tenantId,
    idempotencyKey: `${key}-${Date.now()}`,
    body: { ...defaultRequest, resolution: '720p', prompt: key, priority: 0 },
  });
  return created.task.task_id;
}

const publishedAt = async (taskId: string) => (await db().select().from(outboxEvent).where(eq(outboxEvent.aggregate_id, taskId)))[0]!.published_at;

describe('the reconciler Schedules', () => {
  test('creating the Schedules again changes nothing and keeps an operator pause', async () => {
    const q = e.config.TEMPORAL_TASK_QUEUE;
    const handle = e.client.schedule.getHandle(scheduleIdFor(q, 'billing'));
    await handle.pause('operator pause (test)');
    const ids = await ensureReconcileSchedules(
      e.client,
      q,
      RECONCILERS.map((r) => ({ name: r.name, intervalMs: 3_600_000 })),
    );
    assert.equal(ids.length, RECONCILERS.length);
    const d = await handle.describe();
    assert.equal(d.state.paused, true, 'still paused');
    assert.equal(d.policies.overlap, 'SKIP');
    await handle.unpause('test');
  });

  test("a reconciler's workflow runs on the generation queue and its activity on the reconcile queue, whose worker runs no workflows", async () => {
    const q = e.config.TEMPORAL_TASK_QUEUE;
    assert.equal(e.worker!.worker.reconcile!.options.workflowBundle, undefined, 'the reconcile worker has no workflow bundle (no workflow thread)');
    const run = await triggerRun('billing');
    assert.equal(run.error, null);
    const { info } = await e.client.schedule.getHandle(scheduleIdFor(q, 'billing')).describe();
    const action = info.recentActions.at(-1)!.action;
    // The run's row is the activity's; the workflow completes in its next workflow task, a moment later.
    const runHandle = e.client.workflow.getHandle(action.workflow.workflowId, action.workflow.firstExecutionRunId);
    await runHandle.result();
    const events = (await runHandle.fetchHistory()).events ?? [];
    assert.equal(events[0]?.workflowExecutionStartedEventAttributes?.taskQueue?.name, queues.generation(q));
    const scheduled = events.flatMap((ev) => (ev.activityTaskScheduledEventAttributes ? [ev.activityTaskScheduledEventAttributes] : []));
    assert.deepEqual(
      scheduled.map((a) => [a.activityType?.name, a.taskQueue?.name]),
      [['runReconciler', queues.reconcile(q)]],
    );
    assert.ok(events.at(-1)?.workflowExecutionCompletedEventAttributes, 'the run completed');
  });

  test("a deploy: the Schedule's run left on the reconcile queue (no workflow poller there) is ended at start, and the next run goes to the generation queue", async () => {
    const q = e.config.TEMPORAL_TASK_QUEUE;
    const scheduleId = scheduleIdFor(q, 'outbox');
    const handle = e.client.schedule.getHandle(scheduleId);
    // The action as the previous version wrote it: the workflow and its activity on the reconcile queue.
    await handle.update((prev) => ({
      ...prev,
      action: { ...prev.action, type: 'startWorkflow', workflowType: 'reconcileWorkflow', args: [{ reconciler: 'outbox' }], taskQueue: queues.reconcile(q) },
    }));
    await handle.trigger();
    const stuck = await eventually(async () => (await handle.describe()).info.recentActions.at(-1)?.action.workflow, 20_000);
    const stuckRun = e.client.workflow.getHandle(stuck.workflowId, stuck.firstExecutionRunId);
    // Listed by visibility, as the start-up finds it.
    await eventually(async () => ((await e.client.workflow.count(`WorkflowId = '${stuck.workflowId}'`)).count === 1 ? true : undefined), 20_000);
    assert.equal((await stuckRun.describe()).taskQueue, queues.reconcile(q));
    await sleep(2_000);
    assert.equal((await stuckRun.describe()).status.name, 'RUNNING', 'no worker takes its workflow task');

    await ensureReconcileSchedules(
      e.client,
      q,
      RECONCILERS.map((r) => ({ name: r.name, intervalMs: 3_600_000 })),
    );
    assert.equal((await stuckRun.describe()).status.name, 'TERMINATED');
    const run = await triggerRun('outbox');
    assert.equal(run.error, null);
  });

  test('outbox: an unpublished start is published by the Schedule and the task runs; a second run changes nothing', async () => {
    const taskId = await committedTask('outbox-lost-start');
    assert.equal(await publishedAt(taskId), null);
    const run = await triggerRun('outbox');
    assert.equal(run.error, null);
    assert.ok(
      run.findings.some((f) => f.kind === 'unpublished-outbox' && f.taskId === taskId),
      JSON.stringify(run.findings),
    );
    assert.equal(run.changed, 1);
    assert.notEqual(await publishedAt(taskId), null);
    await e.waitForStatus(taskId, 'SUCCEEDED');
    const again = await triggerRun('outbox');
    assert.equal(again.changed, 0);
    assert.equal(again.findings.length, 0);
    const metrics = await registry.metrics();
    assert.match(metrics, /vidorch_reconcile_last_run_changed\{reconciler="outbox"\} 0/);
    assert.match(metrics, /vidorch_reconcile_last_run_timestamp_seconds\{reconciler="outbox"\} \d+/);
  });

  test('billing: a terminal task with its reservation open is closed with its recorded charge; a second run changes nothing', async () => {
    const taskId = await committedTask('billing-open');
    // A terminal write whose settlement never happened (the inconsistency this reconciler is for).
    await db().update(outboxEvent).set({ published_at: new Date() }).where(eq(outboxEvent.aggregate_id, taskId));
    await db().update(generationTask).set({ status: 'FAILED', terminal_at: new Date(), settled_amount: '0' }).where(eq(generationTask.task_id, taskId));
    const [accountBefore] = await db().select().from(creditAccount).where(eq(creditAccount.tenant_id, e.tenant.tenantId));
    const [task] = await db().select().from(generationTask).where(eq(generationTask.task_id, taskId));

    const run = await triggerRun('billing');
    assert.ok(
      run.findings.some((f) => f.kind === 'open-reservation' && f.taskId === taskId),
      JSON.stringify(run.findings),
    );
    assert.equal(run.changed, 1);
    const ledger = await e.ledgerOf(taskId);
    assert.equal(Number(ledger['SETTLE']), 0);
    assert.equal(Number(ledger['RELEASE']), Number(task!.reserved_amount));
    const [accountAfter] = await db().select().from(creditAccount).where(eq(creditAccount.tenant_id, e.tenant.tenantId));
    assert.equal(Number(accountAfter!.reserved), Number(accountBefore!.reserved) - Number(task!.reserved_amount));
    assert.equal(accountAfter!.balance, accountBefore!.balance);
    assert.ok(!run.findings.some((f) => f.kind === 'account-drift'), 'the account agrees with its ledger');

    const again = await triggerRun('billing');
    assert.equal(again.changed, 0);
    assert.ok(!again.findings.some((f) => f.taskId === taskId));
  });

  test('provider: a SUBMIT_UNKNOWN task nobody looks up gets its workflow back, which finds the job; a second run changes nothing', async () => {
    const taskId = await committedTask('provider-stuck-unknown');
    await db().update(outboxEvent).set({ published_at: new Date() }).where(eq(outboxEvent.aggregate_id, taskId));
    // The steps up to an unknown submit, run by hand: the job is created, the answer never comes.
    const acts = createTaskActivities(testActivityDeps(e.config, { db: e.tdb.database, storage: buildStorage(e.config), providers: buildProviders(e.config) }));
    const env = new MockActivityEnvironment();
    e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1, callbacks: 'off' });
    await env.run(acts.dispatchTask, taskId);
    await env.run(acts.prepareAttempt, taskId);
    await env.run(acts.submitAttempt, taskId);
    e.sim.sim.clearFaults();
    const [stuck] = await db().select().from(generationTask).where(eq(generationTask.task_id, taskId));
    assert.equal(stuck!.status, 'SUBMIT_UNKNOWN');
    // Its lookup has long been due.
    await db()
      .update(taskAttempt)
      .set({ next_poll_at: new Date(Date.now() - 60_000) })
      .where(eq(taskAttempt.task_id, taskId));

    const run = await triggerRun('provider');
    const finding = run.findings.find((f) => f.taskId === taskId);
    assert.ok(finding, JSON.stringify(run.findings));
    assert.match(finding.detail, /submit outcome unknown.*workflow started/);
    assert.ok(run.changed >= 1);
    await e.waitForStatus(taskId, 'SUCCEEDED');
    const [attempt] = await db().select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    assert.equal(e.sim.jobsFor(attempt!.attempt_id), 1, 'the job found, none made again');

    const again = await triggerRun('provider');
    assert.equal(again.changed, 0);
    assert.ok(!again.findings.some((f) => f.taskId === taskId));
  });

  test('output: rescues nobody runs are started earliest URL expiry first and complete; a second run changes nothing', async () => {
    const acts = createTaskActivities(testActivityDeps(e.config, { db: e.tdb.database, storage: buildStorage(e.config), providers: buildProviders(e.config) }));
    const env = new MockActivityEnvironment();
    /** A task whose provider succeeded and whose workflow is gone: the steps up to PROVIDER_SUCCEEDED by hand. */
    const succeededAtProvider = async (key: string) => {
      const taskId = await committedTask(key);
      await db().update(outboxEvent).set({ published_at: new Date() }).where(eq(outboxEvent.aggregate_id, taskId));
      await env.run(acts.dispatchTask, taskId);
      await env.run(acts.prepareAttempt, taskId);
      await env.run(acts.submitAttempt, taskId);
      return taskId;
    };
    const later = await succeededAtProvider('output-later');
    const sooner = await succeededAtProvider('output-sooner');
    for (const taskId of [later, sooner]) {
      await eventually(
        async () => {
          await env.run(acts.pollProvider, taskId);
          await env.run(acts.applyInbox, taskId);
          const [t] = await db().select().from(generationTask).where(eq(generationTask.task_id, taskId));
          return t!.status === 'PROVIDER_SUCCEEDED' ? true : undefined;
        },
        20_000,
        300,
      );
    }
    await db()
      .update(taskAttempt)
      .set({ output_deadline_at: new Date(Date.now() + 50 * 60_000) })
      .where(eq(taskAttempt.task_id, later));
    await db()
      .update(taskAttempt)
      .set({ output_deadline_at: new Date(Date.now() + 20 * 60_000) })
      .where(eq(taskAttempt.task_id, sooner));

    const run = await triggerRun('output');
    const order = run.findings.filter((f) => f.kind === 'stuck-rescue').map((f) => f.taskId);
    assert.deepEqual(order, [sooner, later], JSON.stringify(run.findings));
    assert.equal(run.changed, 2);
    await e.waitForStatus(sooner, 'SUCCEEDED');
    await e.waitForStatus(later, 'SUCCEEDED');
    const again = await triggerRun('output');
    assert.equal(again.changed, 0);
    assert.equal(again.findings.length, 0);
  });

  test('callbacks: an inbox row nobody signalled is applied once the Schedule wakes its task; a second run changes nothing', async () => {
    e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1, callbacks: 'off', list: 'error_5xx' });
    const taskId = await e.createTask(`callbacks-unsignalled-${Date.now()}`, { ...defaultRequest, prompt: 'unsignalled inbox' });
    await e.waitForWorkflowStatus(taskId, 'SUBMIT_UNKNOWN');
    e.sim.sim.clearFaults();
    const [attempt] = await db().select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    const [jobId] = e.sim.jobIdsFor(attempt!.attempt_id);
    await eventually(async () => ((await buildProviders(e.config)['replicate']!.getJob(jobId!)).state === 'succeeded' ? true : undefined));
    const job = await buildProviders(e.config)['replicate']!.getJob(jobId!);
    // The job's final state reached the inbox but the wake was lost (the API died after the insert).
    await recordProviderEvent(db(), {
      provider: 'replicate',
      job,
      providerEventId: null,
      source: 'callback',
      attemptId: attempt!.attempt_id,
      taskId,
      receivedRegion: e.config.REGION,
      signatureValid: true,
      raw: { unsignalled: true },
    });
    const run = await triggerRun('callbacks');
    assert.ok(
      run.findings.some((f) => f.kind === 'unprocessed-inbox' && f.taskId === taskId && /woken/.test(f.detail)),
      JSON.stringify(run.findings),
    );
    assert.equal(run.changed, 1);
    // The next lookup is two minutes away: only the wake can have moved it.
    await e.waitForStatus(taskId, 'SUCCEEDED', 30_000);
    assert.equal(e.sim.jobsFor(attempt!.attempt_id), 1);
    const again = await triggerRun('callbacks');
    assert.equal(again.changed, 0);
    assert.ok(!again.findings.some((f) => f.taskId === taskId));
  });
});

describe('retention', () => {
  test('rows past their window are deleted, rows inside it are kept, and a task waiting across the run completes', async () => {
    const days = (n: number) => new Date(Date.now() - n * 86_400_000);
    // A finished task (from the tests above) with old processed inbox rows: past the window.
    const [done] = await db().select().from(generationTask).where(eq(generationTask.status, 'SUCCEEDED')).limit(1);
    assert.ok(done);
    await db()
      .update(callbackInbox)
      .set({ processed_at: days(e.config.RETENTION_INBOX_DAYS + 1) })
      .where(eq(callbackInbox.task_id, done.task_id));
    const oldInbox = await db().select({ id: callbackInbox.inbox_id }).from(callbackInbox).where(eq(callbackInbox.task_id, done.task_id));
    assert.ok(oldInbox.length > 0);

    // A task that waits on the provider (lookup two minutes away) with an equally old processed inbox
    // row: evidence of its job, which it still needs.
    e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1, callbacks: 'off', list: 'error_5xx' });
    const waiting = await e.createTask(`retention-waiting-${Date.now()}`, { ...defaultRequest, prompt: 'waits across retention' });
    await e.waitForWorkflowStatus(waiting, 'SUBMIT_UNKNOWN');
    e.sim.sim.clearFaults();
    const [attempt] = await db().select().from(taskAttempt).where(eq(taskAttempt.task_id, waiting));
    const [jobId] = e.sim.jobIdsFor(attempt!.attempt_id);
    await eventually(async () => ((await buildProviders(e.config)['replicate']!.getJob(jobId!)).state === 'succeeded' ? true : undefined));
    const job = await buildProviders(e.config)['replicate']!.getJob(jobId!);
    await recordProviderEvent(db(), {
      provider: 'replicate',
      job: { ...job, state: 'running', rawStatus: 'processing', outputUrl: null, updatedAt: new Date(Date.now() - 60_000) },
      providerEventId: 'retention-old-start',
      source: 'callback',
      attemptId: attempt!.attempt_id,
      taskId: waiting,
      receivedRegion: e.config.REGION,
      signatureValid: true,
      raw: { old: true },
    });
    await db()
      .update(callbackInbox)
      .set({ processed_at: days(e.config.RETENTION_INBOX_DAYS + 1), received_at: days(e.config.RETENTION_INBOX_DAYS + 1) })
      .where(eq(callbackInbox.task_id, waiting));

    // Outbox: one published two days ago (past), one published now (inside).
    const [oldOutbox, newOutbox] = await db()
      .select()
      .from(outboxEvent)
      .where(sql`published_at IS NOT NULL`)
      .limit(2);
    assert.ok(oldOutbox && newOutbox);
    await db()
      .update(outboxEvent)
      .set({ published_at: days(2) })
      .where(eq(outboxEvent.event_id, oldOutbox.event_id));
    await db().update(outboxEvent).set({ published_at: new Date() }).where(eq(outboxEvent.event_id, newOutbox.event_id));
    const recordCounts = async () => {
      const { rows } = await e.tdb.database.db.execute(
        sql`SELECT (SELECT count(*) FROM task_transition)::int AS t, (SELECT count(*) FROM credit_ledger)::int AS l, (SELECT count(*) FROM ops_audit)::int AS a`,
      );
      return rows[0];
    };
    const recordBefore = await recordCounts();

    const run = await triggerRun('retention');
    assert.equal(run.error, null);
    assert.ok(
      run.findings.some((f) => f.kind === 'inbox-expired'),
      JSON.stringify(run.findings),
    );
    assert.equal(
      (await db().select().from(callbackInbox).where(eq(callbackInbox.task_id, done.task_id))).length,
      0,
      "the finished task's old inbox rows are gone",
    );
    const kept = await db()
      .select()
      .from(callbackInbox)
      .where(and(eq(callbackInbox.task_id, waiting), eq(callbackInbox.provider_event_id, 'retention-old-start')));
    assert.equal(kept.length, 1, 'the waiting task keeps its evidence');
    assert.equal((await db().select().from(outboxEvent).where(eq(outboxEvent.event_id, oldOutbox.event_id))).length, 0);
    assert.equal((await db().select().from(outboxEvent).where(eq(outboxEvent.event_id, newOutbox.event_id))).length, 1);
    assert.deepEqual(await recordCounts(), recordBefore, 'transitions, ledger and audit untouched');
    assert.ok((await db().select().from(creditLedger)).length > 0);

    // The waiting task carries on: its job's final state arrives and it completes with one job.
    await recordProviderEvent(db(), {
      provider: 'replicate',
      job,
      providerEventId: null,
      source: 'callback',
      attemptId: attempt!.attempt_id,
      taskId: waiting,
      receivedRegion: e.config.REGION,
      signatureValid: true,
      raw: { late: true },
    });
    await e.api.facade.wakeTask(waiting);
    await e.waitForStatus(waiting, 'SUCCEEDED', 30_000);
    assert.equal(e.sim.jobsFor(attempt!.attempt_id), 1);

    // Finished now, its old row is past the window like any other; then nothing is left to do.
    const next = await triggerRun('retention');
    assert.equal(next.changed, 1);
    assert.equal((await db().select().from(callbackInbox).where(eq(callbackInbox.provider_event_id, 'retention-old-start'))).length, 0);
    const again = await triggerRun('retention');
    assert.equal(again.changed, 0);
  });
});
