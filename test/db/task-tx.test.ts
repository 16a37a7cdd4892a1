// The task transaction (db/task-tx.ts): its opening round trip locks the fence and the task and
// checks region, epoch and mode; its closing one commits and reads the facts. Real Postgres.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import pg from 'pg';
import { readTaskFacts } from '../../activities/task-facts';
import { FenceRejectedError } from '../../db/fence';
import { MODE_SETTING, ModePausedError } from '../../db/modes';
import { generationTask, regionWriteFence, taskAttempt } from '../../db/schema';
import { inTaskTransaction, readTaskRows } from '../../db/task-tx';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
let tdb: TestDatabase;
let tenantId: string;

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '50'));
});
after(async () => {
  await tdb?.drop();
});

async function insertTask(): Promise<string> {
  const taskId = randomUUID();
  await tdb.database.db.insert(generationTask).values({
    task_id: taskId,
    tenant_id: tenantId,
    project_id: tenantId,
    home_region: config.REGION,
    write_epoch: 1,
    status: 'SUBMITTED',
    idempotency_key: randomUUID(),
    reserved_amount: '5.25',
    request_hash: 'h',
    request: { model: 'minimax/video-01', prompt: 'a "quoted"; prompt', duration_seconds: 2, resolution: '480p', priority: 3 },
    provider: 'replicate',
    provider_model: 'minimax/video-01',
    priority: 3,
    deadline_at: new Date(Date.now() + 3_600_000),
    cancel_requested_at: new Date('2026-01-02T03:04:05.678Z'),
  });
  const attemptId = randomUUID();
  await tdb.database.db.insert(taskAttempt).values({
    attempt_id: attemptId,
    task_id: taskId,
    attempt_no: 1,
    provider: 'replicate',
    provider_model: 'minimax/video-01',
    submit_state: 'SUBMITTED',
    next_poll_at: new Date(Date.now() + 60_000),
  });
  await tdb.database.db.update(generationTask).set({ active_attempt_id: attemptId }).where(eq(generationTask.task_id, taskId));
  return taskId;
}

async function setFence(set: Partial<typeof regionWriteFence.$inferInsert>) {
  await tdb.database.db.update(regionWriteFence).set(set).where(eq(regionWriteFence.resource_scope, fence.scope));
}

describe('inTaskTransaction', () => {
  test('gives the locked task as a drizzle select reads it, the token, the mode, and the facts after the commit', async () => {
    const taskId = await insertTask();
    const [selected] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
    const now = new Date();
    const { value, facts } = await inTaskTransaction(
      tdb.database.db,
      fence,
      taskId,
      async (tx, lock) => {
        assert.deepEqual(lock.task, selected);
        assert.deepEqual(lock.token, { ...fence, epoch: 1 });
        assert.equal(lock.mode, 'NORMAL');
        const { rows } = await tx.execute(sql`SELECT current_setting(${MODE_SETTING}, true) AS mode`);
        assert.equal((rows[0] as { mode: string }).mode, 'NORMAL');
        await tx.update(generationTask).set({ status: 'RUNNING' }).where(eq(generationTask.task_id, taskId));
        return 'done';
      },
      { facts: () => now },
    );
    assert.equal(value, 'done');
    assert.deepEqual(facts, await readTaskFacts(tdb.database.db, taskId, now));
    assert.equal(facts?.status, 'RUNNING');
  });

  test('the active attempt comes locked with the task, also one named while the step waited for the task row', async () => {
    const taskId = await insertTask();
    const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
    const first = await inTaskTransaction(tdb.database.db, fence, taskId, async (_tx, lock) => lock.attempt?.attempt_id, { activeAttempt: true });
    assert.equal(first.value, task!.active_attempt_id);
    // Another writer holds the task row, adds attempt 2 and names it; the step waits meanwhile.
    const holder = await tdb.database.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM generation_task WHERE task_id = $1 FOR UPDATE', [taskId]);
      const waiting = inTaskTransaction(tdb.database.db, fence, taskId, async (_tx, lock) => lock.attempt, { activeAttempt: true });
      await new Promise((r) => setTimeout(r, 300));
      const second = randomUUID();
      await holder.query(
        `INSERT INTO task_attempt (attempt_id, task_id, attempt_no, provider, provider_model, submit_state) VALUES ($1, $2, 2, 'replicate', 'minimax/video-01', 'PREPARED')`,
        [second, taskId],
      );
      await holder.query('UPDATE generation_task SET active_attempt_id = $1 WHERE task_id = $2', [second, taskId]);
      await holder.query('COMMIT');
      const { value: attempt } = await waiting;
      assert.equal(attempt?.attempt_id, second, 'the attempt the task row names, not the one the statement saw at its start');
      assert.equal(attempt?.submit_state, 'PREPARED');
    } finally {
      holder.release();
    }
  });

  test('a task that does not exist is null; a non-UUID id is refused before any query', async () => {
    const missing = await inTaskTransaction(tdb.database.db, fence, randomUUID(), async (_tx, lock) => lock.task, { facts: () => new Date() });
    assert.equal(missing.value, null);
    assert.equal(missing.facts, null);
    await assert.rejects(
      inTaskTransaction(tdb.database.db, fence, "x'; DROP TABLE generation_task; --", async () => 1),
      /not a task id/,
    );
  });

  test('a region that is not active, or a token whose epoch is gone, is refused before the work runs', async () => {
    const taskId = await insertTask();
    let ran = 0;
    const work = async () => {
      ran += 1;
    };
    const rejected = await inTaskTransaction(tdb.database.db, { ...fence, region: 'region-elsewhere' }, taskId, work).catch((e: unknown) => e);
    assert.ok(rejected instanceof FenceRejectedError);
    assert.equal(rejected.current?.activeRegion, config.REGION);
    const stale = await inTaskTransaction(tdb.database.db, fence, taskId, work, { token: { ...fence, epoch: 0 } }).catch((e: unknown) => e);
    assert.ok(stale instanceof FenceRejectedError);
    assert.equal(ran, 0);
  });

  test('a mode that forbids the action pauses the step before the work runs', async () => {
    const taskId = await insertTask();
    try {
      await setFence({ mode: 'READ_ONLY' });
      await assert.rejects(
        inTaskTransaction(tdb.database.db, fence, taskId, async () => assert.fail('ran')),
        (e: unknown) => e instanceof ModePausedError && e.action === 'factWrites',
      );
      await setFence({ mode: 'QUEUE_ONLY' });
      await assert.rejects(
        inTaskTransaction(tdb.database.db, fence, taskId, async () => assert.fail('ran'), { action: 'submit' }),
        (e: unknown) => e instanceof ModePausedError && e.action === 'submit',
      );
      const { value } = await inTaskTransaction(tdb.database.db, fence, taskId, async (_tx, lock) => lock.mode);
      assert.equal(value, 'QUEUE_ONLY');
    } finally {
      await setFence({ mode: 'NORMAL' });
    }
  });

  test('a failing step writes nothing and leaves the connection usable', async () => {
    const taskId = await insertTask();
    const before = tdb.database.pool.totalCount;
    await assert.rejects(
      inTaskTransaction(tdb.database.db, fence, taskId, async (tx) => {
        await tx.update(generationTask).set({ status: 'RUNNING' }).where(eq(generationTask.task_id, taskId));
        throw new Error('boom');
      }),
      /boom/,
    );
    const [row] = await tdb.database.db.select({ status: generationTask.status }).from(generationTask).where(eq(generationTask.task_id, taskId));
    assert.equal(row?.status, 'SUBMITTED');
    for (let i = 0; i < 3; i += 1) await inTaskTransaction(tdb.database.db, fence, taskId, async () => undefined);
    assert.ok(tdb.database.pool.totalCount <= Math.max(before, 1) + 1);
    assert.equal(tdb.database.pool.idleCount, tdb.database.pool.totalCount);
  });

  test('a failover committed while the step waits for the fence row refuses the step (it sees the new epoch)', async () => {
    const taskId = await insertTask();
    const holder = await tdb.database.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM region_write_fence WHERE resource_scope = $1 FOR UPDATE', [fence.scope]);
      let settled = false;
      // Its refusal is caught from the start: it may come before the COMMIT below has answered,
      // and a rejection with no handler yet fails the test on its own (fresh-clone CI, once).
      const waiting = inTaskTransaction(tdb.database.db, fence, taskId, async () => 'ran')
        .finally(() => {
          settled = true;
        })
        .catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(settled, false, 'the step waits for the fence row');
      await holder.query(`UPDATE region_write_fence SET active_region = 'region-b', write_epoch = write_epoch + 1 WHERE resource_scope = $1`, [fence.scope]);
      await holder.query('COMMIT');
      const err = await waiting;
      assert.ok(err instanceof FenceRejectedError, String(err));
      assert.equal(err.current?.activeRegion, 'region-b');
    } finally {
      holder.release();
      await setFence({ active_region: config.REGION, write_epoch: 1 });
    }
  });
});

