// The slot queue at thousands of waiters (db/slot-queue.ts, docs/providers.md "The slot queue"),
// on real Postgres: a grant pass reads the heads of the waiting lines, not every waiter; a
// waiter's periodic look takes no lock; and a transaction holding one provider's control row
// never takes another's (the one lock order), so a claim and a release meet without a deadlock.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { inArray } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { createTask, testActivityDeps } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import type { Db } from '../../db/client';
import * as schema from '../../db/schema';
import { providerControl, slotWait, taskAttempt } from '../../db/schema';
import { SLOT_FREED_CHANNEL, grantFreeSlots, recheckWait, releaseTaskSlots, roomFor, takeSlot } from '../../db/slot-queue';
import { startSlotGrantWaker } from '../../workers/slot-grant-waker';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

let tdb: TestDatabase;
let acts: TaskActivities;
let config: ReturnType<typeof testConfig>;
const tenants: string[] = [];
const DEFAULTS = { perProvider: null, total: null, weight: 1 };

before(async () => {
  config = testConfig({ BULKHEAD_RAMP_MS: '0', SLOT_QUEUE_AGING_MS: '0', PROVIDER_CREATE_QUOTAS: 'replicate=100000' });
  tdb = await createTestDatabase(config);
  acts = createTaskActivities(testActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) }));
  for (let i = 0; i < 3; i += 1) tenants.push((await createTestTenant(tdb.database, config, '100000')).tenantId);
});
after(async () => {
  await tdb?.drop();
});
beforeEach(async () => {
  await tdb.database.db.delete(slotWait);
  await tdb.database.db
    .update(taskAttempt)
    .set({ submit_state: 'SUCCEEDED' })
    .where(inArray(taskAttempt.submit_state, ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN']));
  await tdb.database.db.delete(providerControl);
});

const run = <K extends keyof TaskActivities>(name: K, ...args: Parameters<TaskActivities[K]>) =>
  new MockActivityEnvironment().run(acts[name] as never, ...(args as unknown as never[])) as ReturnType<TaskActivities[K]>;

let seq = 0;
async function prepared(tenantId: string, model = 'minimax/video-01'): Promise<{ taskId: string; attemptId: string; tenantId: string }> {
  seq += 1;
  const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
  const body =
    model === 'minimax/video-01' ? { model, duration_seconds: 6, resolution: '720p' as const } : { model, duration_seconds: 5, resolution: '720p' as const };
  const { task } = await createTask(tdb.database.db, token, {
    tenantId,
    idempotencyKey: `scale-${seq}`,
    body: { ...body, prompt: `scale ${seq}`, priority: 0 },
  });
  await run('dispatchTask', task.task_id);
  const facts = await run('prepareAttempt', task.task_id);
  return { taskId: task.task_id, attemptId: facts.activeAttemptId!, tenantId };
}

/** `n` waiters of `tenantId` at replicate, priorities 0–2 in turn: copies of one prepared task and its attempt, in three statements. */
async function waiters(tenantId: string, n: number, sinceMs: number): Promise<void> {
  const template = await prepared(tenantId);
  await tdb.database.pool.query(
    `WITH ids AS (SELECT i, gen_random_uuid() AS task_id, gen_random_uuid() AS attempt_id FROM generate_series(1, $2::int) i),
     t AS (INSERT INTO generation_task SELECT (jsonb_populate_record(NULL::generation_task, to_jsonb(g) || jsonb_build_object(
             'task_id', ids.task_id, 'active_attempt_id', ids.attempt_id, 'idempotency_key', g.idempotency_key || '-' || ids.i))).*
           FROM generation_task g, ids WHERE g.task_id = $1 RETURNING 1),
     a AS (INSERT INTO task_attempt SELECT (jsonb_populate_record(NULL::task_attempt, to_jsonb(x) || jsonb_build_object(
             'task_id', ids.task_id, 'attempt_id', ids.attempt_id, 'provider_idempotency_key', ids.attempt_id))).*
           FROM task_attempt x, ids WHERE x.task_id = $1 RETURNING 1)
     SELECT (SELECT count(*) FROM t), (SELECT count(*) FROM a)`,
    [template.taskId, n],
  );
  await tdb.database.pool.query(
    `INSERT INTO slot_wait (attempt_id, task_id, provider, tenant_id, priority, since)
     SELECT a.attempt_id, a.task_id, 'replicate', $1::uuid, (row_number() OVER (ORDER BY a.attempt_id)) % 3, to_timestamp($2::double precision / 1000) + (row_number() OVER (ORDER BY a.attempt_id)) * interval '1 ms'
     FROM task_attempt a JOIN generation_task t ON t.task_id = a.task_id
     WHERE t.idempotency_key LIKE $3 AND a.attempt_id <> $4`,
    [tenantId, sinceMs, `scale-${seq}-%`, template.attemptId],
  );
}

/** Queue rows read (sequential and through any index) in slot_wait while `work` runs, on one connection (a pool of one). */
async function slotWaitRowsRead(work: (db: Db) => Promise<void>): Promise<number> {
  const one = new pg.Pool({ connectionString: tdb.url, max: 1 });
  const read = async () => {
    await one.query('SELECT pg_stat_force_next_flush()');
    await one.query('SELECT pg_stat_clear_snapshot()');
    const { rows } = await one.query<{ n: string }>(
      `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) + (SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relname = 'slot_wait') AS n
       FROM pg_stat_user_tables WHERE relname = 'slot_wait'`,
    );
    return Number(rows[0]!.n);
  };
  try {
    const before = await read();
    await one.query('SELECT pg_stat_force_next_flush()');
    await work(drizzle(one, { schema }));
    return (await read()) - before;
  } finally {
    await one.end();
  }
}

test('a grant pass with 3,000 waiters reads the heads of the waiting lines, not every waiter, and grants by the policy', async () => {
  const t0 = Date.now() - 60_000;
  for (const [i, tenant] of tenants.entries()) await waiters(tenant, 1_000, t0 + i);
  await tdb.database.pool.query('ANALYZE slot_wait');
  // 5 slots, 4 taken by grants not yet used: one is free.
  await tdb.database.pool.query(`UPDATE slot_wait SET granted_at = now() WHERE attempt_id IN (SELECT attempt_id FROM slot_wait WHERE tenant_id = $1 LIMIT 4)`, [
    tenants[0],
  ]);
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', queue_limit: 5, queue_policy: 'fair' });
  let granted: readonly string[] = [];
  const rowsRead = await slotWaitRowsRead(async (db) => {
    granted = (await db.transaction((tx) => grantFreeSlots(tx, 'replicate', new Date()))).granted;
  });
  assert.equal(granted.length, 1, 'one slot was free');
  const [row] = await tdb.database.db
    .select()
    .from(slotWait)
    .where(inArray(slotWait.attempt_id, [...granted]));
  // Fair share: tenant 0 holds 4 grants, so the slot goes to another tenant's oldest priority-2 waiter.
  assert.notEqual(row!.tenant_id, tenants[0]);
  assert.equal(row!.priority, 2);
  // 3 tenants × 3 priorities = 9 lines; each costs a step of the skip scan and its oldest row.
  assert.ok(rowsRead < 150, `read ${rowsRead} queue rows for one grant among 3,000 waiters`);
});

test("a waiter's periodic look takes no provider lock and runs no pass: it answers while a claim holds the provider's row", async () => {
  const full = await prepared(tenants[0]!);
  const waiting = await prepared(tenants[1]!);
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1, queue_limit: 1 });
  await tdb.database.db.insert(slotWait).values([
    { attempt_id: full.attemptId, task_id: full.taskId, provider: 'replicate', tenant_id: full.tenantId, priority: 0, granted_at: new Date() },
    { attempt_id: waiting.attemptId, task_id: waiting.taskId, provider: 'replicate', tenant_id: waiting.tenantId, priority: 0 },
  ]);
  const look = await recheckWait(tdb.database.db, waiting.attemptId, 'replicate', new Date(), 300_000);
  assert.ok(look && !roomFor(look, 1), 'no room: the one slot is granted');
  assert.ok(roomFor(look, 2), 'a slot under a higher ceiling is room');
  const claim = await tdb.database.pool.connect();
  try {
    await claim.query('BEGIN');
    await claim.query(`SELECT 1 FROM provider_control WHERE provider = 'replicate' FOR UPDATE`);
    const started = Date.now();
    const result = await run('submitAttempt', waiting.taskId);
    assert.ok(Date.now() - started < 2_000, 'the look did not wait for the lock');
    assert.ok(result.waitMs && result.waitMs > 0, 'it keeps waiting for its grant');
  } finally {
    await claim.query('ROLLBACK');
    claim.release();
  }
});

