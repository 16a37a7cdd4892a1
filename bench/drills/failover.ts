// Drill: region failover mid-flight (docs/runbooks/failover.md). Two worker groups on one Postgres
// and one Temporal task queue — REGION=region-a (one that watches the fence, one zombie that
// never hears of the failover) and REGION=region-b (standing by) — run N tasks created at a
// steady rate so that, when `ops failover --to region-b` runs, they are spread over their
// states. Figures: nothing lost, one provider job per task, ledger balanced, every write after
// the switch made by region-b, the zombie's attempts all rejected, RTO (failover command →
// first successful write under region-b) and the time to converge.
import fs from 'node:fs/promises';
import path from 'node:path';
import { sql } from 'drizzle-orm';
import { setMode } from '../../db/modes';
import { sleep } from '../../harness';
import { reconciliationSummary, runFailover } from '../../ops/failover';
import { convergence, type DrillWorld, ledgerImbalance, providerJobsPerTask, startDrillWorld, awaitConvergence, tasksStored } from './harness';

export interface FailoverDrillReport {
  readonly tasks: number;
  readonly accepted: number;
  readonly statesAtFailover: Record<string, number>;
  readonly byStatus: Record<string, number>;
  readonly lost: number;
  readonly maxProviderJobsPerTask: number;
  readonly tasksWithDuplicateJobs: number;
  readonly ledgerImbalance: number;
  readonly regionAWritesAfterSwitch: number;
  readonly regionBWrites: number;
  readonly zombieRejectedActivities: number;
  readonly zombieRejectedSubmits: number;
  readonly standbyPollingAfterMs: number | null;
  readonly rtoSeconds: number | null;
  readonly failoverCommandSeconds: number;
  readonly convergeSecondsAfterFailover: number;
  readonly creates503AfterFailover: boolean;
  readonly failover: Record<string, unknown>;
}

