// The fence watcher: a worker polls its task queue only while its REGION is the active one,
// stops soon after a failover away (the process stays up), also when the failover away comes
// while it is still starting, and starts again soon after its region becomes active; a missed
// NOTIFY is covered by the periodic read; a mode change reaches the API's admission within 2 s.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import { createAdmission } from '../../api/admission';
import { HttpProblem } from '../../api/problem';
import { setMode, switchActiveRegion } from '../../db/modes';
import { taskTransition } from '../../db/schema';
import { startFenceWatcher } from '../../workers/fence-watcher';
import { eventually, testLogger } from '../support/stack';
import { startModesStack, startRegionWorker, type ModesStack, type RegionWorker } from './support';

let s: ModesStack;
let b: RegionWorker;
let seq = 0;

before(async () => {
  s = await startModesStack('watcher', {}, { generationMs: 500, worker: false });
  b = await startRegionWorker(s.config, s.tdb.database, s.tdb.url, { region: 'region-b' });
  s.workers.push(b);
});
after(async () => {
  await s?.close();
});

const switchTo = (region: string) =>
  switchActiveRegion(s.tdb.database.db, {
    scope: s.config.FENCE_SCOPE,
    toRegion: region,
    incidentId: `INC-W-${++seq}`,
    operator: 'test',
    reason: 'test',
    replicationPosition: '0/0',
    acceptedRpoSeconds: 0,
    startedAt: new Date(),
  });

// How long a supervisor may take to follow a failover here: a bound that fails a supervisor
// that does not follow, loose enough for a loaded CI machine. The figure is the failover
// drill's (`npm run drill -- failover`, "standby region-b worker polling after switch (ms)").
const FOLLOW_MS = 10_000;

/** Milliseconds until `check` holds (polling every 50 ms), or throws after `timeoutMs`. */
async function timeUntil(check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<number> {
  const started = Date.now();
  await eventually(async () => ((await check()) ? true : undefined), timeoutMs, 50);
  return Date.now() - started;
}

test('a standby worker does not poll; after a failover to its region it polls and runs the task under the new epoch; it stops after a failover away', async () => {
  assert.equal(b.supervisor!.state(), 'waiting');
  assert.equal(b.current(), null);
  // Region-a is active but has no worker here: the task's workflow starts and nobody runs it.
  const id = await s.createTask('standby-1');
  await new Promise((r) => setTimeout(r, 1_500));
  assert.equal((await s.getTask(id)).status, 'QUEUED', 'the standby region-b worker took nothing');

  const record = await switchTo('region-b');
  const startMs = await timeUntil(() => b.supervisor!.state() === 'running', FOLLOW_MS);
  testLogger.info({ startMs }, 'region-b worker polling');
  await s.waitForStatus(id, 'SUCCEEDED', 60_000);
  const writes = await s.tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, id));
  const after = writes.filter((w) => w.to_status !== 'QUEUED');
  assert.ok(after.length > 0 && after.every((w) => w.region === 'region-b' && w.write_epoch === record.new_epoch), 'every write under region-b, new epoch');

  await switchTo('region-a');
  const stopMs = await timeUntil(() => b.supervisor!.state() === 'waiting' && b.current() === null, FOLLOW_MS);
  testLogger.info({ stopMs }, 'region-b worker stopped');
});

test('a failover away while the standby worker is still starting stops it once it has started, and it stays stopped', async () => {
  assert.equal(b.supervisor!.state(), 'waiting');
  await switchTo('region-b');
  await timeUntil(() => b.supervisor!.state() === 'starting', FOLLOW_MS);
  // Away again before its workers exist: the stop waits for the start, then reaches every
  // worker even though they are still opening their listeners (workers/generation-worker.ts).
  await switchTo('region-a');
  await timeUntil(() => b.supervisor!.state() === 'waiting' && b.current() === null, FOLLOW_MS);
  await new Promise((r) => setTimeout(r, 1_000));
  assert.equal(b.supervisor!.state(), 'waiting', 'not restarted while region-a is active');
  assert.equal(b.current(), null);
});

test('without LISTEN the periodic read alone notices a failover within its interval', async () => {
  const watcher = await startFenceWatcher({
    db: s.tdb.database.db,
    databaseUrl: s.tdb.url,
    scope: s.config.FENCE_SCOPE,
    intervalMs: 500,
    logger: testLogger,
    listen: false,
  });
  try {
    const before = watcher.current()!.activeRegion;
    const target = before === 'region-a' ? 'region-c' : 'region-a';
    await switchTo(target);
    const ms = await timeUntil(() => watcher.current()?.activeRegion === target, 2_000);
    assert.ok(ms <= 1_500, `noticed after ${ms} ms`);
  } finally {
    await watcher.stop();
    await switchTo('region-a').catch(() => undefined);
  }
});

test('a mode change reaches a watcher at once (NOTIFY) and an API process with a 1 s fence cache within 2 s', async () => {
  const watcher = await startFenceWatcher({
    db: s.tdb.database.db,
    databaseUrl: s.tdb.url,
    scope: s.config.FENCE_SCOPE,
    intervalMs: 60_000,
    logger: testLogger,
  });
  const admission = createAdmission(s.tdb.database.db, { scope: s.config.FENCE_SCOPE, region: s.config.REGION }, 1_000);
  try {
    await admission.assertCanCreate();
    await setMode(s.tdb.database.db, { scope: s.config.FENCE_SCOPE, mode: 'RECONCILE_ONLY', actor: 'test', reason: 'test' });
    const notifyMs = await timeUntil(() => watcher.current()?.mode === 'RECONCILE_ONLY', 2_000);
    assert.ok(notifyMs < 1_000, `watcher heard it after ${notifyMs} ms (its periodic read is 60 s away)`);
    const apiMs = await timeUntil(
      () =>
        admission.assertCanCreate().then(
          () => false,
          (err: unknown) => err instanceof HttpProblem && err.status === 503,
        ),
      2_000,
    );
    assert.ok(apiMs <= 2_000, `the API refused creates after ${apiMs} ms`);
  } finally {
    await watcher.stop();
    await setMode(s.tdb.database.db, { scope: s.config.FENCE_SCOPE, mode: 'NORMAL', actor: 'test', reason: 'test' });
  }
});

test('a watcher whose LISTEN connection is terminated (as a Postgres restart does) does not crash the process and listens again', async () => {
  const watcher = await startFenceWatcher({
    db: s.tdb.database.db,
    databaseUrl: s.tdb.url,
    scope: s.config.FENCE_SCOPE,
    intervalMs: 60_000,
    logger: testLogger,
  });
  try {
    const { rows } = await s.tdb.database.db.execute(sql`
      SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
      WHERE application_name = 'vidorch-fence-watcher' AND datname = current_database()`);
    assert.ok((rows[0] as { n: number }).n >= 1, 'the LISTEN connection was killed');
    await new Promise((r) => setTimeout(r, 2_500));
    await setMode(s.tdb.database.db, { scope: s.config.FENCE_SCOPE, mode: 'QUEUE_ONLY', actor: 'test', reason: 'test' });
    const ms = await timeUntil(() => watcher.current()?.mode === 'QUEUE_ONLY', 3_000);
    assert.ok(ms < 1_000, `heard the change ${ms} ms later (its periodic read is 60 s away)`);
  } finally {
    await watcher.stop();
    await setMode(s.tdb.database.db, { scope: s.config.FENCE_SCOPE, mode: 'NORMAL', actor: 'test', reason: 'test' });
  }
});
