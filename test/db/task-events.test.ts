// The reads behind live events (db/task-events.ts, docs/decisions/0020-event-stream-resume.md):
// the tenant stream's cursor never passes a transition a still-open transaction will commit,
// and the trigger wakes listeners with ids only. Real Postgres, one database for this file.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { createTask } from '../support/deps';
import { TASK_EVENTS_CHANNEL } from '../../api/event-hub';
import { holdFence, type FenceToken } from '../../db/fence';
import { formatTenantCursor, laterCursor, parseTenantCursor, taskTransitionsAfter, tenantStreamStart, tenantTransitionsAfter } from '../../db/task-events';
import { casTaskStatus } from '../../db/tasks';
import { createTestDatabase, createTestTenant, eventually, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let tenantId: string;
const token: FenceToken = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '50'));
});
after(async () => {
  await tdb?.drop();
});

const newTask = async (key: string) =>
  (
    await createTask(tdb.database.db, token, {
      tenantId,
      idempotencyKey: `${key}-${Date.now()}`,
      body: { model: 'minimax/video-01', prompt: key, duration_seconds: 6, resolution: '720p', priority: 0 },
    })
  ).task.task_id;

/** Moves the task QUEUED → DISPATCHING (version 0 → 1) on `client` (its own transaction, or one left open). */
const dispatchSql = (taskId: string) => ({
  text: `WITH t AS (UPDATE generation_task SET status = 'DISPATCHING', status_version = 1 WHERE task_id = $1 AND status_version = 0 RETURNING task_id)
         INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, region, write_epoch)
         SELECT task_id, 'QUEUED', 'DISPATCHING', 0, 1, 'test', 'test', $2, 1 FROM t`,
  values: [taskId, config.REGION],
});

test('the tenant cursor never passes a transition of a transaction still open: it is held back, then both arrive once, in commit-safe order', async () => {
  const a = await newTask('held-a');
  const b = await newTask('held-b');
  const start = await tenantStreamStart(tdb.database.db);
  const early = new pg.Client({ connectionString: tdb.url });
  const late = new pg.Client({ connectionString: tdb.url });
  await Promise.all([early.connect(), late.connect()]);
  try {
    // A takes its transaction id and its transition_id first, and stays open.
    await early.query('BEGIN');
    await early.query(dispatchSql(a));
    // B begins later, writes and commits: its transition_id is larger, its xact id too.
    await late.query(dispatchSql(b));
    const during = await tenantTransitionsAfter(tdb.database.db, tenantId, start, 100);
    const movedDuring = during.events.filter((e) => e.toStatus === 'DISPATCHING');
    assert.deepEqual(movedDuring, [], 'B is committed but held back behind the open A');
    assert.equal(during.heldBack, true);
    // What was final is delivered; the cursor stops before B.
    const cursor = during.events.at(-1)?.cursor ?? start;
    await early.query('COMMIT');
    // Finality is the cluster's snapshot xmin: another test file's open transaction may hold it back a while.
    const afterCommit = await eventually(async () => {
      const page = await tenantTransitionsAfter(tdb.database.db, tenantId, cursor, 100);
      return page.heldBack ? undefined : page;
    }, 60_000);
    assert.deepEqual(
      afterCommit.events.filter((e) => e.toStatus === 'DISPATCHING').map((e) => e.taskId),
      [a, b],
      'A (the earlier transaction) first, then B, each once',
    );
    assert.equal(afterCommit.heldBack, false);
    const again = await tenantTransitionsAfter(tdb.database.db, tenantId, afterCommit.events.at(-1)!.cursor, 100);
    assert.deepEqual(again.events, [], 'nothing twice');
  } finally {
    await early.query('ROLLBACK').catch(() => undefined);
    await Promise.all([early.end(), late.end()]);
  }
});

