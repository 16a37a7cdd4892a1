// The ops CLI against a test database and the run's Temporal: mode get/set, fence status,
// failover (the failover audit record, docs/design.md §7), reconcile dry-run/apply, task inspect, review
// list/resolve. Most run through `node --import tsx ops/cli.ts` as an operator would; every
// change leaves an ops_audit row saying who, what and why.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { and, eq, sql } from 'drizzle-orm';
import { createTaskActivities } from '../../activities';
import { configToEnv } from '../../config/env';
import { buildProviders, buildStorage } from '../../config/services';
import { testActivityDeps, createTask } from '../support/deps';
import { acquireFence } from '../../db/fence';
import { selectFailoverRecords } from '../../db/modes';
import { opsAudit, regionFailover } from '../../db/schema';
import { inspectTask } from '../../ops/inspect';
import { reconcileApply, reconcileReport } from '../../ops/reconcile';
import { runNodeScript } from '../../harness';
import { createGenerationFacade } from '../../temporal/facade';
import { eventually } from '../support/stack';
import { startModesStack, type ModesStack } from './support';

let s: ModesStack;
let env: Record<string, string>;

before(async () => {
  s = await startModesStack('ops-cli', {}, { generationMs: 500 });
  env = { ...configToEnv(s.config), DATABASE_URL: s.tdb.url, OPS_OPERATOR: 'alice', LOG_LEVEL: 'warn' };
});
after(async () => {
  await s?.close();
});

