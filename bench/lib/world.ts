// A benchmark's world: the drill world of bench/drills/harness.ts (its own Temporal dev server,
// S3 server, fresh database, in-process simulator, worker processes), plus what benchmarks
// need on top: the API as its own process (so its CPU is its own and measurable), tenants
// with deep pockets, the database's own counts of the work done in it (bench/lib/pg-counts.ts),
// and CPU groups for the probe.
import fs from 'node:fs';
import path from 'node:path';
import { configToEnv } from '../../config/env';
import { startDrillWorld, type DrillWorld } from '../drills/harness';
import { createTenant } from '../../ops/tenants';
import { REPO_ROOT, fileLogger, freePort, startNodeProcess, waitForHttp, type ManagedProcess } from '../../harness';
import { enableStatementCounts, readPgCounts, statementKey, type PgCounts } from './pg-counts';
import { childProcesses } from './procstat';

export const BENCH_DATA_DIR = path.join(REPO_ROOT, '.data', 'bench');
/** Where a worker's memory is, by isolate and native (bench/lib/memory-preload.mjs). */
export const MEMORY_PRELOAD = path.join(REPO_ROOT, 'bench', 'lib', 'memory-preload.mjs');

export interface BenchTenant {
  readonly tenantId: string;
  readonly apiKey: string;
}

export interface ApiProcess {
  readonly url: string;
  readonly proc: ManagedProcess;
  /** The process's operator listener (loopback, no bearer): /metrics. */
  readonly opsUrl: string;
  /** Where `node --cpu-prof` writes the process's profile at exit, when asked for. */
  readonly profileDir: string | null;
}

export interface BenchWorld {
  readonly world: DrillWorld;
  readonly runId: string;
  readonly dbName: string;
  readonly logDir: string;
  /** Starts `npm run api` as a child process on a free port and waits for /healthz. */
  startApi(name: string, env?: Record<string, string>, opts?: { cpuProfile?: boolean }): Promise<ApiProcess>;
  /** A worker process (workers/main.ts); env over the world's config. */
  startWorker(
    name: string,
    env?: Record<string, string>,
    opts?: { cpuProfile?: boolean; memory?: boolean },
  ): Promise<{ proc: ManagedProcess; profileDir: string | null; metricsUrl: string; memoryFile: string | null }>;
  createTenants(n: number, credits?: string): Promise<BenchTenant[]>;
  /**
   * The world database's counts now (bench/lib/pg-counts.ts), less the statements this process
   * sent through the world's pool: every client's work, the API and worker processes' included.
   */
  pgCounts(): Promise<PgCounts>;
  /** Postgres backend pids connected to this world's database (for CPU accounting). */
  backendPids(): Promise<number[]>;
  /** Pid of the Temporal dev server (a child of this process), if any. */
  temporalPids(): number[];
  close(): Promise<void>;
}

export async function startBenchWorld(name: string, overrides: Record<string, string>, log: (line: string) => void): Promise<BenchWorld> {
  const world = await startDrillWorld(`bench_${name}`, { LOG_LEVEL: 'warn', ...overrides }, log);
  const dbName = decodeURIComponent(new URL(world.config.DATABASE_URL).pathname.slice(1));
  const runId = dbName.slice(-6);
  const logDir = path.join(BENCH_DATA_DIR, `${name}-${runId}`);
  fs.mkdirSync(logDir, { recursive: true });
  const procs: ManagedProcess[] = [];
  let tenantSeq = 0;
  const probeEnv = (profileDir?: string, memoryFile?: string) => ({
    NODE_OPTIONS: [
      process.env['NODE_OPTIONS'] ?? '',
      ...(memoryFile ? [`--import=${MEMORY_PRELOAD}`] : []),
      ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []),
    ]
      .join(' ')
      .trim(),
    ...(memoryFile ? { BENCH_MEMORY_FILE: memoryFile } : {}),
  });
  // What this process sends through the world's pool (its polls, its reads of the statistics,
  // the in-process API's lone statements), taken out of the database's counts.
  const pool = world.db.pool;
  const own = { total: 0, statements: new Map<string, number>() };
  const send = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  (pool as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    const q = args[0];
    const text = typeof q === 'string' ? q : ((q as { text?: string } | null)?.text ?? '');
    const key = statementKey(text);
    own.total += 1;
    own.statements.set(key, (own.statements.get(key) ?? 0) + 1);
    return send(...args);
  };
  const withStatements = await enableStatementCounts(pool);
  log(
    withStatements
      ? 'Postgres counts: commits (pg_stat_database) and statements (pg_stat_statements)'
      : 'Postgres counts: commits only (pg_stat_database); statements need pg_stat_statements in shared_preload_libraries',
  );
  const baseEnv = () => ({ ...configToEnv(world.config), LOG_LEVEL: 'warn', LOG_PRETTY: 'false' });

  return {
    world,
    runId,
    dbName,
    logDir,
    async startApi(apiName, env = {}, opts = {}) {
      const port = await freePort();
      const opsPort = await freePort();
      const profileDir = opts.cpuProfile ? path.join(logDir, `${apiName}.cpuprofile`) : null;
      const proc = startNodeProcess(
        apiName,
        'api/server.ts',
        {
          ...baseEnv(),
          PORT: String(port),
          OPS_PORT: String(opsPort),
          PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
          // The benchmarks measure capacity, not the per-tenant limits: lift them, and keep
          // them process-local (no Redis round trip). Override through `env` to measure them.
          TENANT_CREATE_RATE_PER_SECOND: '1000000',
          TENANT_READ_RATE_PER_SECOND: '1000000',
          TENANT_CANCEL_RATE_PER_SECOND: '1000000',
          REDIS_URL: '',
          ...probeEnv(profileDir ?? undefined),
          ...env,
        },
        { log: fileLogger(path.join(logDir, `${apiName}.log`)) },
      );
      procs.push(proc);
      const url = `http://127.0.0.1:${port}`;
      await waitForHttp(`${url}/healthz`, { process: proc, timeoutMs: 60_000, what: `${apiName} /healthz` });
      return { url, proc, opsUrl: `http://127.0.0.1:${opsPort}`, profileDir };
    },
    async startWorker(workerName, env = {}, opts = {}) {
      const profileDir = opts.cpuProfile ? path.join(logDir, `${workerName}.cpuprofile`) : null;
      const memoryFile = opts.memory ? path.join(logDir, `${workerName}.memory.json`) : null;
      const proc = await world.startWorker(workerName, { ...probeEnv(profileDir ?? undefined, memoryFile ?? undefined), ...env });
      return { proc, profileDir, metricsUrl: world.workerMetrics.get(workerName)!, memoryFile };
    },
    async createTenants(n, credits = '1000000000') {
      const out: BenchTenant[] = [];
      for (let i = 0; i < n; i++) {
        const t = await createTenant(world.db.db, {
          name: `bench-${runId}-${tenantSeq++}`,
          credits,
          ifMissing: false,
          actor: 'bench',
          fence: { scope: world.config.FENCE_SCOPE, region: world.config.REGION },
        });
        out.push({ tenantId: t.tenant_id, apiKey: t.api_key! });
      }
      return out;
    },
    pgCounts: () => readPgCounts(pool, dbName, withStatements, own),
    async backendPids() {
      const { rows } = await world.db.pool.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = $1', [dbName]);
      return rows.map((r) => r.pid);
    },
    temporalPids() {
      return childProcesses()
        .filter((c) => c.comm === 'temporal')
        .map((c) => c.pid);
    },
    async close() {
      for (const p of procs) await p.stop('SIGTERM', 5_000);
      await world.close();
    },
  };
}
