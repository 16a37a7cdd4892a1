// A region failover mid-flight, small: worker groups of region-a and region-b on one Postgres
// and one Temporal task queue, tasks spread over their states, `failover --to region-b`. The
// region-a worker that watches the fence stops polling; a region-a zombie that never hears of
// the failover keeps polling and has every fact write and submit rejected; nothing is lost,
// no provider job is created twice, the ledger balances, everything converges under region-b.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { taskAttempt } from '../../db/schema';
import { convergence, ledgerImbalance } from '../../bench/drills/harness';
import { runFailover } from '../../ops/failover';
import { eventually, http } from '../support/stack';
import { startModesStack, startRegionWorker, type ModesStack, type RegionWorker } from '../ops/support';

let s: ModesStack;
let a: RegionWorker;
let zombie: RegionWorker;
let b: RegionWorker;
const TASKS = 12;

before(async () => {
  // Polls every 400–800 ms so that some tasks are seen RUNNING mid-flight: a poll rate above the
  // demand floor's reach (12 jobs at 10 reads/s would put polls 1.5 s apart, docs/providers.md).
  s = await startModesStack(
    'failover',
    { POLL_INITIAL_MS: '400', POLL_MAX_MS: '800', POLL_QUEUE_RATES: 'replicate=100' },
    { generationMs: 2_000, worker: false },
  );
  a = await startRegionWorker(s.config, s.tdb.database, s.tdb.url, { region: 'region-a', identity: 'region-a-watching' });
  zombie = await startRegionWorker(s.config, s.tdb.database, s.tdb.url, { region: 'region-a', watch: false, identity: 'region-a-zombie' });
  b = await startRegionWorker(s.config, s.tdb.database, s.tdb.url, { region: 'region-b', identity: 'region-b' });
  s.workers.push(a, zombie, b);
});
after(async () => {
  await s?.close();
});

test('failover a → b mid-flight with a zombie region-a worker: every zombie write and submit is rejected, no task lost, no duplicate provider job, ledger balanced, all converge under b', async () => {
  const ids: string[] = [];
  for (let i = 0; i < TASKS; i += 1) {
    ids.push(await s.createTask(`failover-${i}`));
    await new Promise((r) => setTimeout(r, 150));
  }
  // Mid-flight: some tasks at the provider (SUBMITTED or RUNNING: a callback or poll may take a
  // job past RUNNING between two looks), some not yet submitted.
  const atProvider = (byStatus: Record<string, number>) => (byStatus['SUBMITTED'] ?? 0) + (byStatus['RUNNING'] ?? 0);
  await eventually(async () => (atProvider((await convergence(s.tdb.database)).byStatus) > 0 ? true : undefined), 20_000, 50);
  const statesAtFailover = (await convergence(s.tdb.database)).byStatus;
  const zombieBefore = { ...zombie.stats.failures };

  const result = await runFailover(s.tdb.database.db, {
    scope: s.config.FENCE_SCOPE,
    toRegion: 'region-b',
    incidentId: 'INC-FAILOVER-TEST',
    acceptedRpoSeconds: 0,
    operator: 'operator:test',
    reason: 'drill',
    awaitWriteMs: 20_000,
  });
  const switchedAt = result.record.traffic_switch_time;
  assert.ok(result.rtoSeconds !== null && result.rtoSeconds < 20, `RTO ${result.rtoSeconds} s`);
  await eventually(async () => (a.supervisor!.state() === 'waiting' ? true : undefined), 2_000, 50);

  // The old region's API no longer admits creates.
  const refused = await s.create('failover-after');
  assert.equal(refused.status, 503);
  assert.match(refused.body.detail, /not the active region/);
  // The operator reopens once the report is read.
  await s.setMode('NORMAL', 'INC-FAILOVER-TEST: reopened');

  const deadline = Date.now() + 90_000;
  let c = await convergence(s.tdb.database);
  while (c.settled < TASKS && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 500));
    c = await convergence(s.tdb.database);
  }
  assert.equal(c.settled, TASKS, `all converged: ${JSON.stringify(c.byStatus)} (at failover ${JSON.stringify(statesAtFailover)})`);
  assert.equal(c.byStatus['SUCCEEDED'], TASKS, JSON.stringify(c.byStatus));

  const zombieRejections = (zombie.stats.failures['FenceRejected'] ?? 0) - (zombieBefore['FenceRejected'] ?? 0);
  assert.ok(zombieRejections > 0, `the zombie kept trying and was rejected (${JSON.stringify(zombie.stats)})`);
  const { rows: lateWrites } = await s.tdb.database.db.execute(sql`
    SELECT (SELECT count(*)::int FROM task_transition WHERE region = 'region-a' AND created_at > ${switchedAt}) +
           (SELECT count(*)::int FROM credit_ledger WHERE region = 'region-a' AND created_at > ${switchedAt}) AS n`);
  assert.equal((lateWrites[0] as { n: number }).n, 0, 'no fact written by region-a after the switch');
  const { rows: bWrites } = await s.tdb.database.db.execute(sql`
    SELECT count(*)::int AS n FROM task_transition WHERE region = 'region-b' AND write_epoch = ${result.record.new_epoch}`);
  assert.ok((bWrites[0] as { n: number }).n > 0);

  const attempts = await s.tdb.database.db.select().from(taskAttempt);
  const jobsPerTask = new Map<string, number>();
  for (const at of attempts) jobsPerTask.set(at.task_id, (jobsPerTask.get(at.task_id) ?? 0) + s.sim.jobsFor(at.attempt_id));
  assert.deepEqual([...new Set(ids.map((id) => jobsPerTask.get(id)))], [1], 'exactly one provider job per task');
  assert.equal(await ledgerImbalance(s.tdb.database), 0);
  const ready = await http(s.opsUrl, 'GET', '/readyz');
  assert.equal(ready.body.active_region, 'region-b');
});
