// Bulk review and bulk cancel (ops/review-batch.ts, ops/cancel-batch.ts): tasks parked for three
// causes are classified apart; a dry run for one class lists exactly that class; applied, it
// resolves through each task's resolveReview Update those whose evidence did not change, refuses
// the one that changed under it, keeps its rate per tenant and provider, and is ONE audited batch.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { escalate } from '../../activities/escalate';
import { escalateAttempt } from '../../activities/provider-reads';
import { buildProviders, buildStorage } from '../../config/services';
import { testActivityDeps } from '../support/deps';
import { recordProviderEvent } from '../../db/inbox';
import { generationTask, opsAudit, taskAttempt, tenant } from '../../db/schema';
import { checkPlan } from '../../ops/batch';
import { applyCancelBatch, planCancelBatch } from '../../ops/cancel-batch';
import { applyReviewBatch, classifyReviews, planReviewBatch } from '../../ops/review-batch';
import { defaultRequest, startE2E, type E2E } from '../support/e2e';
import { createTestTenant, eventually, http } from '../support/stack';

let e: E2E;
before(async () => {
  // Unknown submits park at once (lookups fail, a 1.5 s deadline); other jobs run two minutes.
  e = await startE2E(
    'review-batch',
    { PROVIDER_HTTP_TIMEOUT_MS: '700', UNKNOWN_PROOF_DELAY_MS: '1000', UNKNOWN_OUTCOME_DEADLINE_MS: '1500' },
    { generationMs: 120_000 },
  );
});
after(async () => {
  await e?.close();
});

const db = () => e.tdb.database.db;
const token = () => ({ scope: e.config.FENCE_SCOPE, region: e.config.REGION, epoch: 1 });
const deps = () => testActivityDeps(e.config, { db: e.tdb.database, storage: buildStorage(e.config), providers: buildProviders(e.config) });
const attemptOf = async (taskId: string) => (await db().select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)))[0]!;

/** A task whose job was accepted and now runs at the provider (no webhooks in this file). */
async function running(key: string): Promise<string> {
  const taskId = await e.createTask(`${key}-${Date.now()}`, { ...defaultRequest, prompt: key });
  await eventually(async () => (['SUBMITTED', 'RUNNING'].includes((await e.getTask(taskId)).status) ? true : undefined));
  return taskId;
}

