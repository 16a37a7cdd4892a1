// Child processes of the local stack: the project's Node entry points and the tools' servers.
//
// Every process is spawned detached (its own process group) so that a Ctrl-C in the terminal
// reaches only the orchestrating script, which then stops the children in order. As a safety
// net, any child still running when this process exits is SIGKILLed (process group included).
// A SIGKILL of the orchestrator itself cannot be caught: its children then survive.
import { spawn, execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { REPO_ROOT, nodeBinary } from './tools';

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
export function startNodeProcess(name: string, scriptPath: string, env: NodeJS.ProcessEnv, opts: NodeProcessOptions = {}): ManagedProcess {
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

/** Runs `command args` to completion and captures its output. Never rejects for a non-zero exit. */
export function runCommand(command: string, args: string[], env: NodeJS.ProcessEnv, opts: { timeoutMs?: number; cwd?: string } = {}): Promise<RunResult> {
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

/** `proc` plus read-only `extra` fields (proc stays the prototype, so its live getters keep working). */
export function extend<T extends object>(proc: ManagedProcess, extra: T): ManagedProcess & T {
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

/** The last `lines` lines `proc` printed, as a block for an error message. */
export function tail(proc: ManagedProcess, lines = 25): string {
  const out = proc.recentOutput().slice(-lines);
  return out.length ? `\n--- last ${out.length} lines of ${proc.name} ---\n${out.join('\n')}` : '';
}

/** Milliseconds as "1.2s". */
export function formatMs(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}
