// A drill's world: its own Temporal dev server and S3 server (harness/temporal.ts, s3.ts), a
// fresh database, the provider simulator and the API in this process, and worker *processes*
// that a drill can kill, built with harness/world.ts. Everything is torn down by close().
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { sql } from 'drizzle-orm';
import type { ApiContext } from '../../api/context';
import { loadConfig, type Config } from '../../config/env';
import type { Database } from '../../db/client';
import { taskAttempt } from '../../db/schema';
import { createLogger } from '../../observability/logger';
import { createMetrics } from '../../observability/metrics';
import type { Simulator } from '../../providers/simulator/server';
import { REPO_ROOT, freePort, sleep, startS3, startTemporal, type ManagedProcess, type S3Process, type TemporalProcess } from '../../harness';
import {
  connectTemporal,
  createWorldDatabase,
  createWorldTenant,
  simulatorProviderSettings,
  startApiInProcess,
  startSimulator,
  startWorkerAsProcess,
  worldFacade,
  type RunningSimulator,
} from '../../harness/world';
import type { GenerationFacade } from '../../temporal/facade';

export interface DrillWorld {
  readonly config: Config;
  readonly db: Database;
  readonly sim: Simulator;
  /** The simulator with its job counts per attempt. */
  readonly simulator: RunningSimulator;
  readonly apiUrl: string;
  readonly apiKey: string;
  readonly facade: GenerationFacade;
  readonly client: Client;
  readonly workers: Map<string, ManagedProcess>;
  /** Each worker's metrics endpoint (WORKER_METRICS_PORT), by worker name. */
  readonly workerMetrics: Map<string, string>;
  /** The drill's data folder; worker <name> logs to <dataDir>/<name>.log. */
  readonly dataDir: string;
  /** The in-process API's context (its spool, admission). */
  readonly api: ApiContext;
  /** Stops the primary S3 server (its data stays); startS3() brings it back on the same port. */
  stopS3(): Promise<void>;
  startS3(): Promise<void>;
  /** Stops the Temporal dev server (with temporalDbFile, startTemporal() brings it back with its state). */
  stopTemporal(): Promise<void>;
  startTemporal(): Promise<void>;
  startWorker(name: string, env?: Record<string, string>): Promise<ManagedProcess>;
  close(): Promise<void>;
}

const quiet = () => undefined;

export interface DrillWorldOptions {
  /** Persist the Temporal dev server to a file so it survives stopTemporal()/startTemporal(). */
  readonly temporalDbFile?: boolean;
}

