// The create transaction's one statement (db/task-admission.ts) against real Postgres: what it
// writes on success, and that every refusal (stale fence, a mode that admits no creates, taken key,
// short credits) writes nothing.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { FenceRejectedError, acquireFence } from '../../db/fence';
import { ModePausedError, setMode } from '../../db/modes';
import { creditAccount, creditLedger, generationTask, outboxEvent, taskTransition } from '../../db/schema';
import { createTask } from '../../api/tasks.service';
import { HttpProblem } from '../../api/problem';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
const body = { model: 'minimax/video-01', prompt: 'admission', duration_seconds: 6, resolution: '720p', priority: 0 } as const;

let tdb: TestDatabase;
before(async () => {
  tdb = await createTestDatabase(config);
});
after(async () => {
  await tdb?.drop();
});

const token = async () => (await acquireFence(tdb.database.db, config.FENCE_SCOPE, config.REGION)).token;
const tasksOf = (tenantId: string) => tdb.database.db.select().from(generationTask).where(eq(generationTask.tenant_id, tenantId));
const accountOf = async (tenantId: string) => (await tdb.database.db.select().from(creditAccount).where(eq(creditAccount.tenant_id, tenantId)))[0]!;

test('a create writes the task, its outbox row, its first transition and its reserve, and returns the row as a select reads it', async () => {
  const t = await createTestTenant(tdb.database, config, '100');
  const created = await createTask(tdb.database.db, await token(), { tenantId: t.tenantId, idempotencyKey: 'one', body, defaultDeadlineSeconds: 3600 });
  assert.equal(created.kind, 'created');
  const [row] = await tasksOf(t.tenantId);
  assert.deepEqual(created.task, row);
  assert.equal(row!.status, 'QUEUED');
  assert.ok(row!.deadline_at && row!.deadline_at.getTime() - row!.created_at.getTime() === 3600_000);
  const outbox = await tdb.database.db.select().from(outboxEvent).where(eq(outboxEvent.aggregate_id, row!.task_id));
  assert.equal(outbox.length, 1);
  assert.equal(created.kind === 'created' && created.outboxEventId, outbox[0]!.event_id);
  assert.deepEqual(outbox[0]!.payload, { task_id: row!.task_id, tenant_id: t.tenantId, provider: row!.provider, priority: 0 });
  const transitions = await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, row!.task_id));
  assert.deepEqual(
    transitions.map((x) => [x.from_status, x.to_status, x.from_version, x.to_version, x.source_event, x.actor]),
    [[null, 'QUEUED', null, 0, 'api.create', `tenant:${t.tenantId}`]],
  );
  const ledger = await tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, row!.task_id));
  assert.deepEqual(
    ledger.map((e) => [e.entry_type, e.amount, e.business_key]),
    [['RESERVE', row!.reserved_amount, `task:${row!.task_id}:reserve`]],
  );
  assert.equal((await accountOf(t.tenantId)).reserved, row!.reserved_amount);
});

test('a create under a stale fence epoch is refused with FenceRejectedError and writes nothing', async () => {
  const t = await createTestTenant(tdb.database, config, '100');
  const stale = { ...(await token()), epoch: (await token()).epoch + 7 };
  await assert.rejects(
    createTask(tdb.database.db, stale, { tenantId: t.tenantId, idempotencyKey: 'stale', body, defaultDeadlineSeconds: 3600 }),
    (err) => err instanceof FenceRejectedError && err.current?.epoch === stale.epoch - 7,
  );
  assert.deepEqual(await tasksOf(t.tenantId), []);
  assert.equal((await accountOf(t.tenantId)).reserved, '0.000000');
});

