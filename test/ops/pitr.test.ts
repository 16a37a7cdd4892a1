// `ops pitr diff` and `ops pitr repair` (docs/runbooks/pitr.md) against two real databases: the
// live one and a copy of it taken at "the moment before" (CREATE DATABASE … TEMPLATE, what a
// point-in-time restore yields). After the copy: legitimate progress (a CAS), a new task, and the
// mistake (tasks rewritten outside the CAS, a tenant's API key deleted). The diff tells them
// apart; the repair restores only the mistake, through a CAS with a task_transition row, audited,
// and running it again changes nothing.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { createTask } from '../support/deps';
import { createDatabase, type Database } from '../../db/client';
import { acquireFence, FenceRejectedError, inFence } from '../../db/fence';
import { dropDatabase, migrateDatabase } from '../../db/migrate';
import { casTaskStatus } from '../../db/tasks';
import { findTenantByApiKey } from '../../db/tenants';
import type { TaskStatus } from '../../domain/states';
import { NotARestoredCopyError, pitrDiff, type PitrDiff } from '../../ops/pitr';
import { applyPitrRepair, planPitrRepair } from '../../ops/pitr-repair';
import { createTestTenant, testConfig } from '../support/stack';

const config = testConfig();
const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
const urlFor = (name: string) => {
  const u = new URL(config.DATABASE_URL);
  u.pathname = `/${name}`;
  return u.toString();
};
const suffix = randomBytes(4).toString('hex');
const liveUrl = urlFor(`vidorch_t_pitr_live_${suffix}`);
const restoredUrl = urlFor(`vidorch_t_pitr_restored_${suffix}`);
let live: Database;
let restored: Database;
const task: Record<'succeeded' | 'submitted' | 'queued' | 'created_after' | 'late', string> = {
  succeeded: '',
  submitted: '',
  queued: '',
  created_after: '',
  late: '',
};
let otherKey = '';

const PATH: TaskStatus[] = [
  'QUEUED',
  'DISPATCHING',
  'SUBMITTING',
  'SUBMITTED',
  'RUNNING',
  'PROVIDER_SUCCEEDED',
  'FETCHING_OUTPUT',
  'PROCESSING_MEDIA',
  'SUCCEEDED',
];

/** Moves a task along the happy path through the CAS, from `from` to `to`. */
async function walk(taskId: string, from: TaskStatus, to: TaskStatus): Promise<void> {
  const { token } = await acquireFence(live.db, fence.scope, fence.region);
  for (let i = PATH.indexOf(from); i < PATH.indexOf(to); i += 1) {
    await inFence(live.db, token, async (tx) => {
      const { rows } = await tx.execute(sql`SELECT status_version::int AS v FROM generation_task WHERE task_id = ${taskId}::uuid`);
      const v = (rows[0] as { v: number }).v;
      const next = await casTaskStatus(tx, token, { taskId, from: PATH[i]!, expectedVersion: v, to: PATH[i + 1]!, sourceEvent: 'test', actor: 'test' });
      assert.notEqual(next, null);
    });
  }
}