test("a tenant page that was not full goes on from the snapshot's xmin: past other tenants' rows, never past its own open transaction", async () => {
  const { tenantId: other } = await createTestTenant(tdb.database, config, '50');
  const start = await tenantStreamStart(tdb.database.db);
  // Another tenant's transitions only: the page is empty, and `through` passes them.
  const theirs = await createTask(tdb.database.db, token, {
    tenantId: other,
    idempotencyKey: `through-other-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: 'other', duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const [seen] = await tdb.database.db
    .execute<{ xact_id: string }>(sql`SELECT xact_id::text AS xact_id FROM task_transition WHERE task_id = ${theirs.task.task_id}`)
    .then((r) => r.rows);
  // The horizon is the cluster's: another test file's transaction open at this moment holds it
  // back, so read until it has passed the other tenant's row (it must, once nothing older is open).
  const empty = await eventually(async () => {
    const page = await tenantTransitionsAfter(tdb.database.db, tenantId, start, 100);
    assert.deepEqual(page.events, []);
    assert.ok(page.through, 'a page that was not full says how far it saw');
    return BigInt(page.through.xactId) > BigInt(seen!.xact_id) ? page : undefined;
  }, 60_000);
  assert.equal(laterCursor(start, empty.through!), empty.through);

  // One of ours written in a transaction still open when the page is read, one committed behind
  // it: going on from `through` delivers both, once.
  const mine = await newTask('through-mine');
  const late = await newTask('through-late');
  const open = new pg.Client({ connectionString: tdb.url });
  const next2 = new pg.Client({ connectionString: tdb.url });
  await Promise.all([open.connect(), next2.connect()]);
  try {
    const cursor = await eventually(async () => {
      const page = await tenantTransitionsAfter(tdb.database.db, tenantId, empty.through!, 100);
      return page.events.filter((e) => e.taskId === mine || e.taskId === late).length === 2 ? page.events.at(-1)!.cursor : undefined;
    }, 20_000);
    await open.query('BEGIN');
    await open.query(dispatchSql(mine));
    // A later transaction commits while the first is open: the snapshot's xmax is past both.
    await next2.query(dispatchSql(late));
    const during = await tenantTransitionsAfter(tdb.database.db, tenantId, cursor, 100);
    assert.deepEqual(during.events, []);
    assert.equal(during.heldBack, true);
    const from = laterCursor(cursor, during.through!);
    await open.query('COMMIT');
    const delivered = await eventually(async () => {
      const moved = (await tenantTransitionsAfter(tdb.database.db, tenantId, from, 100)).events.filter((e) => e.toStatus === 'DISPATCHING');
      return moved.length >= 2 ? moved.map((e) => e.taskId) : undefined;
    }, 20_000);
    assert.deepEqual(delivered, [mine, late], 'the transition of the transaction open during the read, then the later one, once each');
  } finally {
    await open.query('ROLLBACK').catch(() => undefined);
    await Promise.all([open.end(), next2.end()]);
  }
});

test("a task's transitions after a status_version come in version order, with the failure on FAILED", async () => {
  const taskId = await newTask('versions');
  await tdb.database.db.transaction(async (tx) => {
    await holdFence(tx, token);
    await casTaskStatus(tx, token, { taskId, from: 'QUEUED', expectedVersion: 0, to: 'DISPATCHING', sourceEvent: 'test', actor: 'test' });
    await casTaskStatus(tx, token, {
      taskId,
      from: 'DISPATCHING',
      expectedVersion: 1,
      to: 'FAILED',
      sourceEvent: 'test',
      actor: 'test',
      set: { failureCode: 'NO_ROUTE', failureMessage: 'none' },
    });
  });
  const all = await taskTransitionsAfter(tdb.database.db, taskId, -1, 10);
  assert.deepEqual(
    all.map((e) => [e.version, e.toStatus]),
    [
      [0, 'QUEUED'],
      [1, 'DISPATCHING'],
      [2, 'FAILED'],
    ],
  );
  assert.deepEqual(
    all.map((e) => e.failure),
    [null, null, { code: 'NO_ROUTE', message: 'none' }],
  );
  assert.deepEqual(
    (await taskTransitionsAfter(tdb.database.db, taskId, 1, 10)).map((e) => e.version),
    [2],
  );
});

test('task_transition_notify: every committed transition NOTIFYs its tenant, task and version (ids only); a rolled-back one nothing', async () => {
  const listener = new pg.Client({ connectionString: tdb.url });
  await listener.connect();
  const heard: { k: string; tenant: string; task: string; v: number }[] = [];
  listener.on('notification', (m) => heard.push(JSON.parse(m.payload ?? '{}')));
  await listener.query(`LISTEN ${TASK_EVENTS_CHANNEL}`);
  try {
    const rolledBack = await newTask('notify-rollback');
    await tdb.database.db
      .transaction(async (tx) => {
        await holdFence(tx, token);
        await casTaskStatus(tx, token, { taskId: rolledBack, from: 'QUEUED', expectedVersion: 0, to: 'DISPATCHING', sourceEvent: 'test', actor: 'test' });
        throw new Error('roll back');
      })
      .catch(() => undefined);
    const taskId = await newTask('notify');
    await eventually(async () => (heard.some((n) => n.task === taskId) ? true : undefined), 5_000, 10);
    assert.deepEqual(
      heard.find((n) => n.task === taskId),
      { k: 't', tenant: tenantId, task: taskId, v: 0 },
    );
    assert.equal(heard.filter((n) => n.task === rolledBack && n.v === 1).length, 0, 'no NOTIFY for a rolled-back transition');
  } finally {
    await listener.end();
  }
});

test('tenant cursors round-trip and anything else is not one', () => {
  const c = { xactId: '18446744073709551615', transitionId: 42 };
  assert.deepEqual(parseTenantCursor(formatTenantCursor(c)), c);
  assert.deepEqual(parseTenantCursor('0-0'), { xactId: '0', transitionId: 0 });
  for (const bad of ['', '12', '1-', '-1', 'a-1', '1-2-3', '18446744073709551616-1', '1-99999999999999999', '0999-1', '012-3', '12-03'])
    assert.equal(parseTenantCursor(bad), null, bad);
});