test('the one lock order: a claim holding its provider ends a task that used a second provider without locking it (no deadlock, no lock timeout); the second pass runs after the commit', async () => {
  // The leaving task used fal (an earlier attempt) and now replicate; a waiter at fal could take its slot.
  const leaving = await prepared(tenants[0]!);
  await tdb.database.pool.query(
    `INSERT INTO task_attempt SELECT (jsonb_populate_record(NULL::task_attempt, to_jsonb(a) || jsonb_build_object('attempt_id', gen_random_uuid(), 'provider', 'fal', 'attempt_no', a.attempt_no + 1))).*
     FROM task_attempt a WHERE a.attempt_id = $1`,
    [leaving.attemptId],
  );
  const atFal = await prepared(tenants[1]!, 'fal-ai/kling-video/v2/master/text-to-video');
  await tdb.database.db
    .insert(slotWait)
    .values({ attempt_id: atFal.attemptId, task_id: atFal.taskId, provider: 'fal', tenant_id: atFal.tenantId, priority: 0 });
  await tdb.database.db.insert(providerControl).values([
    { provider: 'replicate', queue_limit: 10 },
    { provider: 'fal', queue_limit: 10 },
  ]);
  const claimant = await prepared(tenants[2]!);
  const freed: string[] = [];
  const listener = new pg.Client({ connectionString: tdb.url });
  await listener.connect();
  listener.on('notification', (n) => {
    if (n.channel === SLOT_FREED_CHANNEL && n.payload) freed.push(n.payload);
  });
  await listener.query(`LISTEN ${SLOT_FREED_CHANNEL}`);
  const other = await tdb.database.pool.connect();
  try {
    // The claim at replicate holds replicate's row (takeSlot locks it), then, inside the same
    // transaction, a task that used fal leaves (the path finishTask takes from a claim).
    let held!: () => void;
    const holding = new Promise<void>((r) => (held = r));
    let go!: () => void;
    const goOn = new Promise<void>((r) => (go = r));
    const claim = tdb.database.db.transaction(async (tx) => {
      const slot = await takeSlot(
        tx,
        {
          attemptId: claimant.attemptId,
          taskId: claimant.taskId,
          provider: 'replicate',
          tenantId: claimant.tenantId,
          priority: 0,
          ceiling: 10,
          policy: { mode: 'fair', agingMs: 0 },
          grantTtlMs: 300_000,
          tenantDefaults: DEFAULTS,
          locked: false,
        },
        new Date(),
      );
      assert.equal(slot.kind, 'granted');
      held();
      await goOn;
      await releaseTaskSlots(tx, leaving.taskId, new Date());
    });
    await holding;
    // Another transaction holds fal and then wants replicate: the opposite order.
    await other.query('BEGIN');
    await other.query(`SELECT 1 FROM provider_control WHERE provider = 'fal' FOR UPDATE`);
    go();
    await new Promise((r) => setTimeout(r, 500));
    const second = other.query(`SELECT 1 FROM provider_control WHERE provider = 'replicate' FOR UPDATE`);
    await claim;
    await second;
    await other.query('COMMIT');
  } catch (err) {
    await other.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    other.release();
  }
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual(freed, ['fal'], "fal's pass was left for after the commit");
  await listener.end();
  // The worker's waker answers it with a pass of its own, and the waiter at fal is granted.
  const waker = await startSlotGrantWaker({
    databaseUrl: tdb.url,
    wake: () => undefined,
    grant: async (provider) => {
      await tdb.database.db.transaction((tx) => grantFreeSlots(tx, provider, new Date()));
    },
  });
  try {
    await tdb.database.pool.query(`SELECT pg_notify($1, 'fal')`, [SLOT_FREED_CHANNEL]);
    const until = Date.now() + 5_000;
    for (;;) {
      const [row] = await tdb.database.db
        .select()
        .from(slotWait)
        .where(inArray(slotWait.attempt_id, [atFal.attemptId]));
      if (row?.granted_at) break;
      assert.ok(Date.now() < until, 'the waiter at fal was granted');
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await waker.stop();
  }
});
