// Summarises V8 CPU profiles (node --cpu-prof) written by a benchmark's API or worker process:
// self time by package or repository file, and the hottest functions. Evidence for "what
// limits it" without opening a profiler UI.
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../../harness';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

/**
 * A span of a profile, on the clock V8 stamps its samples with (CLOCK_MONOTONIC, µs; Node's
 * process.hrtime on Linux): a benchmark takes `monotonicUs()` at a window's start and end and
 * summarises only the samples the profiled process took in between.
 */
export interface ProfileWindow {
  readonly fromUs: number;
  readonly toUs: number;
}
export const monotonicUs = (): number => Number(process.hrtime.bigint() / 1000n);

/** Self time (ms) per profile node: every sample, or those inside `window` (each weighed by its own interval). */
function selfMsByNode(p: Profile, window: ProfileWindow | undefined): Map<number, number> {
  const out = new Map<number, number>();
  if (!window || !p.samples || !p.timeDeltas) {
    const samples = p.samples?.length ?? p.nodes.reduce((n, x) => n + (x.hitCount ?? 0), 0);
    const msPerSample = samples > 0 ? (p.endTime - p.startTime) / 1000 / samples : 0;
    for (const n of p.nodes) if (n.hitCount) out.set(n.id, n.hitCount * msPerSample);
    return out;
  }
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    const delta = p.timeDeltas[i] ?? 0;
    t += delta;
    if (t < window.fromUs || t > window.toUs) continue;
    const id = p.samples[i]!;
    out.set(id, (out.get(id) ?? 0) + delta / 1000);
  }
  return out;
}

export interface ProfileSummary {
  readonly totalMs: number;
  readonly byArea: { area: string; ms: number; share: number }[];
  readonly byFunction: { fn: string; area: string; ms: number; share: number }[];
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

export function summarizeProfiles(dir: string, top = 15, window?: ProfileWindow): ProfileSummary | null {
  if (!fs.existsSync(dir)) return null;
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.cpuprofile'));
  if (files.length === 0) return null;
  const areas = new Map<string, number>();
  const fns = new Map<string, { area: string; ms: number }>();
  let totalMs = 0;
  for (const f of files) {
    const p = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as Profile;
    const self = selfMsByNode(p, window);
    for (const n of p.nodes) {
      const ms = self.get(n.id) ?? 0;
      if (!ms) continue;
      const fn = n.callFrame.functionName || '(anonymous)';
      const area = areaOf(n.callFrame.url, fn);
      if (area === '(idle)') continue;
      totalMs += ms;
      areas.set(area, (areas.get(area) ?? 0) + ms);
      const key = `${fn} ${n.callFrame.url ? `${path.basename(n.callFrame.url)}:${n.callFrame.lineNumber + 1}` : ''}`.trim();
      const e = fns.get(key) ?? { area, ms: 0 };
      e.ms += ms;
      fns.set(key, e);
    }
  }
  const share = (ms: number) => (totalMs > 0 ? ms / totalMs : 0);
  return {
    totalMs,
    byArea: [...areas.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([area, ms]) => ({ area, ms, share: share(ms) })),
    byFunction: [...fns.entries()]
      .sort((a, b) => b[1].ms - a[1].ms)
      .slice(0, top)
      .map(([fn, e]) => ({ fn, area: e.area, ms: e.ms, share: share(e.ms) })),
  };
}

/** Prints the profile summary tables (nothing when no profile was written). */
export function printProfile(
  rep: { table(title: string, header: string[], rows: (string | number)[][]): void },
  what: string,
  summary: ProfileSummary | null,
  span = 'start-up included',
): void {
  if (!summary) return;
  rep.table(
    `${what}: CPU profile, self time by area (${(summary.totalMs / 1000).toFixed(1)} s of CPU sampled, ${span})`,
    ['area', 'self s', 'share %'],
    summary.byArea.map((a) => [a.area, Number((a.ms / 1000).toFixed(2)), Number((a.share * 100).toFixed(1))]),
  );
  rep.table(
    `${what}: hottest functions (self time)`,
    ['function', 'area', 'self s', 'share %'],
    summary.byFunction.map((f) => [f.fn.slice(0, 70), f.area, Number((f.ms / 1000).toFixed(2)), Number((f.share * 100).toFixed(1))]),
  );
}
