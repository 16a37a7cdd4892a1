// CPU accounting from /proc (Linux): which process used how much of the machine during a
// measured phase. Answers "what saturates the 2 cores" without a profiler.
import fs from 'node:fs';
import os from 'node:os';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/** utime + stime of a process in ticks, or null when it is gone. */
export function processTicks(pid: number): number | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(rest[11]) + Number(rest[12]);
  } catch {
    return null;
  }
}

/**
 * cutime + cstime of a process in ticks: the CPU of its children it has waited for (a worker's
 * ffmpeg runs, once they exited), or null when it is gone.
 */
export function reapedChildTicks(pid: number): number | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(rest[13]) + Number(rest[14]);
  } catch {
    return null;
  }
}

/** Resident set size of a process in bytes, or null. */
export function processRss(pid: number): number | null {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** Direct children of `ppid` (default: this process) with their command names. */
export function childProcesses(ppid = process.pid): { pid: number; comm: string }[] {
  const out: { pid: number; comm: string }[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const comm = stat.slice(stat.indexOf('(') + 1, close);
      const parent = Number(stat.slice(close + 2).split(' ')[1]);
      if (parent === ppid) out.push({ pid: Number(entry), comm });
    } catch {
      // raced with an exit
    }
  }
  return out;
}

function machineTicks(): { busy: number; total: number } {
  const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const total = v.reduce((a, b) => a + b, 0);
  const idle = (v[3] ?? 0) + (v[4] ?? 0);
  return { busy: total - idle, total };
}

export interface CpuUsage {
  /** Cores used on average, per group name (1.0 = one core fully busy). */
  readonly cores: Record<string, number>;
  /** Whole machine: cores busy on average (all users, including other people's work). */
  readonly machineBusyCores: number;
  readonly machineCores: number;
  readonly seconds: number;
}

/**
 * Starts measuring. `groups` is sampled every half second (pids come and go, e.g. database
 * backends of a pgbench run): a pid first seen after the start counts all its ticks, one that
 * exits counts the ticks it had at its last sample.
 */
export function startCpuProbe(
  groups: () => Promise<Record<string, number[]>> | Record<string, number[]>,
  /** Groups counted by their processes' reaped children (cutime + cstime), e.g. a worker's ffmpeg runs. */
  childGroups: Record<string, number[]> = {},
) {
  const seen = new Map<number, { group: string; first: number; last: number }>();
  const reaped = new Map<string, { group: string; first: number; last: number }>();
  const t0 = performance.now();
  const self0 = process.cpuUsage();
  const m0 = machineTicks();
  let initial = true;
  const sample = async () => {
    const g = await groups();
    for (const [name, pids] of Object.entries(g)) {
      for (const pid of pids) {
        const ticks = processTicks(pid);
        if (ticks === null) continue;
        const entry = seen.get(pid);
        if (entry) entry.last = ticks;
        else seen.set(pid, { group: name, first: initial ? ticks : 0, last: ticks });
      }
    }
    for (const [name, pids] of Object.entries(childGroups)) {
      for (const pid of pids) {
        const ticks = reapedChildTicks(pid);
        if (ticks === null) continue;
        const entry = reaped.get(`${name}:${pid}`);
        if (entry) entry.last = ticks;
        else reaped.set(`${name}:${pid}`, { group: name, first: ticks, last: ticks });
      }
    }
    initial = false;
  };
  let chain = sample();
  const timer = setInterval(() => {
    chain = chain.then(sample).catch(() => undefined);
  }, 500);
  return {
    async stop(): Promise<CpuUsage> {
      clearInterval(timer);
      await chain.then(sample).catch(() => undefined);
      const seconds = (performance.now() - t0) / 1000;
      const cores: Record<string, number> = {};
      for (const e of [...seen.values(), ...reaped.values()]) cores[e.group] = (cores[e.group] ?? 0) + (e.last - e.first) / TICKS_PER_SECOND / seconds;
      const self = process.cpuUsage(self0);
      cores['bench (load generator)'] = (self.user + self.system) / 1e6 / seconds;
      const m = machineTicks();
      const machineBusyCores = ((m.busy - m0.busy) / Math.max(1, m.total - m0.total)) * os.cpus().length;
      return { cores, machineBusyCores, machineCores: os.cpus().length, seconds };
    },
  };
}
