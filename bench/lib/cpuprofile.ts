// Summarises V8 CPU profiles (node --cpu-prof) written by a benchmark's API or worker process:
// self and total time by package or repository file, and the hottest functions. Evidence for
// "what limits it" without opening a profiler UI.
//
// A profile's sample times are CLOCK_MONOTONIC microseconds, the clock of process.hrtime() in
// every process on the machine, so a benchmark can keep only the samples of its measured window
// (`window`, from `hrtimeUs()` read around it): start-up, calibration and shutdown are then left
// out and counted apart.
//
// Also a command: `npx tsx bench/lib/cpuprofile.ts <profile dir or file> [--from <µs> --to <µs>] [--top <n>]`.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO_ROOT } from '../../harness';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

/** A measured window in CLOCK_MONOTONIC microseconds (`hrtimeUs()`). */
export interface ProfileWindow {
  readonly fromUs: number;
  readonly toUs: number;
}

/** Now on the clock of the profiles' sample times. */
export const hrtimeUs = (): number => Number(process.hrtime.bigint() / 1000n);

interface Row {
  readonly name: string;
  readonly area: string;
  /** Time in samples of this frame itself. */
  readonly selfMs: number;
  /** Time in samples with this frame (or area) anywhere on the stack. */
  readonly totalMs: number;
  readonly selfShare: number;
  readonly totalShare: number;
}

export interface ProfileSummary {
  /** Busy (non-idle) time sampled inside the window, all threads of all processes. */
  readonly totalMs: number;
  /** Busy time sampled outside the window (start-up, calibration, shutdown); 0 without a window. */
  readonly outsideMs: number;
  readonly window: ProfileWindow | null;
  /** Busy time per profile file (a process's main thread, its worker threads, a child process). */
  readonly byThread: { thread: string; ms: number; share: number }[];
  readonly byArea: Row[];
  /** The functions with the most self time. */
  readonly byFunction: Row[];
  /** The functions with the most total time: which calls the self time sits under. */
  readonly byTotal: Row[];
}

function areaOf(url: string, fn: string): string {
  if (!url) return fn.startsWith('(') ? fn : '(native)';
  if (url.startsWith('node:')) return 'node internals';
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 'node_modules/'.length).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  const file = url.startsWith('file://') ? url.slice('file://'.length) : url;
  return path.relative(REPO_ROOT, file).split('/').slice(0, 2).join('/') || file;
}

const NOT_BUSY = new Set(['(idle)']);

function profileFiles(target: string): string[] {
  if (!fs.existsSync(target)) return [];
  if (fs.statSync(target).isFile()) return [target];
  return fs
    .readdirSync(target)
    .filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => path.join(target, f));
}

/**
 * Self and total time of every area and function in the profiles under `target` (a directory or
 * one file); with `window`, only the samples inside it (the rest is `outsideMs`).
 */
export function summarizeProfiles(target: string, opts: { top?: number; window?: ProfileWindow } = {}): ProfileSummary | null {
  const files = profileFiles(target);
  if (files.length === 0) return null;
  const top = opts.top ?? 15;
  const window = opts.window ?? null;
  const areaSelf = new Map<string, number>();
  const areaTotal = new Map<string, number>();
  const fnSelf = new Map<string, number>();
  const fnArea = new Map<string, string>();
  const fnTotal = new Map<string, number>();
  const threads = new Map<string, number>();
  let totalMs = 0;
  let outsideMs = 0;
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);

  for (const file of files) {
    const p = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
    const byId = new Map(p.nodes.map((n) => [n.id, n]));
    const parent = new Map<number, number>();
    for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
    const keyOf = (n: ProfileNode) =>
      `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url ? `${path.basename(n.callFrame.url)}:${n.callFrame.lineNumber + 1}` : ''}`.trim();
    // Each node's stack, as the distinct function keys and areas on it (memoised per node).
    const stacks = new Map<number, { fns: Set<string>; areas: Set<string> }>();
    const stackOf = (id: number): { fns: Set<string>; areas: Set<string> } => {
      const known = stacks.get(id);
      if (known) return known;
      const n = byId.get(id)!;
      const up = parent.has(id) ? stackOf(parent.get(id)!) : { fns: new Set<string>(), areas: new Set<string>() };
      const s = { fns: new Set(up.fns), areas: new Set(up.areas) };
      if (parent.has(id)) {
        // The root node is V8's "(root)", not a frame.
        const key = keyOf(n);
        const area = areaOf(n.callFrame.url, n.callFrame.functionName || '(anonymous)');
        fnArea.set(key, area);
        s.fns.add(key);
        s.areas.add(area);
      }
      stacks.set(id, s);
      return s;
    };
    const samples = p.samples ?? [];
    const deltas = p.timeDeltas ?? [];
    // Every sample weighs the same (the profile's mean interval): the gap before a sample also
    // holds the time the thread was not scheduled, which on a loaded machine is not its CPU.
    const ms = samples.length > 0 ? (p.endTime - p.startTime) / 1000 / samples.length : 0;
    let t = p.startTime;
    for (let i = 0; i < samples.length; i++) {
      t += deltas[i] ?? 0;
      const n = byId.get(samples[i]!)!;
      const fn = n.callFrame.functionName || '(anonymous)';
      const area = areaOf(n.callFrame.url, fn);
      if (NOT_BUSY.has(area)) continue;
      if (window && (t < window.fromUs || t > window.toUs)) {
        outsideMs += ms;
        continue;
      }
      totalMs += ms;
      add(threads, path.basename(file), ms);
      add(areaSelf, area, ms);
      const s = stackOf(n.id);
      add(fnSelf, keyOf(n), ms);
      for (const a of s.areas) add(areaTotal, a, ms);
      for (const f of s.fns) add(fnTotal, f, ms);
    }
  }
  const share = (ms: number) => (totalMs > 0 ? ms / totalMs : 0);
  const row = (name: string, area: string, selfMs: number, totalOf: number): Row => ({
    name,
    area,
    selfMs,
    totalMs: totalOf,
    selfShare: share(selfMs),
    totalShare: share(totalOf),
  });
  return {
    totalMs,
    outsideMs,
    window,
    byThread: [...threads.entries()].sort((a, b) => b[1] - a[1]).map(([thread, ms]) => ({ thread, ms, share: share(ms) })),
    byArea: [...areaTotal.keys()]
      .map((a) => row(a, a, areaSelf.get(a) ?? 0, areaTotal.get(a)!))
      .sort((a, b) => b.selfMs - a.selfMs)
      .slice(0, top),
    byFunction: [...fnSelf.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([fn, ms]) => row(fn, fnArea.get(fn)!, ms, fnTotal.get(fn)!)),
    byTotal: [...fnTotal.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([fn, ms]) => row(fn, fnArea.get(fn)!, fnSelf.get(fn) ?? 0, ms)),
  };
}

