// The billing reconciler (reconcilers/billing.ts) and what a closed reservation means for the
// writes after it: a terminal task's open reservation is closed with the charge the task
// recorded; a task made live again after that can never end with a charge its ledger does not
// carry (db/ledger.ts settleReservation refuses, `ops pitr repair` refuses to reopen it, the
// reconciler reports it). Activities run as a worker would, against real Postgres and the simulator.
import assert from 'node:assert/strict';
import { after, afterEach, before, test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { and, eq, inArray } from 'drizzle-orm';
import { setMode } from '../../db/modes';
import { creditLedger, generationTask } from '../../db/schema';
import type { SystemMode } from '../../domain/states';
import { printPitrPlan } from '../../ops/pitr-print';
import { applyPitrRepair, refusalsOf } from '../../ops/pitr-repair';
import { billingReconciler } from '../../reconcilers/billing';
import type { ReconcileDeps } from '../../reconcilers/types';
import { createTask } from '../support/deps';
import { providerSucceededTask, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  w = await startActivityWorld({ generationMs: 100 });
});
after(() => w?.close());
afterEach(() => mode('NORMAL'));

const db = () => w.tdb.database.db;
const mode = (m: SystemMode) => setMode(db(), { scope: w.config.FENCE_SCOPE, mode: m, actor: 'operator:test', reason: 'test' });
const fence = () => ({ scope: w.config.FENCE_SCOPE, region: w.config.REGION });
const reconcile = (dryRun: boolean) =>
  billingReconciler.run({ db: db(), fence: fence(), settings: { graceSeconds: 0 } } as unknown as ReconcileDeps, { dryRun, limit: 100 });