describe('bulk review', () => {
  const unknown: string[] = [];
  let providerDefect = '';
  let codeDefect = '';

  before(async () => {
    e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 3, list: 'error_5xx', callbacks: 'off' });
    unknown.push(...(await Promise.all([0, 1, 2].map((i) => e.createTask(`unknown-${i}-${Date.now()}`, { ...defaultRequest, prompt: `unknown ${i}` })))));
    await Promise.all(unknown.map((id) => e.waitForWorkflowStatus(id, 'MANUAL_REVIEW')));
    e.sim.sim.setFaults({ list: 'error_5xx', callbacks: 'off' });
    // Parked by the escalations the code makes today: refused reads of a known job, and a step that failed for good.
    providerDefect = await running('provider-defect');
    codeDefect = await running('code-defect');
    const job = await attemptOf(providerDefect);
    assert.ok(
      await escalateAttempt(deps(), token(), providerDefect, job.attempt_id, {
        reason: `reads of job ${job.provider_job_id} are refused`,
        provider_job_id: job.provider_job_id,
        failure: 'refused',
        http_status: 403,
        consecutive_read_failures: 5,
      }),
    );
    assert.ok(
      await escalate(deps(), token(), codeDefect, {
        sourceEvent: 'workflow.escalate',
        detail: { reason: 'InvalidState: attempt is RUNNING but the step expected SUBMITTED (a bug since fixed)' },
      }),
    );
    for (const id of [providerDefect, codeDefect]) {
      await e.api.facade.wakeTask(id);
      await e.waitForWorkflowStatus(id, 'MANUAL_REVIEW');
    }
  });

  test('parked tasks are classified by cause', async () => {
    const classes = Object.fromEntries((await classifyReviews(db())).map((r) => [r.taskId, r.class]));
    for (const id of unknown) assert.equal(classes[id], 'unknown-outcome');
    assert.equal(classes[providerDefect], 'provider-defect');
    assert.equal(classes[codeDefect], 'code-defect');
  });

  test('an action that does not suit a class is refused, and a hand-edited batch file is refused', async () => {
    await assert.rejects(planReviewBatch(db(), { cls: 'missing-data', action: 'replay', limit: 10 }), /does not suit missing-data/);
    const plan = await planReviewBatch(db(), { cls: 'code-defect', action: 'replay', limit: 10 });
    assert.throws(
      () => checkPlan({ ...plan, items: [...plan.items, { ...plan.items[0]!, taskId: providerDefect }] }, 'review.resolve'),
      /changed after its dry run/,
    );
  });

  test('a dry run lists exactly its class; applied, it resolves the unchanged tasks at its rate, refuses the changed one, one audited batch', async () => {
    const plan = await planReviewBatch(db(), { cls: 'unknown-outcome', action: 'fail', limit: 100 });
    assert.deepEqual(plan.items.map((i) => i.taskId).sort(), [...unknown].sort());

    // Evidence reaches the inbox for one of them after the dry run (nothing wakes it).
    const changed = unknown[2]!;
    const attempt = await attemptOf(changed);
    const [jobId] = e.sim.jobIdsFor(attempt.attempt_id);
    const job = await buildProviders(e.config)['replicate']!.getJob(jobId!);
    await recordProviderEvent(db(), {
      provider: 'replicate',
      job: { ...job, state: 'running', rawStatus: 'processing', outputUrl: null },
      providerEventId: 'late-evidence',
      source: 'callback',
      attemptId: attempt.attempt_id,
      taskId: changed,
      receivedRegion: e.config.REGION,
      signatureValid: true,
      raw: { late: true },
    });

    const r = await applyReviewBatch(db(), e.api.facade, plan, { operator: 'ops-batch', reason: 'bulk fail of unknown outcomes', ratePerSecond: 2 });
    const byTask = Object.fromEntries(r.results.map((x) => [x.taskId, x]));
    assert.equal(byTask[changed]!.outcome, 'refused');
    assert.match(byTask[changed]!.detail, /evidence changed since the dry run/);
    const done = r.results.filter((x) => x.outcome === 'done');
    assert.equal(done.length, 2, JSON.stringify(r.results));
    // Same tenant and provider: at most 2 per second.
    assert.ok(Date.parse(done[1]!.at) - Date.parse(done[0]!.at) >= 450, `paced: ${done.map((d) => d.at).join(' ')}`);
    for (const d of done) {
      const [t] = await db().select().from(generationTask).where(eq(generationTask.task_id, d.taskId));
      assert.equal(t!.status, 'FAILED');
      const ledger = await e.ledgerOf(d.taskId);
      assert.equal(Number(ledger['RELEASE']), Number(t!.reserved_amount), 'credits released');
    }
    const [left] = await db().select().from(generationTask).where(eq(generationTask.task_id, changed));
    assert.equal(left!.status, 'MANUAL_REVIEW', 'the changed task is left for a new look');

    const batch = await db()
      .select()
      .from(opsAudit)
      .where(and(eq(opsAudit.action, 'review.resolve.batch'), eq(opsAudit.target_id, r.batchId)));
    assert.equal(batch.length, 1);
    assert.equal(batch[0]!.actor, 'operator:ops-batch');
    const detail = batch[0]!.detail as { results: { taskId: string; outcome: string }[]; dry_run_fingerprint: string };
    assert.equal(detail.results.length, 3);
    assert.equal(detail.dry_run_fingerprint, plan.fingerprint);
    const perTask = await db().select().from(opsAudit).where(eq(opsAudit.action, 'review.fail'));
    assert.deepEqual(perTask.map((a) => a.target_id).sort(), done.map((d) => d.taskId).sort(), 'each resolution audited by its Update');

    // The class now holds only the refused task; the other classes are untouched.
    const again = await planReviewBatch(db(), { cls: 'unknown-outcome', action: 'fail', limit: 100 });
    assert.deepEqual(
      again.items.map((i) => i.taskId),
      [changed],
    );
    const classes = Object.fromEntries((await classifyReviews(db())).map((x) => [x.taskId, x.class]));
    assert.equal(classes[providerDefect], 'provider-defect');
    assert.equal(classes[codeDefect], 'code-defect');
  });
});

