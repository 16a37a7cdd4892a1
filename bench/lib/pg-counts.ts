// Postgres work as Postgres counts it, read by the benchmark process from its world database's
// statistics (nothing runs inside the processes measured): transactions committed and rolled
// back (pg_stat_database: each COMMIT, and each statement sent outside a transaction), and,
// where the server loads pg_stat_statements (shared_preload_libraries), the statements executed
// by normalised text. Everything connected to the database is counted, so the benchmark's own
// statements are taken out (counted as it sends them: BenchWorld.pgCounts), and the timer loops
// (outbox relay, fence watcher, webhook relay, samplers…) at the rate measured in a quiet window.
import type pg from 'pg';

export interface PgCounts {
  /** Statements executed (pg_stat_statements calls; BEGIN and COMMIT count); NaN without pg_stat_statements. */
  readonly total: number;
  /** Transactions committed: COMMITs and statements sent outside a transaction (xact_commit). */
  readonly commits: number;
  readonly rollbacks: number;
  /** Statements executed per normalised text (whitespace folded, first 160 characters); empty without pg_stat_statements. */
  readonly statements: Record<string, number>;
}

export const NO_COUNTS: PgCounts = { total: 0, commits: 0, rollbacks: 0, statements: {} };

/** The key a statement is counted under: its text, whitespace folded, first 160 characters. */
export function statementKey(text: string): string {
  return text.replace(/\s+/g, ' ').trim().slice(0, 160);
}

/**
 * Makes pg_stat_statements readable in `dbName` when the server loads it; says whether it does.
 * Without it the counts have commits only.
 */
export async function enableStatementCounts(pool: pg.Pool): Promise<boolean> {
  const { rows } = await pool.query<{ libs: string }>('SELECT current_setting($1) AS libs', ['shared_preload_libraries']);
  if (!rows[0]?.libs.split(',').some((l) => l.trim() === 'pg_stat_statements')) return false;
  await pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  return true;
}

/**
 * The database's counts now, less `own` (what the benchmark process itself sent: one statement
 * and one commit each). Another backend's counts reach pg_stat_database within about a second
 * of its transaction (Postgres flushes them no more often): read a phase's end after that.
 */
export async function readPgCounts(
  pool: pg.Pool,
  dbName: string,
  withStatements: boolean,
  own: { readonly total: number; readonly statements: ReadonlyMap<string, number> },
): Promise<PgCounts> {
  const { rows } = await pool.query<{ commits: string; rollbacks: string }>(
    'SELECT xact_commit::text AS commits, xact_rollback::text AS rollbacks FROM pg_stat_database WHERE datname = $1',
    [dbName],
  );
  const statements: Record<string, number> = {};
  let total = Number.NaN;
  if (withStatements) {
    const s = await pool.query<{ query: string; calls: string }>(
      'SELECT query, calls::text AS calls FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)',
      [dbName],
    );
    total = 0;
    for (const r of s.rows) {
      const k = statementKey(r.query);
      statements[k] = (statements[k] ?? 0) + Number(r.calls);
      total += Number(r.calls);
    }
    for (const [k, n] of own.statements) if (statements[k] !== undefined) statements[k] -= n;
    total -= own.total;
  }
  return { total, commits: Number(rows[0]?.commits ?? 0) - own.total, rollbacks: Number(rows[0]?.rollbacks ?? 0), statements };
}

/** `after` − `before`, field by field (the per-statement map too, zeros dropped). */
export function pgDelta(after: PgCounts, before: PgCounts): PgCounts {
  const statements: Record<string, number> = { ...after.statements };
  for (const [s, n] of Object.entries(before.statements)) statements[s] = (statements[s] ?? 0) - n;
  for (const s of Object.keys(statements)) if (statements[s] === 0) delete statements[s];
  return { total: after.total - before.total, commits: after.commits - before.commits, rollbacks: after.rollbacks - before.rollbacks, statements };
}

/**
 * The phase's counts minus the background expected over its length: `quiet` counted over
 * `quietSeconds` with nothing to do, scaled to `phaseSeconds`, never below zero. Statements text
 * by text (a timer loop that ran less often under load does not make the tasks' own count
 * smaller), and their total the sum of what is left; commits and rollbacks as totals.
 */
export function withoutBackground(phase: PgCounts, quiet: PgCounts, quietSeconds: number, phaseSeconds: number): PgCounts {
  if (quietSeconds <= 0) return phase;
  const k = phaseSeconds / quietSeconds;
  const statements: Record<string, number> = {};
  let total = 0;
  for (const [s, n] of Object.entries(phase.statements)) {
    const rest = Math.max(0, n - k * (quiet.statements[s] ?? 0));
    if (rest > 0) statements[s] = rest;
    total += rest;
  }
  return {
    total: Number.isNaN(phase.total) ? Number.NaN : total,
    commits: Math.max(0, phase.commits - k * quiet.commits),
    rollbacks: Math.max(0, phase.rollbacks - k * quiet.rollbacks),
    statements,
  };
}