export async function startDrillWorld(
  name: string,
  overrides: Record<string, string>,
  log: (line: string) => void,
  opts: DrillWorldOptions = {},
): Promise<DrillWorld> {
  const id = `${name.replace(/\W/g, '_')}_${randomBytes(3).toString('hex')}`;
  const dataDir = path.join(REPO_ROOT, '.data', 'drill', id);
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    log('starting Temporal dev server and S3 server');
    const temporalOptions = {
      port: await freePort(),
      headless: true,
      log: quiet,
      ...(opts.temporalDbFile ? { dbFile: path.join(dataDir, 'temporal.db') } : {}),
    };
    let temporal: TemporalProcess | null = await startTemporal(temporalOptions);
    cleanups.push(() => temporal?.stop() ?? Promise.resolve());
    // Drills create at volume from one tenant: the tenant rate limit is not what they test.
    overrides = {
      TENANT_CREATE_RATE_PER_SECOND: '100000',
      TENANT_READ_RATE_PER_SECOND: '100000',
      TENANT_CANCEL_RATE_PER_SECOND: '100000',
      CALLBACK_SPOOL_DIR: path.join(dataDir, 'spool'),
      ...overrides,
    };
    const base = loadConfig({ ...process.env, ...overrides });
    const s3Options = {
      port: await freePort(),
      dataDir: path.join(dataDir, 's3'),
      accessKey: base.S3_ACCESS_KEY_ID,
      secretKey: base.S3_SECRET_ACCESS_KEY,
      buckets: [base.S3_BUCKET_OUTPUTS],
      log: quiet,
    };
    let s3: S3Process | null = await startS3(s3Options);
    cleanups.push(() => s3?.stop() ?? Promise.resolve());
    // The fallback bucket's endpoint (docs/decisions/0029): a second S3 server.
    const s3Fallback = await startS3({
      port: await freePort(),
      dataDir: path.join(dataDir, 's3-fallback'),
      accessKey: base.S3_FALLBACK_ACCESS_KEY_ID,
      secretKey: base.S3_FALLBACK_SECRET_ACCESS_KEY,
      buckets: [base.S3_FALLBACK_BUCKET],
      log: quiet,
    });
    cleanups.push(() => s3Fallback.stop());
    const s3Endpoint = s3.endpoint;

    const logger = createLogger({ name: `drill-${name}`, level: 'error', pretty: false });
    const simulator = await startSimulator(base, {
      logger,
      generationMs: base.SIMULATOR_GENERATION_MS,
      dataDir: path.join(REPO_ROOT, '.data', 'simulator'),
    });
    cleanups.push(() => simulator.close());

    const apiPort = await freePort();
    const wdb = await createWorldDatabase(base, {
      prefix: `vidorch_drill_${name.replace(/\W/g, '_')}`,
      max: 20,
      applicationName: 'vidorch-drill',
      failover: true,
    });
    cleanups.push(() => wdb.drop());
    const db = wdb.database;
    const config = loadConfig({
      ...process.env,
      ...overrides,
      DATABASE_URL: wdb.url,
      TEMPORAL_ADDRESS: temporal.address,
      S3_ENDPOINT: s3Endpoint,
      S3_FALLBACK_ENDPOINT: s3Fallback.endpoint,
      ...simulatorProviderSettings(simulator.baseUrl),
      PUBLIC_BASE_URL: `http://127.0.0.1:${apiPort}`,
      OUTPUT_FETCH_ALLOW_PRIVATE: 'true',
      WEBHOOK_ALLOW_PRIVATE: 'true',
    });
    log(`database ${new URL(wdb.url).pathname.slice(1)}`);

    const temporalClient = await connectTemporal(config);
    cleanups.push(() => temporalClient.close());
    const client = temporalClient.client;
    const facade = worldFacade(config, () => client);
    // As api/server.ts: callbacks spooled while Postgres was unreachable are replayed.
    const api = await startApiInProcess(config, db, {
      facade,
      logger,
      metrics: createMetrics({ service: 'drill-api' }),
      port: apiPort,
      replayMs: config.CALLBACK_SPOOL_REPLAY_MS,
    });
    cleanups.push(() => api.close());
    const apiUrl = api.baseUrl;

    const tenant = await createWorldTenant(db, config, { name: `drill-${id}`, credits: '1000000', actor: 'drill' });

    const workers = new Map<string, ManagedProcess>();
    const workerMetrics = new Map<string, string>();
    const world: DrillWorld = {
      config,
      db,
      sim: simulator.sim,
      simulator,
      apiUrl,
      apiKey: tenant.apiKey,
      facade,
      client,
      workers,
      workerMetrics,
      dataDir,
      api: api.ctx,
      async stopS3() {
        await s3?.stop('SIGTERM', 10_000);
        s3 = null;
      },
      async startS3() {
        s3 ??= await startS3(s3Options);
      },
      async stopTemporal() {
        await temporal?.stop('SIGTERM', 10_000);
        temporal = null;
      },
      async startTemporal() {
        temporal ??= await startTemporal(temporalOptions);
      },
      async startWorker(workerName, env = {}) {
        const worker = await startWorkerAsProcess(config, workerName, { logFile: path.join(dataDir, `${workerName}.log`), env });
        workers.set(workerName, worker.proc);
        workerMetrics.set(workerName, worker.metricsUrl);
        return worker.proc;
      },
      async close() {
        for (const w of workers.values()) await w.stop('SIGTERM', 5_000);
        for (const c of cleanups.reverse()) await c().catch(() => undefined);
        if (!process.env['DRILL_KEEP_DATA']) await rm(dataDir, { recursive: true, force: true });
      },
    };
    return world;
  } catch (err) {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    throw err;
  }
}

export interface Convergence {
  readonly byStatus: Record<string, number>;
  readonly settled: number;
}

/** Counts the drill's tasks by status (terminal and MANUAL_REVIEW count as converged). */
export async function convergence(db: Database): Promise<Convergence> {
  const { rows } = await db.db.execute(sql`SELECT status, count(*)::int AS n FROM generation_task GROUP BY status`);
  const byStatus = Object.fromEntries((rows as { status: string; n: number }[]).map((r) => [r.status, r.n]));
  const settled = ['SUCCEEDED', 'FAILED', 'CANCELLED', 'MANUAL_REVIEW'].reduce((n, s) => n + (byStatus[s] ?? 0), 0);
  return { byStatus, settled };
}

/**
 * Polls convergence every 2 s until `n` tasks have settled (or `done` says so) or `timeoutMs`
 * has passed; `progress` hears each unsettled count. The last count either way.
 */
