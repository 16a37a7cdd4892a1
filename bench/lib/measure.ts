// Wraps a measured phase: CPU per process group and, when asked, the database's counts
// (bench/lib/pg-counts.ts) over exactly that phase.
import { sleep } from '../../harness';
import { pgDelta, type PgCounts } from './pg-counts';
import { startCpuProbe, type CpuUsage } from './procstat';

export interface Measured<T> {
  readonly result: T;
  readonly cpu: CpuUsage;
  /** The database's counts over the phase; null when not asked for. */
  readonly queries: PgCounts | null;
}

export async function measured<T>(
  opts: {
    cpuGroups: () => Promise<Record<string, number[]>> | Record<string, number[]>;
    /** Groups counted by their processes' reaped children (procstat.startCpuProbe). */
    childCpuGroups?: Record<string, number[]>;
    /** Reads the database's counts (BenchWorld.pgCounts). */
    pgCounts?: () => Promise<PgCounts>;
  },
  fn: () => Promise<T>,
): Promise<Measured<T>> {
  const read = opts.pgCounts;
  // Postgres publishes a backend's counts at most once a second.
  if (read) await sleep(1_100);
  const before = read ? await read() : null;
  const probe = startCpuProbe(opts.cpuGroups, opts.childCpuGroups);
  let result: T;
  let cpu: CpuUsage;
  try {
    result = await fn();
  } finally {
    cpu = await probe.stop();
  }
  if (read) await sleep(1_100);
  const queries = read && before ? pgDelta(await read(), before) : null;
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

/** Statements executed per unit (e.g. per create); null when not counted (no pg_stat_statements) or no unit. */
export function statementsPer(q: PgCounts | null, units: number): number | null {
  return q && !Number.isNaN(q.total) && units > 0 ? q.total / units : null;
}

/** The statements executed most often, per unit (e.g. per create). */
export function topStatements(q: Pick<PgCounts, 'statements'>, per: number, n = 12): { statement: string; perUnit: number; count: number }[] {
  return Object.entries(q.statements)
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([statement, count]) => ({ statement: statement.slice(0, 110), perUnit: per > 0 ? count / per : Number.NaN, count }));
}
