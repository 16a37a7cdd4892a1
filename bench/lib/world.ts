// A benchmark's world: the drill world of bench/drills/harness.ts (its own Temporal dev server,
// S3 server, fresh database, in-process simulator, worker processes), plus what benchmarks
// need on top: the API as its own process (so its CPU is its own and measurable), tenants
// with deep pockets, Postgres round-trip counters in the API and worker processes, and CPU
// groups for the probe.
import fs from 'node:fs';
import path from 'node:path';
import { configToEnv } from '../../config/env';
import { startDrillWorld, type DrillWorld } from '../drills/harness';
import { createTenant } from '../../ops/tenants';
import { REPO_ROOT, fileLogger, freePort, startNodeProcess, waitForHttp, type ManagedProcess } from '../../harness';
import { childProcesses } from './procstat';

export const BENCH_DATA_DIR = path.join(REPO_ROOT, '.data', 'bench');
const PRELOAD = path.join(REPO_ROOT, 'bench', 'lib', 'pg-count-preload.mjs');
/** Where a worker's memory is, by isolate and native (bench/lib/memory-preload.mjs). */
export const MEMORY_PRELOAD = path.join(REPO_ROOT, 'bench', 'lib', 'memory-preload.mjs');

export interface BenchTenant {
  readonly tenantId: string;
  readonly apiKey: string;
}

export interface ApiProcess {
  readonly url: string;
  readonly proc: ManagedProcess;
  readonly countFile: string;
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
  /** A worker process (workers/main.ts) with round-trip counting; env over the world's config. */
  startWorker(
    name: string,
    env?: Record<string, string>,
    opts?: { cpuProfile?: boolean; memory?: boolean },
  ): Promise<{ proc: ManagedProcess; countFile: string; profileDir: string | null; metricsUrl: string; memoryFile: string | null }>;
  createTenants(n: number, credits?: string): Promise<BenchTenant[]>;
  /** Postgres backend pids connected to this world's database (for CPU accounting). */
  backendPids(): Promise<number[]>;
  /** Pid of the Temporal dev server (a child of this process), if any. */
  temporalPids(): number[];
  close(): Promise<void>;
}

export interface QueryCounts {
  readonly total: number;
  readonly statements: Record<string, number>;
}

export function readQueryCounts(file: string): QueryCounts {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as QueryCounts;
  } catch {
    return { total: 0, statements: {} };
  }
}

/** Sum of several processes' counts minus an earlier snapshot. */
export function queryDelta(after: QueryCounts[], before: QueryCounts[]): QueryCounts {
  const statements: Record<string, number> = {};
  let total = 0;
  for (const c of after) {
    total += c.total;
    for (const [k, v] of Object.entries(c.statements)) statements[k] = (statements[k] ?? 0) + v;
  }
  for (const c of before) {
    total -= c.total;
    for (const [k, v] of Object.entries(c.statements)) statements[k] = (statements[k] ?? 0) - v;
  }
  for (const k of Object.keys(statements)) if (statements[k] === 0) delete statements[k];
  return { total, statements };
}

export async function startBenchWorld(name: string, overrides: Record<string, string>, log: (line: string) => void): Promise<BenchWorld> {
  const world = await startDrillWorld(`bench_${name}`, { LOG_LEVEL: 'warn', ...overrides }, log);
  const dbName = decodeURIComponent(new URL(world.config.DATABASE_URL).pathname.slice(1));
  const runId = dbName.slice(-6);
  const logDir = path.join(BENCH_DATA_DIR, `${name}-${runId}`);
  fs.mkdirSync(logDir, { recursive: true });
  const procs: ManagedProcess[] = [];
  let tenantSeq = 0;
  const countEnv = (file: string, profileDir?: string, memoryFile?: string) => ({
    NODE_OPTIONS: [
      process.env['NODE_OPTIONS'] ?? '',
      `--import=${PRELOAD}`,
      ...(memoryFile ? [`--import=${MEMORY_PRELOAD}`] : []),
      ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []),
    ]
      .join(' ')
      .trim(),
    BENCH_PG_COUNT_FILE: file,
    ...(memoryFile ? { BENCH_MEMORY_FILE: memoryFile } : {}),
  });
  const baseEnv = () => ({ ...configToEnv(world.config), LOG_LEVEL: 'warn', LOG_PRETTY: 'false' });

  return {
    world,
    runId,
    dbName,
    logDir,
    async startApi(apiName, env = {}, opts = {}) {
      const port = await freePort();
      const opsPort = await freePort();
      const countFile = path.join(logDir, `${apiName}.queries.json`);
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
          ...countEnv(countFile, profileDir ?? undefined),
          ...env,
        },
        { log: fileLogger(path.join(logDir, `${apiName}.log`)) },
      );
      procs.push(proc);
      const url = `http://127.0.0.1:${port}`;
      await waitForHttp(`${url}/healthz`, { process: proc, timeoutMs: 60_000, what: `${apiName} /healthz` });
      return { url, proc, countFile, opsUrl: `http://127.0.0.1:${opsPort}`, profileDir };
    },
    async startWorker(workerName, env = {}, opts = {}) {
      const countFile = path.join(logDir, `${workerName}.queries.json`);
      const profileDir = opts.cpuProfile ? path.join(logDir, `${workerName}.cpuprofile`) : null;
      const memoryFile = opts.memory ? path.join(logDir, `${workerName}.memory.json`) : null;
      const proc = await world.startWorker(workerName, { ...countEnv(countFile, profileDir ?? undefined, memoryFile ?? undefined), ...env });
      return { proc, countFile, profileDir, metricsUrl: world.workerMetrics.get(workerName)!, memoryFile };
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
