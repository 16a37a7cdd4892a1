// Postgres round trips and commits as the counting preload (bench/lib/pg-count-preload.mjs)
// writes them, per process, and the arithmetic the benchmarks do on them: the difference over
// a measured phase, summed over processes, and the same with the processes' background (the
// loops that run on a timer whether or not there are tasks: outbox relay, fence watcher,
// webhook relay, spool replay…) taken out, at the rate measured in a quiet window.

import fs from 'node:fs';

export interface PgCounts {
  /** Round trips (pg.Client#query calls). */
  readonly total: number;
  /** Transactions ended by COMMIT, plus statements sent outside a transaction. */
  readonly commits: number;
  readonly rollbacks: number;
  /** Round trips per statement text (whitespace folded, first 160 characters). */
  readonly statements: Record<string, number>;
  /** Commits per transaction, named by its first statement ("tx: …") or the lone statement. */
  readonly commitsBy: Record<string, number>;
}

export const NO_COUNTS: PgCounts = { total: 0, commits: 0, rollbacks: 0, statements: {}, commitsBy: {} };

export function readPgCounts(file: string): PgCounts {
  try {
    const raw = JSON.parse(fs.readFileSync(file, 'utf8')) as Partial<PgCounts>;
    return {
      total: raw.total ?? 0,
      commits: raw.commits ?? 0,
      rollbacks: raw.rollbacks ?? 0,
      statements: raw.statements ?? {},
      commitsBy: raw.commitsBy ?? {},
    };
  } catch {
    return NO_COUNTS;
  }
}

function combineMap(a: Record<string, number>, b: Record<string, number>, k: number): Record<string, number> {
  const out: Record<string, number> = { ...a };
  for (const [s, n] of Object.entries(b)) out[s] = (out[s] ?? 0) + k * n;
  for (const s of Object.keys(out)) if (out[s] === 0) delete out[s];
  return out;
}

/** a + k·b, field by field (the per-statement maps too); k = −1 gives a − b. */
function combine(a: PgCounts, b: PgCounts, k: number): PgCounts {
  return {
    total: a.total + k * b.total,
    commits: a.commits + k * b.commits,
    rollbacks: a.rollbacks + k * b.rollbacks,
    statements: combineMap(a.statements, b.statements, k),
    commitsBy: combineMap(a.commitsBy, b.commitsBy, k),
  };
}

/** Sum over processes of (after − before); the arrays are index-aligned by process. */
export function pgDelta(after: readonly PgCounts[], before: readonly PgCounts[]): PgCounts {
  let acc = NO_COUNTS;
  for (const c of after) acc = combine(acc, c, 1);
  for (const c of before) acc = combine(acc, c, -1);
  return acc;
}

/** Each entry minus k × the quiet window's, never below zero; and the sum of what is left. */
function subtractMap(phase: Record<string, number>, quiet: Record<string, number>, k: number): { left: Record<string, number>; sum: number } {
  const left: Record<string, number> = {};
  let sum = 0;
  for (const [s, n] of Object.entries(phase)) {
    const rest = Math.max(0, n - k * (quiet[s] ?? 0));
    if (rest > 0) left[s] = rest;
    sum += rest;
  }
  return { left, sum };
}

/**
 * The phase's counts minus the background expected over its length: `quiet` counted over
 * `quietSeconds` with nothing to do, scaled to `phaseSeconds`. Statement by statement (and
 * transaction by transaction for commits), never below zero: a timer loop that ran less often
 * under load does not make the tasks' own count smaller. The totals are the sums of what is left.
 */
export function withoutBackground(phase: PgCounts, quiet: PgCounts, quietSeconds: number, phaseSeconds: number): PgCounts {
  if (quietSeconds <= 0) return phase;
  const k = phaseSeconds / quietSeconds;
  const trips = subtractMap(phase.statements, quiet.statements, k);
  const commits = subtractMap(phase.commitsBy, quiet.commitsBy, k);
  return {
    total: trips.sum,
    commits: commits.sum,
    rollbacks: Math.max(0, phase.rollbacks - k * quiet.rollbacks),
    statements: trips.left,
    commitsBy: commits.left,
  };
}