describe('readTaskRows', () => {
  test('reads the task and its active attempt as drizzle selects read them, the token and the mode, in one round trip that waits for no lock', async () => {
    const taskId = await insertTask();
    const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
    const [attempt] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, task!.active_attempt_id!));
    // Another step holds the task, its attempt and the fence row: the read does not wait for them.
    const holder = await tdb.database.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM region_write_fence WHERE resource_scope = $1 FOR UPDATE', [fence.scope]);
      await holder.query('SELECT 1 FROM generation_task WHERE task_id = $1 FOR UPDATE', [taskId]);
      await holder.query('SELECT 1 FROM task_attempt WHERE attempt_id = $1 FOR UPDATE', [attempt!.attempt_id]);
      const sent: string[] = [];
      const query = pg.Client.prototype.query;
      pg.Client.prototype.query = function counted(this: pg.Client, ...args: Parameters<typeof query>) {
        sent.push(String(typeof args[0] === 'string' ? args[0] : (args[0] as { text: string }).text));
        return query.apply(this, args);
      } as typeof query;
      let read;
      try {
        read = await readTaskRows(tdb.database.db, fence, taskId);
      } finally {
        pg.Client.prototype.query = query;
      }
      assert.equal(sent.length, 1, sent.join('\n'));
      assert.doesNotMatch(sent[0]!, /BEGIN|FOR UPDATE|FOR SHARE/);
      assert.deepEqual(read, { token: { ...fence, epoch: 1 }, mode: 'NORMAL', task, attempt });
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const missing = await readTaskRows(tdb.database.db, fence, randomUUID());
    assert.equal(missing.task, null);
    assert.equal(missing.attempt, null);
    await assert.rejects(readTaskRows(tdb.database.db, fence, "x' OR true; --"), /not a task id/);
  });

  test('a region that is not active is refused naming the owner; a mode that forbids the action pauses the step', async () => {
    const taskId = await insertTask();
    const rejected = await readTaskRows(tdb.database.db, { ...fence, region: 'region-elsewhere' }, taskId).catch((e: unknown) => e);
    assert.ok(rejected instanceof FenceRejectedError);
    assert.equal(rejected.current?.activeRegion, config.REGION);
    try {
      await setFence({ mode: 'MAINTENANCE' });
      await assert.rejects(readTaskRows(tdb.database.db, fence, taskId), (e: unknown) => e instanceof ModePausedError && e.action === 'factWrites');
    } finally {
      await setFence({ mode: 'NORMAL' });
    }
  });
});