const taskOf = async (id: string) => (await db().select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!;
const closesOf = async (id: string) =>
  (
    await db()
      .select()
      .from(creditLedger)
      .where(and(eq(creditLedger.task_id, id), inArray(creditLedger.entry_type, ['SETTLE', 'RELEASE'])))
  )
    .map((l) => `${l.entry_type} ${l.amount}`)
    .sort();

let seq = 0;
/** A QUEUED task made terminal outside the CAS an hour ago with its reservation open (what the reconciler exists for). */
async function terminalWithOpenReservation(): Promise<string> {
  seq += 1;
  const created = await createTask(db(), w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `billing-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `billing ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const id = created.task.task_id;
  await db()
    .update(generationTask)
    .set({ status: 'FAILED', terminal_at: new Date(Date.now() - 3_600_000), settled_amount: '0' })
    .where(eq(generationTask.task_id, id));
  return id;
}

test('the reconciler closes a terminal task’s open reservation with its recorded charge, and writes nothing while the mode makes facts read-only', async () => {
  const id = await terminalWithOpenReservation();
  await mode('MAINTENANCE');
  const paused = (await reconcile(false)).findings.find((f) => f.taskId === id);
  assert.deepEqual(await closesOf(id), [], 'no ledger row in MAINTENANCE');
  assert.match(paused?.detail ?? '', /not closed: system mode is MAINTENANCE: task facts are read-only/);
  await mode('NORMAL');
  await reconcile(false);
  assert.deepEqual(await closesOf(id), ['RELEASE 4.500000', 'SETTLE 0.000000']);
});

test('a task made live again after its reservation was closed cannot succeed with a charge its ledger lacks; pitr repair refuses to reopen it; the reconciler reports it', async () => {
  const id = await providerSucceededTask(w, 'reopened');
  const before = await taskOf(id);
  // The mistake, outside the CAS; past its grace the reconciler closes the "open reservation" with charge 0.
  const terminalAt = new Date(Date.now() - 3_600_000);
  await db().update(generationTask).set({ status: 'CANCELLED', terminal_at: terminalAt, settled_amount: '0' }).where(eq(generationTask.task_id, id));
  await reconcile(false);
  assert.deepEqual(await closesOf(id), ['RELEASE 4.500000', 'SETTLE 0.000000']);

  // The plan planPitrRepair makes for it (the copy from before the mistake).
  const plan = {
    tasks: [
      {
        task_id: id,
        tenant_id: w.tenantId,
        status_version: before.status_version,
        live: { status: 'CANCELLED', terminal_at: terminalAt.toISOString(), settled_amount: '0.000000' },
        restored: { status: 'PROVIDER_SUCCEEDED', terminal_at: null, settled_amount: null },
        recorded_status: 'PROVIDER_SUCCEEDED',
      },
    ],
    skipped: [],
    api_keys: [],
    restored_through: null,
  };
  // `ops pitr repair` (the dry run) says so before anything is applied, and writes nothing.
  const versionBefore = (await taskOf(id)).status_version;
  const preview = await refusalsOf(db(), plan);
  assert.deepEqual(
    preview.map((r) => r.task_id),
    [id],
  );
  assert.match(preview[0]!.why, /reservation was closed \(SETTLE 0\.000000\)/);
  assert.match(
    printPitrPlan(plan, null, preview),
    new RegExp(`1 of them would be refused if applied now[^\n]*\n  would refuse: ${id}: its reservation was closed`),
  );
  assert.equal((await taskOf(id)).status_version, versionBefore, 'the dry run wrote nothing');
  // `ops pitr repair --apply`.
  const repair = await applyPitrRepair(db(), plan, { actor: 'operator:test', reason: 'INC-test', fence: fence() });
  assert.deepEqual(repair.tasks_repaired, []);
  assert.deepEqual(
    repair.tasks_refused.map((r) => r.task_id),
    [id],
  );
  assert.match(repair.tasks_refused[0]!.why, /reservation was closed \(SETTLE 0\.000000\)/);
  assert.equal((await taskOf(id)).status, 'CANCELLED');

  // Made live by hand anyway: the success is refused with its settlement (parked by the workflow), never SUCCEEDED charged 0.
  await db().update(generationTask).set({ status: 'PROVIDER_SUCCEEDED', terminal_at: null, settled_amount: null }).where(eq(generationTask.task_id, id));
  const drift = (await reconcile(true)).findings.find((f) => f.taskId === id);
  assert.deepEqual(drift, {
    kind: 'settlement-drift',
    taskId: id,
    detail: 'PROVIDER_SUCCEEDED task records charge none, its SETTLE row 0.000000: a person must decide',
  });
  await assert.rejects(
    w.run('rescueOutput', id),
    (err: unknown) =>
      err instanceof ApplicationFailure && err.type === 'InvalidState' && err.nonRetryable && /already closed with SETTLE 0\.000000/.test(err.message),
  );
  const after = await taskOf(id);
  assert.deepEqual(
    { terminal: after.terminal_at, settled: after.settled_amount, ledger: await closesOf(id) },
    { terminal: null, settled: null, ledger: ['RELEASE 4.500000', 'SETTLE 0.000000'] },
  );
});

test("an operator's fail of a parked task whose reservation was settled already ends it with the charge its ledger carries, writing no ledger row", async () => {
  const id = await providerSucceededTask(w, 'settled-then-parked');
  assert.equal((await w.run('rescueOutput', id)).status, 'SUCCEEDED');
  const closed = await closesOf(id);
  const charged = (await taskOf(id)).settled_amount!;
  assert.ok(Number(charged) > 0, 'charged for its output');
  // Made live again outside the CAS (a mistaken repair), then parked for a person.
  await db().update(generationTask).set({ status: 'MANUAL_REVIEW', terminal_at: null, settled_amount: null }).where(eq(generationTask.task_id, id));
  const facts = await w.run('resolveReview', id, { kind: 'fail', operator: 'ops-test', reason: 'ended by hand after the repair' });
  assert.equal(facts.status, 'FAILED', 'the resolution ends it (a charge of 0 was refused by the ledger, every time)');
  const task = await taskOf(id);
  assert.equal(task.settled_amount, charged, 'the charge its ledger carries');
  assert.equal(task.failure_code, 'OPERATOR_FAILED');
  assert.deepEqual(await closesOf(id), closed, 'no ledger row written');
  assert.deepEqual(
    (await reconcile(true)).findings.filter((f) => f.taskId === id),
    [],
    'task and ledger agree',
  );
});
