// Wraps a measured phase: CPU per process group and Postgres round trips (from the counting
// preload's files) over exactly that phase.
import { sleep } from '../../harness';
import { startCpuProbe, type CpuUsage } from './procstat';
import { queryDelta, readQueryCounts, type QueryCounts } from './world';

export interface Measured<T> {
  readonly result: T;
  readonly cpu: CpuUsage;
  readonly queries: QueryCounts;
}

export async function measured<T>(
  opts: {
    cpuGroups: () => Promise<Record<string, number[]>> | Record<string, number[]>;
    /** Groups counted by their processes' reaped children (procstat.startCpuProbe). */
    childCpuGroups?: Record<string, number[]>;
    countFiles?: string[];
  },
  fn: () => Promise<T>,
): Promise<Measured<T>> {
  const files = opts.countFiles ?? [];
  if (files.length) await sleep(1_100); // the preload flushes twice a second
  const before = files.map(readQueryCounts);
  const probe = startCpuProbe(opts.cpuGroups, opts.childCpuGroups);
  let result: T;
  let cpu: CpuUsage;
  try {
    result = await fn();
  } finally {
    cpu = await probe.stop();
  }
  if (files.length) await sleep(1_100);
  const queries = queryDelta(files.map(readQueryCounts), before);
  return { result, cpu, queries };
}

/** "api 0.93, postgres 0.71, …" — cores used per group, largest first. */
export function describeCpu(cpu: CpuUsage): string {
  const parts = Object.entries(cpu.cores)
    .filter(([, v]) => v >= 0.01)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${v.toFixed(2)}`);
  return `${parts.join(', ')} | machine ${cpu.machineBusyCores.toFixed(2)}/${cpu.machineCores} cores busy`;
}

/** The statements with the most round trips, per unit (e.g. per create). */
export function topStatements(q: QueryCounts, per: number, n = 12): { statement: string; perUnit: number; count: number }[] {
  return Object.entries(q.statements)
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([statement, count]) => ({ statement: statement.slice(0, 110), perUnit: per > 0 ? count / per : Number.NaN, count }));
}