async function newTask(tenantId: string, key: string): Promise<string> {
  const { token } = await acquireFence(live.db, fence.scope, fence.region);
  const out = await createTask(live.db, token, {
    tenantId,
    idempotencyKey: key,
    body: { model: 'minimax/video-01', prompt: key, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  return out.task.task_id;
}

const statusOf = async (db: Database, id: string) =>
  (await db.db.execute(sql`SELECT status, status_version::int AS v FROM generation_task WHERE task_id = ${id}::uuid`)).rows[0] as { status: string; v: number };

before(async () => {
  await migrateDatabase({ url: liveUrl, region: config.REGION, fenceScope: config.FENCE_SCOPE });
  live = createDatabase({ url: liveUrl, max: 4 });
  const tenant = await createTestTenant(live, config, '100');
  const other = await createTestTenant(live, config, '10');
  otherKey = other.apiKey;
  task.succeeded = await newTask(tenant.tenantId, 'a');
  task.submitted = await newTask(tenant.tenantId, 'b');
  task.queued = await newTask(tenant.tenantId, 'c');
  task.late = await newTask(tenant.tenantId, 'e');
  await walk(task.succeeded, 'QUEUED', 'SUCCEEDED');
  await walk(task.submitted, 'QUEUED', 'SUBMITTED');
  // The moment before: a copy of the live database as it is now.
  await live.close();
  const admin = createDatabase({ url: urlFor('postgres'), max: 1 });
  await admin.pool.query(`CREATE DATABASE ${new URL(restoredUrl).pathname.slice(1)} TEMPLATE ${new URL(liveUrl).pathname.slice(1)}`);
  await admin.close();
  live = createDatabase({ url: liveUrl, max: 4 });
  restored = createDatabase({ url: restoredUrl, max: 2 });
  // Since: legitimate progress and a new task, then the mistake.
  await walk(task.submitted, 'SUBMITTED', 'RUNNING');
  // Succeeds between the restore point and the mistake, which then hits it too.
  await walk(task.late, 'QUEUED', 'SUCCEEDED');
  task.created_after = await newTask(tenant.tenantId, 'd');
  await live.db.execute(
    sql`UPDATE generation_task SET status = 'FAILED', failure_code = 'operator_cleanup' WHERE task_id IN (${task.succeeded}::uuid, ${task.queued}::uuid, ${task.late}::uuid)`,
  );
  await live.db.execute(sql`DELETE FROM api_key WHERE tenant_id = ${other.tenantId}::uuid`);
});

after(async () => {
  await live?.close();
  await restored?.close();
  await dropDatabase(liveUrl).catch(() => undefined);
  await dropDatabase(restoredUrl).catch(() => undefined);
});

let diff: PitrDiff;

test('the diff names the tasks rewritten outside the CAS and the deleted key, and keeps progress and new rows apart', async () => {
  diff = await pitrDiff(live.db, restored.db);
  assert.deepEqual(diff.tasks.rewritten.map((t) => t.task_id).sort(), [task.succeeded, task.queued].sort());
  const a = diff.tasks.rewritten.find((t) => t.task_id === task.succeeded)!;
  assert.deepEqual(a.live, { status: 'FAILED', failure_code: 'operator_cleanup' });
  assert.deepEqual(a.restored, { status: 'SUCCEEDED', failure_code: null });
  assert.equal(a.recorded_status, 'SUCCEEDED');
  assert.equal(diff.tasks.progressed, 2);
  // Its own record says what each was; the late one is off its record but not in this copy's reach.
  assert.deepEqual(diff.tasks.off_record.map((t) => t.task_id).sort(), [task.succeeded, task.queued, task.late].sort());
  assert.equal(diff.tasks.only_live, 1);
  assert.deepEqual(diff.tasks.only_restored, []);
  assert.equal(diff.deleted_api_keys.length, 1);
  assert.equal(diff.ledger.missing_in_live, 0);
  assert.equal(diff.ledger.only_live, 1, "the new task's RESERVE");
  assert.equal(diff.tasks_by_status.live['FAILED'], 3);
  assert.equal(diff.tasks_by_status.restored['FAILED'], undefined);
});

test('the live database itself is refused as the restored copy', async () => {
  await assert.rejects(pitrDiff(live.db, live.db), NotARestoredCopyError);
});

test('a task rewritten after it changed since the restore point is left to the operator, named', () => {
  const plan = planPitrRepair(diff);
  assert.deepEqual(
    plan.skipped.map((s) => s.task_id),
    [task.late],
  );
  assert.match(plan.skipped[0]!.why, /restore a copy nearer the mistake/);
});

test('a rewritten task whose own record disagrees with the restored copy is left to the operator', () => {
  const plan = planPitrRepair({ ...diff, tasks: { ...diff.tasks, rewritten: diff.tasks.rewritten.map((t) => ({ ...t, recorded_status: 'RUNNING' })) } });
  assert.equal(plan.tasks.length, 0);
  assert.equal(plan.skipped.length, 3);
});

test('the repair is refused outside the active region', async () => {
  await assert.rejects(
    applyPitrRepair(live.db, planPitrRepair(diff), { actor: 'operator:test', reason: 'test', fence: { ...fence, region: 'region-z' } }),
    FenceRejectedError,
  );
  assert.equal((await statusOf(live, task.succeeded)).status, 'FAILED');
});

test('the repair restores the mistake through the CAS with a transition row, audited, re-inserts the key, and a second run changes nothing', async () => {
  const plan = planPitrRepair(diff);
  // Changed after the diff (another out-of-band write): the CAS must leave it alone.
  await live.db.execute(sql`UPDATE generation_task SET status_version = status_version + 1 WHERE task_id = ${task.queued}::uuid`);
  const result = await applyPitrRepair(live.db, plan, { actor: 'operator:test', reason: 'INC-PITR', fence });
  assert.deepEqual(result.tasks_repaired, [task.succeeded]);
  assert.deepEqual(result.tasks_changed_meanwhile, [task.queued]);
  assert.equal(result.api_keys_restored.length, 1);
  assert.deepEqual(await statusOf(live, task.succeeded), { status: 'SUCCEEDED', v: 9 });
  const { rows: transitions } = await live.db.execute(sql`
    SELECT from_status, to_status, from_version::int AS f, to_version::int AS t, source_event, actor FROM task_transition WHERE task_id = ${task.succeeded}::uuid AND to_version = 9`);
  assert.deepEqual(transitions, [{ from_status: 'FAILED', to_status: 'SUCCEEDED', f: 8, t: 9, source_event: 'ops.pitr-repair', actor: 'operator:test' }]);
  const { rows: audits } = await live.db.execute(sql`SELECT action, reason FROM ops_audit WHERE audit_id = ${result.audit_id}::uuid`);
  assert.deepEqual(audits, [{ action: 'pitr.repair', reason: 'INC-PITR' }]);
  assert.notEqual(await findTenantByApiKey(live.db, otherKey), null, "the tenant's key authenticates again");
  // The legitimate progress is untouched.
  assert.deepEqual(await statusOf(live, task.submitted), { status: 'RUNNING', v: 4 });

  const again = await pitrDiff(live.db, restored.db);
  assert.deepEqual(
    again.tasks.rewritten.map((t) => t.task_id),
    [],
    'the repaired task has moved past the restored version',
  );
  assert.equal(again.deleted_api_keys.length, 0);
  const second = await applyPitrRepair(live.db, planPitrRepair(again), { actor: 'operator:test', reason: 'INC-PITR', fence });
  assert.deepEqual([second.tasks_repaired, second.api_keys_restored], [[], []]);
});
