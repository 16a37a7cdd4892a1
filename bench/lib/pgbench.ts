// Runs pgbench (from the machine's Postgres packages) with a custom script as the baseline of a
// benchmark: same database, same client count, same duration, warm-up first. Latency
// percentiles come from pgbench's per-transaction log (-l), so they are computed exactly like
// the load generator's.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { REPO_ROOT } from '../../harness';
import { summarize, sortNumbers, type LatencySummary } from './stats';

export interface PgbenchOptions {
  readonly label: string;
  readonly databaseUrl: string;
  /** Script path, relative to the repository root. */
  readonly script: string;
  readonly clients: number;
  readonly warmupS: number;
  readonly durationS: number;
  /** -D variables. */
  readonly vars: Record<string, string>;
  readonly progress?: (line: string) => void;
}

export interface PgbenchResult {
  readonly label: string;
  readonly clients: number;
  /** Clients asked for, when the connection budget made us run fewer. */
  readonly requestedClients: number;
  readonly rate: number;
  readonly latency: LatencySummary;
  readonly transactions: number;
  readonly failed: number;
  readonly seconds: number;
}

/** The pgbench binary: on PATH, else the newest /usr/lib/postgresql/<v>/bin/pgbench. */
export function pgbenchPath(): string {
  for (const dir of (process.env['PATH'] ?? '').split(':')) {
    const p = path.join(dir, 'pgbench');
    if (dir && fs.existsSync(p)) return p;
  }
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root) ? fs.readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) {
    const p = path.join(root, v, 'bin', 'pgbench');
    if (fs.existsSync(p)) return p;
  }
  throw new Error('pgbench not found (install postgresql-client or the server package)');
}

/**
 * How many more connections this server can give us now, keeping `margin` for everyone else
 * (the machine's Postgres is shared with other people's tests).
 */
export async function connectionBudget(databaseUrl: string, margin = 20): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ free: number }>(`
      SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
             - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int AS free`);
    return Math.max(1, (rows[0]?.free ?? 1) - margin);
  } finally {
    await client.end();
  }
}

function connArgs(databaseUrl: string): { args: string[]; env: NodeJS.ProcessEnv; db: string } {
  const u = new URL(databaseUrl);
  const args = ['-h', u.hostname, '-p', u.port || '5432', '-U', decodeURIComponent(u.username || 'postgres')];
  const env: NodeJS.ProcessEnv = { ...process.env };
  if (u.password) env['PGPASSWORD'] = decodeURIComponent(u.password);
  return { args, env, db: decodeURIComponent(u.pathname.slice(1)) };
}

function run(args: string[], env: NodeJS.ProcessEnv, timeoutMs: number, onStderrLine: (l: string) => void) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(pgbenchPath(), args, { env, cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let partial = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => {
      const text = partial + c.toString();
      const lines = text.split('\n');
      partial = lines.pop() ?? '';
      for (const l of lines) {
        stderr += `${l}\n`;
        onStderrLine(l);
      }
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr: stderr + partial });
    });
  });
}

export async function runPgbench(opts: PgbenchOptions): Promise<PgbenchResult> {
  const budget = await connectionBudget(opts.databaseUrl);
  const clients = Math.min(opts.clients, budget);
  if (clients < opts.clients)
    opts.progress?.(`[${opts.label}] only ${clients} connections free on this server: running ${clients} clients, not ${opts.clients}`);
  const threads = Math.max(1, Math.min(os.cpus().length, clients));
  const { args: conn, env, db } = connArgs(opts.databaseUrl);
  const vars = Object.entries(opts.vars).flatMap(([k, v]) => ['-D', `${k}=${v}`]);
  const base = [...conn, '-n', '-M', 'extended', '-c', String(clients), '-j', String(threads), '-f', opts.script, ...vars];

  if (opts.warmupS > 0) {
    const w = await run([...base, '-T', String(opts.warmupS), db], env, (opts.warmupS + 60) * 1000, () => undefined);
    if (w.code !== 0) throw new Error(`pgbench warm-up failed (${w.code}): ${w.stderr.trim().split('\n').slice(-5).join(' | ')}`);
  }
  const logDir = fs.mkdtempSync(path.join(os.tmpdir(), 'vidorch-pgbench-'));
  try {
    const r = await run(
      [...base, '-T', String(opts.durationS), '-P', '1', '-l', '--log-prefix', path.join(logDir, 'tx'), db],
      env,
      (opts.durationS + 60) * 1000,
      (line) => {
        const m = /^progress: ([\d.]+) s, ([\d.]+) tps, lat ([\d.]+) ms stddev [\d.NaN]+(?:, (\d+) failed)?/.exec(line);
        if (m) {
          opts.progress?.(
            `[${opts.label}] ${Number(m[1]).toFixed(0).padStart(3)}s measure ${Number(m[2]).toFixed(0).padStart(6)}/s  mean ${Number(m[3]).toFixed(1).padStart(6)}ms  failed ${m[4] ?? 0}`,
          );
        }
      },
    );
    if (r.code !== 0) throw new Error(`pgbench failed (${r.code}): ${r.stderr.trim().split('\n').slice(-5).join(' | ')}`);
    const latencies: number[] = [];
    let failed = 0;
    let first = Infinity;
    let last = 0;
    for (const f of fs.readdirSync(logDir)) {
      for (const line of fs.readFileSync(path.join(logDir, f), 'utf8').split('\n')) {
        if (!line) continue;
        // client_id transaction_no time script_no time_epoch time_us — time is "failed"/"skipped" for those.
        const parts = line.split(' ');
        const at = Number(parts[4]) + Number(parts[5]) / 1e6;
        first = Math.min(first, at);
        last = Math.max(last, at);
        if (!/^\d+$/.test(parts[2] ?? '')) {
          failed++;
          continue;
        }
        latencies.push(Number(parts[2]) / 1000);
      }
    }
    const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(r.stdout);
    const seconds = opts.durationS;
    return {
      label: opts.label,
      clients,
      requestedClients: opts.clients,
      rate: tps ? Number(tps[1]) : latencies.length / seconds,
      latency: summarize(sortNumbers(latencies)),
      transactions: latencies.length,
      failed,
      seconds,
    };
  } finally {
    fs.rmSync(logDir, { recursive: true, force: true });
  }
}
