// A throwaway PostgreSQL cluster for drills that stop the database: never the machine's shared
// server. initdb into a folder of the drill (or a base backup of another private cluster: a
// streaming standby, or a point-in-time restore from a WAL archive), start on a free port (TCP
// on 127.0.0.1, socket in the folder), stop, crash, promote and start it at will. Run as root,
// the server runs as the `postgres` OS user (it refuses root).
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort, sleep } from '../../harness';

const run = promisify(execFile);

function binDir(): string {
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, 'bin', 'initdb'))) : [];
  const newest = versions.sort((a, b) => Number(b) - Number(a))[0];
  if (!newest) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql/<version>/bin (apt-get install postgresql)');
  return path.join(root, newest, 'bin');
}

const asRoot = () => process.getuid?.() === 0;
const exec = (tool: string, args: string[]) => {
  const bin = path.join(binDir(), tool);
  return asRoot() ? run('runuser', ['-u', 'postgres', '--', bin, ...args]) : run(bin, args);
};
/** A folder the server's OS user owns (its data, a WAL archive). */
export async function ownedDir(dir: string): Promise<void> {
  fs.mkdirSync(dir, { recursive: true });
  if (asRoot()) await run('chown', ['-R', 'postgres', dir]);
}

export interface PrivatePostgres {
  /** postgres://postgres@127.0.0.1:<port>/postgres */
  readonly url: string;
  readonly port: number;
  readonly dir: string;
  stop(): Promise<void>;
  /** Stops as a crash would (pg_ctl stop -m immediate: no shutdown checkpoint, recovery at the next start). */
  crash(): Promise<void>;
  start(): Promise<void>;
  /** pg_ctl promote -w: a standby (or a restore paused at its target) becomes read-write. */
  promote(): Promise<void>;
  /** A plain-format base backup of this cluster (pg_basebackup, WAL streamed alongside) into `dir`. */
  baseBackup(dir: string, opts?: { standbyConfig?: boolean }): Promise<void>;
  /** Stops the server (if running) and deletes its folder. */
  destroy(): Promise<void>;
}

export interface PrivatePostgresOptions {
  /** Extra server settings (-c name=value), e.g. synchronous_standby_names, archive_mode. */
  readonly settings?: Record<string, string>;
}

/** A fresh cluster (initdb). */
export async function startPrivatePostgres(dir: string, opts: PrivatePostgresOptions = {}): Promise<PrivatePostgres> {
  await ownedDir(dir);
  await exec('initdb', ['-D', path.join(dir, 'data'), '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--no-sync']);
  return startCluster(dir, opts);
}

/**
 * A streaming standby of `primary` (pg_basebackup -R: standby.signal and primary_conninfo).
 * `name` is its cluster_name, which its WAL receiver reports as application_name: the name the
 * primary's synchronous_standby_names lists.
 */
export async function startStandby(dir: string, primary: PrivatePostgres, name: string, opts: PrivatePostgresOptions = {}): Promise<PrivatePostgres> {
  await ownedDir(dir);
  await primary.baseBackup(path.join(dir, 'data'), { standbyConfig: true });
  return startCluster(dir, { settings: { cluster_name: name, hot_standby: 'on', ...opts.settings } });
}

/**
 * A point-in-time restore into an isolated cluster: the base backup copied, recovery.signal, WAL
 * read from `archiveDir` up to the target and then promoted. Its own archiving is off,
 * so the restored timeline never writes into the live cluster's archive. Resolves once it is
 * read-write.
 */
export async function restorePointInTime(
  dir: string,
  opts: {
    baseBackupDir: string;
    archiveDir: string;
    /** A commit time (inclusive), or a transaction id to stop just before (the mistake's own). */
    target: { readonly time: string } | { readonly beforeXid: string };
  },
): Promise<PrivatePostgres> {
  await ownedDir(dir);
  const data = path.join(dir, 'data');
  fs.cpSync(opts.baseBackupDir, data, { recursive: true });
  fs.writeFileSync(path.join(data, 'recovery.signal'), '');
  if (asRoot()) await run('chown', ['-R', 'postgres', dir]);
  await run('chmod', ['700', data]);
  const restored = await startCluster(dir, {
    settings: {
      restore_command: `cp ${opts.archiveDir}/%f %p`,
      ...('time' in opts.target
        ? { recovery_target_time: opts.target.time, recovery_target_inclusive: 'true' }
        : { recovery_target_xid: opts.target.beforeXid, recovery_target_inclusive: 'false' }),
      recovery_target_action: 'promote',
      archive_mode: 'off',
    },
  });
  await waitUntilPrimary(restored.url, 120_000);
  return restored;
}

/** Resolves once the server at `url` accepts connections and is out of recovery. */
export async function waitUntilPrimary(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
    try {
      await client.connect();
      const { rows } = await client.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r');
      if (rows[0]?.r === false) return;
    } catch {
      // starting up
    } finally {
      await client.end().catch(() => undefined);
    }
    if (Date.now() > deadline) throw new Error(`${url} did not become read-write in ${timeoutMs} ms`);
    await sleep(200);
  }
}

async function startCluster(dir: string, opts: PrivatePostgresOptions): Promise<PrivatePostgres> {
  const data = path.join(dir, 'data');
  const port = await freePort();
  const extra = Object.entries(opts.settings ?? {}).map(([k, v]) => {
    // pg_ctl hands the options to a shell: a value is single-quoted there.
    if (v.includes("'")) throw new Error(`setting ${k}: a value may not contain a single quote`);
    return `-c ${k}='${v}'`;
  });
  const options = [`-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off`, ...extra].join(' ');
  let running = false;
  const pgc: PrivatePostgres = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dir,
    async start() {
      if (running) return;
      await exec('pg_ctl', ['-D', data, '-o', options, '-l', path.join(dir, 'server.log'), '-w', '-t', '120', 'start']);
      running = true;
    },
    async stop() {
      if (!running) return;
      // fast: roll back open transactions and drop every connection, as a crash would.
      await exec('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
      running = false;
    },
    async crash() {
      if (!running) return;
      await exec('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']);
      running = false;
    },
    async promote() {
      await exec('pg_ctl', ['-D', data, '-w', '-t', '60', 'promote']);
    },
    async baseBackup(target, o = {}) {
      await ownedDir(path.dirname(target));
      await exec('pg_basebackup', [
        '-h',
        '127.0.0.1',
        '-p',
        String(port),
        '-U',
        'postgres',
        '-D',
        target,
        '-X',
        'stream',
        '-c',
        'fast',
        '--no-sync',
        ...(o.standbyConfig ? ['-R'] : []),
      ]);
    },
    async destroy() {
      await pgc
        .stop()
        .catch(() => pgc.crash())
        .catch(() => undefined);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  await pgc.start();
  return pgc;
}