async function createTasks(world: DrillWorld, n: number, spreadMs: number, log: (line: string) => void): Promise<string[]> {
  const ids: string[] = [];
  const started = Date.now();
  for (let i = 0; i < n; i += 1) {
    // A steady arrival rate: task i is created at i/n of the spread.
    const due = started + (spreadMs * i) / n;
    if (due > Date.now()) await sleep(due - Date.now());
    const res = await fetch(`${world.apiUrl}/v1/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${world.apiKey}`, 'idempotency-key': `failover-${i}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'minimax/video-01', prompt: `failover drill ${i}`, duration_seconds: 6, resolution: '720p' }),
    });
    if (res.status !== 202) throw new Error(`create ${i} answered ${res.status}: ${await res.text()}`);
    ids.push(((await res.json()) as { task_id: string }).task_id);
    if ((i + 1) % 50 === 0) log(`created ${i + 1}/${n}`);
  }
  return ids;
}

/** Lines of a worker's JSON log after `since` whose activity failed with `type`. */
async function failuresInLog(file: string, type: string, since: Date): Promise<{ all: number; submits: number }> {
  const text = await fs.readFile(file, 'utf8').catch(() => '');
  let all = 0;
  let submits = 0;
  for (const line of text.split('\n')) {
    if (!line.includes(`"type":"${type}"`)) continue;
    try {
      const entry = JSON.parse(line) as { time?: string; activityType?: string };
      if (!entry.time || new Date(entry.time) < since) continue;
      all += 1;
      if (entry.activityType === 'submitAttempt') submits += 1;
    } catch {
      // not a JSON line
    }
  }
  return { all, submits };
}

async function waitForLine(world: DrillWorld, worker: string, pattern: RegExp, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const file = path.join(world.dataDir, `${worker}.log`);
  while (Date.now() < deadline) {
    if (pattern.test(await fs.readFile(file, 'utf8').catch(() => ''))) return;
    await sleep(250);
  }
  throw new Error(`${worker} did not log ${pattern} within ${timeoutMs} ms`);
}

export async function runFailoverDrill(opts: {
  tasks: number;
  spreadSeconds: number;
  log: (line: string) => void;
  timeoutMs?: number;
}): Promise<FailoverDrillReport> {
  const { log } = opts;
  const world = await startDrillWorld(
    'failover',
    {
      SIMULATOR_GENERATION_MS: '5000',
      POLL_INITIAL_MS: '2000',
      POLL_MAX_MS: '4000',
      MODE_PAUSE_RETRY_MS: '2000',
      FENCE_WATCH_INTERVAL_MS: '1000',
      WORKER_MAX_CONCURRENT_ACTIVITIES: '200',
      // A fenced worker's in-flight activities cannot commit anything: no point waiting long for them.
      WORKER_SHUTDOWN_GRACE_MS: '5000',
      TENANT_CREATE_RATE_PER_SECOND: '1000',
    },
    log,
  );
  try {
    const workerEnv = { LOG_LEVEL: 'info' };
    log('starting workers: region-a (watching), region-a zombie (no fence watcher), region-b (standby)');
    await world.startWorker('region-a', { ...workerEnv, REGION: 'region-a' });
    await world.startWorker('region-a-zombie', { ...workerEnv, REGION: 'region-a', FENCE_WATCH_ENABLED: 'false' });
    await world.startWorker('region-b', { ...workerEnv, REGION: 'region-b' });
    await Promise.all([
      waitForLine(world, 'region-a', /worker polling/, 120_000),
      waitForLine(world, 'region-a-zombie', /worker polling/, 120_000),
      waitForLine(world, 'region-b', /standing by/, 120_000),
    ]);

    log(`creating ${opts.tasks} tasks over ${opts.spreadSeconds} s`);
    const ids = await createTasks(world, opts.tasks, opts.spreadSeconds * 1000, log);
    const statesAtFailover = (await convergence(world.db)).byStatus;
    log(`states at failover: ${JSON.stringify(statesAtFailover)}`);

    const failoverStarted = Date.now();
    const result = await runFailover(world.db.db, {
      scope: world.config.FENCE_SCOPE,
      toRegion: 'region-b',
      incidentId: 'DRILL-FAILOVER',
      acceptedRpoSeconds: 0,
      operator: 'operator:drill',
      reason: 'failover drill',
      awaitWriteMs: 60_000,
      log: (line) => log(`failover: ${line}`),
    });
    const failoverCommandSeconds = (Date.now() - failoverStarted) / 1000;
    const switchedAt = result.record.traffic_switch_time;
    let standbyPollingAfterMs: number | null = null;
    try {
      await waitForLine(world, 'region-b', /worker polling/, 30_000);
      const line = (await fs.readFile(path.join(world.dataDir, 'region-b.log'), 'utf8')).split('\n').find((l) => l.includes('worker polling'));
      const t = line ? (JSON.parse(line) as { time: string }).time : null;
      standbyPollingAfterMs = t ? new Date(t).getTime() - switchedAt.getTime() : null;
    } catch {
      standbyPollingAfterMs = null;
    }
    const refused = await fetch(`${world.apiUrl}/v1/tasks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${world.apiKey}`, 'idempotency-key': 'failover-after', 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'minimax/video-01', prompt: 'after', duration_seconds: 6, resolution: '720p' }),
    });
    await refused.body?.cancel();

    log('operator reopens: mode set NORMAL');
    await setMode(world.db.db, { scope: world.config.FENCE_SCOPE, mode: 'NORMAL', actor: 'operator:drill', reason: 'DRILL-FAILOVER: reopened' });

    const c = await awaitConvergence(world.db, ids.length, opts.timeoutMs ?? 10 * 60_000, {
      progress: (p) => log(`converging under region-b: ${p.settled}/${ids.length} ${JSON.stringify(p.byStatus)}`),
    });
    const convergeSecondsAfterFailover = (Date.now() - failoverStarted) / 1000;

    const jobsPerTask = await providerJobsPerTask(world);
    const { rows: writeRows } = await world.db.db.execute(sql`
      SELECT
        (SELECT count(*)::int FROM task_transition WHERE region = 'region-a' AND created_at > ${switchedAt})
        + (SELECT count(*)::int FROM credit_ledger WHERE region = 'region-a' AND created_at > ${switchedAt}) AS a_after,
        (SELECT count(*)::int FROM task_transition WHERE region = 'region-b' AND write_epoch = ${result.record.new_epoch}) AS b_writes`);
    const writes = writeRows[0] as { a_after: number; b_writes: number };
    const zombie = await failuresInLog(path.join(world.dataDir, 'region-a-zombie.log'), 'FenceRejected', switchedAt);
    const inDb = await tasksStored(world.db, ids);
    return {
      tasks: opts.tasks,
      accepted: ids.length,
      statesAtFailover,
      byStatus: c.byStatus,
      // Accepted (202) but missing from the facts, or never converged.
      lost: ids.length - inDb + (ids.length - c.settled),
      maxProviderJobsPerTask: Math.max(0, ...jobsPerTask.values()),
      tasksWithDuplicateJobs: [...jobsPerTask.values()].filter((n) => n > 1).length,
      ledgerImbalance: await ledgerImbalance(world.db),
      regionAWritesAfterSwitch: writes.a_after,
      regionBWrites: writes.b_writes,
      zombieRejectedActivities: zombie.all,
      zombieRejectedSubmits: zombie.submits,
      standbyPollingAfterMs,
      rtoSeconds: result.rtoSeconds,
      failoverCommandSeconds,
      convergeSecondsAfterFailover,
      creates503AfterFailover: refused.status === 503,
      failover: {
        incident_id: result.record.incident_id,
        old_region: result.record.old_region,
        new_region: result.record.new_region,
        old_epoch: result.record.old_epoch,
        new_epoch: result.record.new_epoch,
        replication_position: result.record.replication_position,
        traffic_switch_time: result.record.traffic_switch_time,
        first_successful_write_time: result.record.first_successful_write_time,
        reconciliation: reconciliationSummary(result.report),
      },
    };
  } finally {
    await world.close();
  }
}