describe('bulk replay', () => {
  test("replay of a code defect re-binds the attempt's own job: the task waits on the provider again, no second job", async () => {
    const plan = await planReviewBatch(db(), { cls: 'code-defect', action: 'replay', limit: 10 });
    assert.equal(plan.items.length, 1);
    const taskId = plan.items[0]!.taskId;
    const attempt = await attemptOf(taskId);
    const r = await applyReviewBatch(db(), e.api.facade, plan, { operator: 'ops-batch', reason: 'bug fixed in 1.4.2: replay', ratePerSecond: 2 });
    assert.equal(r.results[0]!.outcome, 'done', JSON.stringify(r.results));
    assert.match(r.results[0]!.detail, /now SUBMITTED/);
    const again = await attemptOf(taskId);
    assert.equal(again.attempt_id, attempt.attempt_id, 'the same attempt');
    assert.equal(again.provider_job_id, attempt.provider_job_id, 'its own job');
    assert.equal(e.sim.jobsFor(attempt.attempt_id), 1, 'no second job');
    const audit = await db()
      .select()
      .from(opsAudit)
      .where(and(eq(opsAudit.action, 'review.bind-job'), eq(opsAudit.target_id, taskId)));
    assert.equal(audit.length, 1);
  });

  test('replay never confirms "not submitted" for an attempt that was claimed for its create: refused, no second job', async () => {
    e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1, list: 'error_5xx', callbacks: 'off' });
    const taskId = await e.createTask(`claimed-${Date.now()}`, { ...defaultRequest, prompt: 'claimed, no job' });
    await eventually(async () => ((await e.getTask(taskId)).status === 'SUBMIT_UNKNOWN' ? true : undefined));
    const attempt = await attemptOf(taskId);
    assert.ok(
      await escalate(deps(), token(), taskId, {
        sourceEvent: 'workflow.escalate',
        detail: { reason: 'InvalidState: a step failed for good while the outcome was unknown (a bug since fixed)' },
      }),
    );
    await e.api.facade.wakeTask(taskId);
    await e.waitForWorkflowStatus(taskId, 'MANUAL_REVIEW');
    const plan = await planReviewBatch(db(), { cls: 'code-defect', action: 'replay', limit: 10 });
    assert.ok(
      plan.items.some((i) => i.taskId === taskId),
      'classified as a code defect',
    );
    const r = await applyReviewBatch(db(), e.api.facade, plan, { operator: 'ops-batch', reason: 'bug fixed: replay', ratePerSecond: 2 });
    const result = r.results.find((x) => x.taskId === taskId);
    assert.equal(result?.outcome, 'error', JSON.stringify(r.results));
    assert.match(result.detail, /replay refused/);
    const rows = await db().select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    assert.equal(rows.length, 1, 'no second attempt');
    assert.equal((await e.getTask(taskId)).status, 'MANUAL_REVIEW');
    assert.equal(e.sim.jobsFor(attempt.attempt_id), 1, 'the one job of the claimed create');
  });
});

describe('bulk cancel', () => {
  test('a filtered cancel is a dry run, then one audited batch through the cancel path', async () => {
    await assert.rejects(planCancelBatch(db(), {}, 10), /never means every task/);
    // Another tenant's running tasks: the filter names it.
    const other = await createTestTenant(e.tdb.database, e.config, '1000');
    const [{ name }] = (await db().select({ name: tenant.name }).from(tenant).where(eq(tenant.tenant_id, other.tenantId))) as [{ name: string }];
    const ids: string[] = [];
    for (const key of ['cancel-a', 'cancel-b']) {
      const res = await http(e.api.baseUrl, 'POST', '/v1/tasks', {
        apiKey: other.apiKey,
        body: { ...defaultRequest, prompt: key },
        headers: { 'idempotency-key': `${key}-${Date.now()}` },
      });
      assert.equal(res.status, 202, JSON.stringify(res.body));
      ids.push(res.body.task_id as string);
    }
    for (const id of ids) {
      await eventually(async () =>
        ['SUBMITTED', 'RUNNING'].includes((await db().select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!.status) ? true : undefined,
      );
    }
    const plan = await planCancelBatch(db(), { tenant: name, statuses: ['SUBMITTED', 'RUNNING'] }, 100);
    assert.deepEqual(plan.items.map((i) => i.taskId).sort(), [...ids].sort());
    const r = await applyCancelBatch(db(), e.api.facade, plan, {
      operator: 'ops-batch',
      reason: 'provider incident: cancel running jobs',
      ratePerSecond: 10,
      fence: { scope: e.config.FENCE_SCOPE, region: e.config.REGION },
    });
    assert.deepEqual(
      r.results.map((x) => x.outcome),
      ['done', 'done'],
      JSON.stringify(r.results),
    );
    for (const id of ids) {
      await eventually(
        async () => ((await db().select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!.status === 'CANCELLED' ? true : undefined),
        60_000,
      );
    }
    const batch = await db()
      .select()
      .from(opsAudit)
      .where(and(eq(opsAudit.action, 'task.cancel.batch'), eq(opsAudit.target_id, r.batchId)));
    assert.equal(batch.length, 1);
  });
});