const seconds = (ms: number) => Number((ms / 1000).toFixed(2));
const percent = (share: number) => Number((share * 100).toFixed(1));

/** Prints the profile summary tables (nothing when no profile was written). */
export function printProfile(
  rep: { table(title: string, header: string[], rows: (string | number)[][]): void },
  what: string,
  summary: ProfileSummary | null,
): void {
  if (!summary) return;
  const scope = summary.window
    ? `the measured window only: ${seconds(summary.outsideMs)} s sampled outside it (start-up, calibration, shutdown) left out`
    : 'start-up included';
  rep.table(
    `${what}: CPU profile by area (${seconds(summary.totalMs)} s of busy samples, every thread; ${scope}; total = the area anywhere on the stack)`,
    ['area', 'self s', 'self %', 'total s', 'total %'],
    summary.byArea.map((a) => [a.name, seconds(a.selfMs), percent(a.selfShare), seconds(a.totalMs), percent(a.totalShare)]),
  );
  rep.table(
    `${what}: hottest functions (self time)`,
    ['function', 'area', 'self s', 'self %', 'total %'],
    summary.byFunction.map((f) => [f.name.slice(0, 70), f.area, seconds(f.selfMs), percent(f.selfShare), percent(f.totalShare)]),
  );
  rep.table(
    `${what}: functions by total time (what the self time sits under)`,
    ['function', 'area', 'total s', 'total %', 'self %'],
    summary.byTotal.map((f) => [f.name.slice(0, 70), f.area, seconds(f.totalMs), percent(f.totalShare), percent(f.selfShare)]),
  );
  rep.table(
    `${what}: busy samples by thread (profile file)`,
    ['thread', 's', '%'],
    summary.byThread.map((t) => [t.thread, seconds(t.ms), percent(t.share)]),
  );
}

// `npx tsx bench/lib/cpuprofile.ts <dir or file> [--from <µs> --to <µs>] [--top <n>]`
if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  const args = process.argv.slice(2);
  const flag = (name: string): number | undefined => {
    const i = args.indexOf(name);
    return i >= 0 ? Number(args[i + 1]) : undefined;
  };
  const target = args.find((a, i) => !a.startsWith('--') && !args[i - 1]?.startsWith('--'));
  if (!target) {
    process.stderr.write('usage: npx tsx bench/lib/cpuprofile.ts <profile dir or file> [--from <µs> --to <µs>] [--top <n>]\n');
    process.exit(2);
  }
  const from = flag('--from');
  const to = flag('--to');
  const summary = summarizeProfiles(target, {
    top: flag('--top') ?? 25,
    ...(from !== undefined || to !== undefined ? { window: { fromUs: from ?? 0, toUs: to ?? Number.MAX_SAFE_INTEGER } } : {}),
  });
  if (!summary) {
    process.stderr.write(`no .cpuprofile under ${target}\n`);
    process.exit(1);
  }
  const { createReporter } = await import('./report');
  printProfile(createReporter(false), path.basename(target), summary);
}