async function ops(...args: string[]) {
  const r = await runNodeScript('ops/cli.ts', args, env, { timeoutMs: 60_000 });
  return { ...r, json: () => JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null') };
}
const audits = (action: string) => s.tdb.database.db.select().from(opsAudit).where(eq(opsAudit.action, action));
const db = () => s.tdb.database.db;

let seq = 0;
/** A task created through the service (as the API does) without starting its workflow. */
async function unstartedTask(): Promise<string> {
  const { token } = await acquireFence(db(), s.config.FENCE_SCOPE, s.config.REGION);
  const created = await createTask(db(), token, {
    tenantId: s.tenant.tenantId,
    idempotencyKey: `cli-${++seq}`,
    body: { model: 'minimax/video-01', prompt: 'ops', duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  return created.task.task_id;
}

test('mode set/get: the mode changes, is audited with who and why, and a bad mode or a missing reason is refused', async () => {
  const set = await ops('mode', 'set', 'queue-only', '--reason', 'provider incident INC-7', '--json');
  assert.equal(set.code, 0, set.stderr);
  assert.equal(set.json().to.mode, 'QUEUE_ONLY');
  const got = await ops('mode', 'get');
  assert.match(got.stdout, /mode\s+QUEUE_ONLY/);
  assert.match(got.stdout, /new provider submits\s+no/);
  const [audit] = await audits('mode.set');
  assert.equal(audit?.actor, 'operator:alice');
  assert.equal(audit?.reason, 'provider incident INC-7');
  assert.deepEqual(audit?.detail, { from: 'NORMAL', to: 'QUEUE_ONLY', region: 'region-a', epoch: 1 });

  const bad = await ops('mode', 'set', 'SOMETIMES', '--reason', 'x');
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /one of NORMAL/);
  const noReason = await ops('mode', 'set', 'NORMAL');
  assert.notEqual(noReason.code, 0);
  assert.match(noReason.stderr, /--reason/);
  await s.setMode('NORMAL');
});

test('reconcile: the dry run counts the recovery sets; apply starts the missing workflows through the facade, never touches billing anomalies, and is audited', async () => {
  const orphan = await unstartedTask(); // committed, outbox unpublished, no workflow
  const unknown = await unstartedTask();
  await db().execute(sql`UPDATE outbox_event SET published_at = now() WHERE aggregate_id = ${unknown}`);
  await db().execute(sql`
    INSERT INTO task_attempt (attempt_id, task_id, attempt_no, provider, provider_model, submit_state, unknown_since)
    VALUES (gen_random_uuid(), ${unknown}, 1, 'replicate', 'minimax/video-01', 'SUBMIT_UNKNOWN', now() - interval '5 minutes')`);
  await db().execute(sql`
    UPDATE generation_task SET status = 'SUBMIT_UNKNOWN', active_attempt_id = (SELECT attempt_id FROM task_attempt WHERE task_id = ${unknown})
    WHERE task_id = ${unknown}`);
  // A billing anomaly: terminal with its reservation still open.
  const broken = await unstartedTask();
  await db().execute(sql`UPDATE outbox_event SET published_at = now() WHERE aggregate_id = ${broken}`);
  await db().execute(sql`UPDATE generation_task SET status = 'FAILED', terminal_at = now() WHERE task_id = ${broken}`);

  const dry = await ops('reconcile', '--dry-run', '--json');
  assert.equal(dry.code, 0, dry.stderr);
  const report = dry.json();
  assert.equal(report.unpublishedOutbox.count, 1);
  assert.deepEqual(report.unpublishedOutbox.taskIds, [orphan]);
  assert.equal(report.submitUnknown.count, 1);
  assert.deepEqual(report.submitUnknown.taskIds, [unknown]);
  assert.equal(report.billingAnomalies.terminalUnsettled, 1);
  assert.deepEqual(report.billingAnomalies.taskIds, [broken]);
  const human = await ops('reconcile');
  assert.match(human.stdout, /unpublished outbox\s+1/);
  assert.match(human.stdout, /billing anomaly/);

  const facade = createGenerationFacade(async () => s.client, s.config.TEMPORAL_TASK_QUEUE);
  const { applied } = await reconcileApply(db(), facade, { actor: 'operator:alice', reason: 'after failover' });
  assert.equal(applied.outboxPublished, 1);
  assert.equal(applied.workflowsStarted, 1, 'the SUBMIT_UNKNOWN task had no workflow: started');
  assert.equal((await facade.describeTask(orphan))?.status, 'RUNNING');
  assert.equal((await facade.describeTask(unknown))?.status, 'RUNNING');
  assert.equal(await facade.describeTask(broken), null, 'anomalies are reported, never acted on');
  const after = await reconcileReport(db());
  assert.equal(after.unpublishedOutbox.count, 0);
  const [audit] = await audits('reconcile.apply');
  assert.equal(audit?.reason, 'after failover');
  assert.equal(audit?.actor, 'operator:alice');
  await s.waitForStatus(orphan, 'SUCCEEDED', 60_000);
  await db().execute(sql`UPDATE generation_task SET status = 'FAILED', terminal_at = now() WHERE task_id = ${unknown}`);
  await s.client.workflow
    .getHandle(facade.workflowIdFor(unknown))
    .terminate('test cleanup')
    .catch(() => undefined);
});

test('task inspect shows facts, transitions, ledger, the Temporal status and a UI link', async () => {
  const id = await s.createTask('inspect-1');
  await s.waitForStatus(id, 'SUCCEEDED', 60_000);
  const facade = createGenerationFacade(async () => s.client, s.config.TEMPORAL_TASK_QUEUE);
  // Postgres says SUCCEEDED one workflow task before Temporal closes the run: wait for the close.
  await s.client.workflow.getHandle(facade.workflowIdFor(id)).result();
  const i = await inspectTask(db(), facade, id, { baseUrl: 'http://ui.example:8233/', namespace: 'default' });
  assert.ok(i);
  assert.equal(i.task.status, 'SUCCEEDED');
  assert.deepEqual(i.transitions.map((t) => t.to_status).slice(-2), ['PROCESSING_MEDIA', 'SUCCEEDED']);
  assert.deepEqual(i.ledger.map((l) => l.entry_type).sort(), ['RELEASE', 'RESERVE', 'SETTLE']);
  assert.ok(i.temporal.reachable && i.temporal.status === 'COMPLETED');
  assert.equal(i.uiUrl, `http://ui.example:8233/namespaces/default/workflows/task-${id}`);

  const out = await ops('task', 'inspect', id);
  assert.equal(out.code, 0, out.stderr);
  for (const part of ['transitions', 'ledger', 'SETTLE', 'COMPLETED', `/workflows/task-${id}`]) assert.ok(out.stdout.includes(part), `output shows ${part}`);
  const missing = await ops('task', 'inspect', '00000000-0000-4000-8000-000000000000');
  assert.notEqual(missing.code, 0);
});

test('review list shows a MANUAL_REVIEW task with its reason; review resolve --fail goes through the workflow Update, releases the credits and is audited', async () => {
  await s.setMode('QUEUE_ONLY');
  const id = await s.createTask('review-1');
  await eventually(async () => ((await s.getTask(id)).status === 'DISPATCHING' ? true : undefined), 20_000);
  const acts = createTaskActivities(testActivityDeps(s.config, { db: s.tdb.database, storage: buildStorage(s.config), providers: buildProviders(s.config) }));
  await new MockActivityEnvironment().run(acts.escalateTask, id, 'provider said nothing for an hour');
  await s.setMode('NORMAL');

  const listed = await ops('review', 'list', '--json');
  assert.equal(listed.code, 0, listed.stderr);
  const item = listed.json().find((r: { task_id: string }) => r.task_id === id);
  assert.equal(item?.reason, 'provider said nothing for an hour');

  // The workflow notices MANUAL_REVIEW once its paused step runs again.
  await eventually(
    async () => ((await s.client.workflow.getHandle(`task-${id}`).query<{ status?: string } | null>('facts'))?.status === 'MANUAL_REVIEW' ? true : undefined),
    20_000,
  );
  const resolved = await ops('review', 'resolve', id, '--fail', '--reason', 'customer asked to stop', '--json');
  assert.equal(resolved.code, 0, resolved.stderr);
  assert.equal(resolved.json().status, 'FAILED');
  assert.equal(resolved.json().settled_amount, '0.000000', 'what the fail charged: nothing');
  const task = await s.waitForStatus(id, 'FAILED', 10_000);
  assert.equal(
    task.ledger.find((l: { type: string }) => l.type === 'RELEASE')?.amount,
    task.ledger.find((l: { type: string }) => l.type === 'RESERVE')?.amount,
  );
  const [audit] = await s.tdb.database.db
    .select()
    .from(opsAudit)
    .where(and(eq(opsAudit.action, 'review.fail'), eq(opsAudit.target_id, id)));
  assert.equal(audit?.actor, 'operator:alice');
  assert.equal(audit?.reason, 'customer asked to stop');
  const none = await ops('review', 'resolve', id, '--reason', 'x');
  assert.notEqual(none.code, 0, 'a resolution needs a kind');
});

test('failover records the failover audit fields in order (RECONCILE_ONLY, epoch bump, new region), prints the reopen prompt, and fence status fills in the first write', async () => {
  const out = await ops('failover', '--to', 'region-b', '--incident', 'INC-42', '--accepted-rpo', '5m', '--await-write', '1s', '--json');
  assert.equal(out.code, 0, out.stderr);
  const result = out.json();
  assert.deepEqual(
    result.steps.map((st: { step: string }) => st.step.split(',')[0]),
    [
      'incident declared',
      'admission → RECONCILE_ONLY',
      'replication position recorded',
      "isolate the old primary and revoke the old region's write credentials",
      'write_epoch bumped',
      'first successful write under the new epoch',
      'reconciliation report',
    ],
  );
  const [rec] = await selectFailoverRecords(db()).where(eq(regionFailover.incident_id, 'INC-42'));
  assert.ok(rec);
  assert.equal(rec.operator, 'operator:alice');
  assert.equal(rec.old_region, 'region-a');
  assert.equal(rec.new_region, 'region-b');
  assert.equal(rec.new_epoch, rec.old_epoch + 1);
  assert.match(rec.replication_position, /^[0-9A-F]+\/[0-9A-F]+$/);
  assert.equal(rec.accepted_rpo_seconds, 300);
  assert.ok(rec.traffic_switch_time >= rec.started_at);
  assert.equal((rec.reconciliation_result as { clean: boolean } | null)?.clean !== undefined, true);
  const fence = await ops('mode', 'get', '--json');
  assert.deepEqual([fence.json().activeRegion, fence.json().epoch, fence.json().mode], ['region-b', rec.new_epoch, 'RECONCILE_ONLY']);
  assert.ok((await audits('failover.switch')).some((a) => a.actor === 'operator:alice'));

  const human = await ops('fence', 'status');
  assert.match(human.stdout, /REGION is region-a: NOT active/);
  assert.match(human.stdout, /incident id\s+INC-42/);
  // Region-b's first write (a canary grant by an operator there), then fence status records its time.
  const { rows } = await db().execute(sql`SELECT name FROM tenant WHERE tenant_id = ${s.tenant.tenantId}`);
  const name = (rows[0] as { name: string }).name;
  const fromA = await ops('tenant', 'grant', '--name', name, '--credits', '1', '--reason', 'canary');
  assert.notEqual(fromA.code, 0, 'region-a no longer owns writes');
  assert.match(fromA.stderr, /does not own writes/);
  const grant = await runNodeScript('ops/cli.ts', ['tenant', 'grant', '--name', name, '--credits', '1', '--reason', 'canary'], { ...env, REGION: 'region-b' });
  assert.equal(grant.code, 0, grant.stderr);
  const status = await ops('fence', 'status', '--json');
  const recorded = status.json().failovers.find((f: { incident_id: string }) => f.incident_id === 'INC-42');
  assert.ok(recorded.first_successful_write_time, 'first successful write recorded');

  // Back again, as an operator reads it: the runbook as it happens, then the prompt to reopen.
  const back = await ops('failover', '--to', 'region-a', '--incident', 'INC-43', '--accepted-rpo', '0', '--await-write', '0');
  assert.equal(back.code, 0, back.stderr);
  assert.match(back.stdout, /write_epoch bumped, active region switched — epoch 2 → 3, region-b → region-a/);
  assert.match(back.stdout, /mode set NORMAL --reason "INC-43: reopened"/);
  const again = await ops('failover', '--to', 'region-a', '--incident', 'INC-44', '--accepted-rpo', '0');
  assert.notEqual(again.code, 0);
  assert.match(again.stderr, /already the active region/);
});

test('reconcile schedules/status/run: the Schedules are created, listed with their last run, a dry run reports, a trigger is audited; bulk commands start with a dry run', async () => {
  const made = await ops('reconcile', 'schedules', '--json');
  assert.equal(made.code, 0, made.stderr);
  const ids = made.json().schedules as string[];
  try {
    assert.ok(ids.includes(`${s.config.TEMPORAL_TASK_QUEUE}-reconcile-billing`), ids.join(' '));
    const dry = await ops('reconcile', 'run', 'billing', '--dry-run', '--json');
    assert.equal(dry.code, 0, dry.stderr);
    assert.equal(dry.json().report.changed, 0);
    const status = await ops('reconcile', 'status', '--json');
    assert.equal(status.code, 0, status.stderr);
    const billing = (status.json() as { name: string; schedule: { paused: boolean; intervalMs: number }; last: unknown }[]).find((r) => r.name === 'billing')!;
    assert.equal(billing.schedule.paused, false);
    assert.equal(billing.schedule.intervalMs, s.config.RECONCILE_BILLING_INTERVAL_MS);
    assert.equal(billing.last, null, 'a dry run is not a last run');
    // No worker of this stack polls the reconcile queue: the trigger is recorded, the run never comes.
    const trig = await ops('reconcile', 'run', 'outbox', '--reason', 'cli test', '--wait', '2s');
    assert.notEqual(trig.code, 0);
    assert.match(trig.stderr, /no run of outbox recorded/);
    assert.equal((await audits('reconcile.trigger')).length, 1);
    const noReason = await ops('reconcile', 'run', 'outbox');
    assert.match(noReason.stderr, /needs --reason/);

    const classify = await ops('review', 'classify', '--json');
    assert.equal(classify.code, 0, classify.stderr);
    const plan = await ops('review', 'resolve', '--class', 'unknown-outcome', '--action', 'fail', '--reason', 'cli dry run', '--json');
    assert.equal(plan.code, 0, plan.stderr);
    assert.equal(plan.json().kind, 'review.resolve');
    const unsuited = await ops('review', 'resolve', '--class', 'missing-data', '--action', 'replay', '--reason', 'cli dry run');
    assert.match(unsuited.stderr, /does not suit missing-data/);
    const everything = await ops('task', 'cancel', '--reason', 'no filter');
    assert.match(everything.stderr, /never means every task/);
  } finally {
    for (const id of ids)
      await s.client.schedule
        .getHandle(id)
        .delete()
        .catch(() => undefined);
  }
});