test('a mode that admits no creates, read under the fence lock, refuses the create and writes nothing (the admission reads it through a cache)', async () => {
  const t = await createTestTenant(tdb.database, config, '100');
  const scope = { scope: config.FENCE_SCOPE, actor: 'operator:test', reason: 'test' };
  try {
    for (const mode of ['RECONCILE_ONLY', 'READ_ONLY', 'MAINTENANCE'] as const) {
      await setMode(tdb.database.db, { ...scope, mode });
      await assert.rejects(
        createTask(tdb.database.db, await token(), { tenantId: t.tenantId, idempotencyKey: `mode-${mode}`, body, defaultDeadlineSeconds: 3600 }),
        (err: unknown) => err instanceof ModePausedError && err.mode === mode && /new tasks are not admitted/.test(err.message),
      );
    }
    assert.deepEqual(await tasksOf(t.tenantId), [], 'no task row');
    assert.equal(Number((await accountOf(t.tenantId)).reserved), 0, 'nothing reserved');
    const entries = await tdb.database.db.select().from(creditLedger).where(eq(creditLedger.tenant_id, t.tenantId));
    assert.deepEqual(
      entries.filter((e) => e.entry_type === 'RESERVE'),
      [],
      'no reserve row',
    );
    // QUEUE_ONLY admits (and persists) creates: no provider cost is added there.
    await setMode(tdb.database.db, { ...scope, mode: 'QUEUE_ONLY' });
    const created = await createTask(tdb.database.db, await token(), {
      tenantId: t.tenantId,
      idempotencyKey: 'mode-queue-only',
      body,
      defaultDeadlineSeconds: 3600,
    });
    assert.equal(created.kind, 'created');
  } finally {
    await setMode(tdb.database.db, { ...scope, mode: 'NORMAL' });
  }
});

test('a create that reaches the fence row while `mode set READ_ONLY` commits is refused: it waits for the row and reads the new mode', async () => {
  const t = await createTestTenant(tdb.database, config, '100');
  const tok = await token();
  const holder = await tdb.database.pool.connect();
  try {
    await holder.query('BEGIN');
    await holder.query(`UPDATE region_write_fence SET mode = 'READ_ONLY' WHERE resource_scope = $1`, [config.FENCE_SCOPE]);
    let settled = false;
    const creating = createTask(tdb.database.db, tok, { tenantId: t.tenantId, idempotencyKey: 'racing', body, defaultDeadlineSeconds: 3600 }).then(
      (r) => r,
      (err: unknown) => err,
    );
    void creating.finally(() => (settled = true));
    // The create is waiting for the fence row the operator's change holds.
    for (let i = 0; i < 200 && !settled; i++) {
      const { rows } = await tdb.database.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      );
      if (rows[0]!.n > 0) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    assert.equal(settled, false, 'the create waits for the fence row');
    await holder.query('COMMIT');
    const outcome = await creating;
    assert.ok(outcome instanceof ModePausedError && outcome.mode === 'READ_ONLY', `refused by the mode, got ${String(outcome)}`);
    assert.deepEqual(await tasksOf(t.tenantId), [], 'nothing written');
  } finally {
    holder.release();
    await setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode: 'NORMAL', actor: 'operator:test', reason: 'test' });
  }
});

test('short credits are a 402 naming what is available, and the task row written before the CAS is rolled back', async () => {
  const t = await createTestTenant(tdb.database, config, '1');
  await assert.rejects(
    createTask(tdb.database.db, await token(), { tenantId: t.tenantId, idempotencyKey: 'poor', body, defaultDeadlineSeconds: 3600 }),
    (err) => err instanceof HttpProblem && err.status === 402 && /1\.000000 available/.test(err.detail ?? ''),
  );
  assert.deepEqual(await tasksOf(t.tenantId), []);
  assert.equal((await accountOf(t.tenantId)).reserved, '0.000000');
});

test('a taken Idempotency-Key replays the original task (same body) or is a 422 (other body), reserving nothing more', async () => {
  const t = await createTestTenant(tdb.database, config, '100');
  const args = { tenantId: t.tenantId, idempotencyKey: 'again', body, defaultDeadlineSeconds: 3600 };
  const first = await createTask(tdb.database.db, await token(), args);
  const again = await createTask(tdb.database.db, await token(), args);
  assert.equal(again.kind, 'replayed');
  assert.equal(again.task.task_id, first.task.task_id);
  await assert.rejects(
    createTask(tdb.database.db, await token(), { ...args, body: { ...body, duration_seconds: 5 } }),
    (err) => err instanceof HttpProblem && err.status === 422,
  );
  assert.equal((await tasksOf(t.tenantId)).length, 1);
  assert.equal((await accountOf(t.tenantId)).reserved, first.task.reserved_amount);
});