export async function awaitConvergence(
  db: Database,
  n: number,
  timeoutMs: number,
  opts: { progress?: (c: Convergence) => void; done?: (c: Convergence) => boolean } = {},
): Promise<Convergence> {
  const deadline = Date.now() + timeoutMs;
  const done = opts.done ?? ((c: Convergence) => c.settled >= n);
  let c = await convergence(db);
  while (!done(c) && Date.now() < deadline) {
    opts.progress?.(c);
    await sleep(2_000);
    c = await convergence(db);
  }
  return c;
}

/** How many of `ids` are in the facts (an accepted task must be). */
export async function tasksStored(db: Database, ids: readonly string[]): Promise<number> {
  const { rows } = await db.db.execute(sql`SELECT count(*)::int AS n FROM generation_task WHERE task_id = ANY(${`{${ids.join(',')}}`}::uuid[])`);
  return (rows[0] as { n: number }).n;
}

/** Tasks whose ledger does not balance, plus the account's open reservations against open tasks. */
export async function ledgerImbalance(db: Database): Promise<number> {
  const { rows } = await db.db.execute(sql`
    SELECT count(*)::int AS n FROM (
      SELECT t.task_id,
        coalesce(sum(l.amount) FILTER (WHERE l.entry_type = 'RESERVE'), 0) AS reserved,
        coalesce(sum(l.amount) FILTER (WHERE l.entry_type IN ('SETTLE', 'RELEASE')), 0) AS closed,
        count(*) FILTER (WHERE l.entry_type = 'RESERVE') AS reserves,
        count(*) FILTER (WHERE l.entry_type = 'SETTLE') AS settles,
        t.terminal_at
      FROM generation_task t LEFT JOIN credit_ledger l ON l.task_id = t.task_id
      GROUP BY t.task_id, t.terminal_at
    ) x
    WHERE reserves <> 1 OR settles > 1 OR (terminal_at IS NOT NULL AND (settles <> 1 OR reserved <> closed))
       OR (terminal_at IS NULL AND settles <> 0)`);
  const [acct] = (
    await db.db.execute(sql`
    SELECT (SELECT coalesce(sum(reserved), 0) FROM credit_account)
         - (SELECT coalesce(sum(reserved_amount), 0) FROM generation_task WHERE terminal_at IS NULL) AS diff`)
  ).rows as { diff: string }[];
  return (rows[0] as { n: number }).n + (Number(acct?.diff ?? 0) === 0 ? 0 : 1);
}

/** Provider jobs per task: the simulator's job count for each of the task's attempts, summed. */
export async function providerJobsPerTask(world: Pick<DrillWorld, 'db' | 'simulator'>): Promise<Map<string, number>> {
  const attempts = await world.db.db.select({ taskId: taskAttempt.task_id, attemptId: taskAttempt.attempt_id }).from(taskAttempt);
  const jobs = new Map<string, number>();
  for (const a of attempts) jobs.set(a.taskId, (jobs.get(a.taskId) ?? 0) + world.simulator.jobsFor(a.attemptId));
  return jobs;
}

const DRILL_TASK = { model: 'minimax/video-01', duration_seconds: 6, resolution: '720p' };

/** Creates `n` tasks through the API, `concurrency` at a time; `body` may vary with the task's index. Returns their ids. */
export async function createTasks(
  world: DrillWorld,
  prefix: string,
  n: number,
  concurrency = 16,
  body: Record<string, unknown> | ((i: number) => Record<string, unknown>) = DRILL_TASK,
): Promise<string[]> {
  const ids: string[] = [];
  let next = 0;
  async function lane() {
    while (next < n) {
      const i = next++;
      const res = await fetch(`${world.apiUrl}/v1/tasks`, {
        method: 'POST',
        headers: { authorization: `Bearer ${world.apiKey}`, 'idempotency-key': `${prefix}-${i}`, 'content-type': 'application/json' },
        body: JSON.stringify({ ...(typeof body === 'function' ? body(i) : body), prompt: `drill ${prefix} ${i}` }),
      });
      if (res.status !== 202) throw new Error(`create ${prefix}-${i} answered ${res.status}: ${await res.text()}`);
      ids.push(((await res.json()) as { task_id: string }).task_id);
    }
  }
  await Promise.all(Array.from({ length: concurrency }, lane));
  return ids;
}

/** Resolves once `check` holds; throws after `timeoutMs`. */
export async function waitFor(check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`drill: condition not met in ${timeoutMs} ms`);
    await sleep(250);
  }
}
