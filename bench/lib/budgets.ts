// Count budgets: the per-task counts a benchmark prints (Postgres commits,
// activity dispatches, workflow tasks, history events…) against the maxima committed in
// bench/budgets.json. `--check` fails the run naming each count over its budget;
// `--write-budgets` rewrites the benchmark's entry from the run (measured × (1 + slack)), which
// is how budgets are lowered after a change that cuts a count (docs/performance.md, "Count
// budgets and checks"). checkCounts and budgetsFromRun are pure (test/bench/budgets.test.ts);
// reportCounts and checkGoals print, write the file and set the exit code.
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../../harness';
import type { Cell, Reporter } from './report';

export const BUDGETS_FILE = path.join(REPO_ROOT, 'bench', 'budgets.json');

/** One count a benchmark measures and can budget. */
export interface CountDef {
  readonly key: string;
  /** What the count covers, written into the budget file beside its maximum. */
  readonly note: string;
  /** Headroom `--write-budgets` leaves above the measured figure (0.05 = 5 %). */
  readonly slack: number;
}

export interface Budget {
  readonly max: number;
  readonly note: string;
}

export interface BenchBudgets {
  /** How the figures were produced (command, commit, machine), for whoever reads the file. */
  readonly from: string;
  readonly counts: Record<string, Budget>;
}

export type BudgetFile = Record<string, BenchBudgets>;

export interface CountCheck {
  readonly key: string;
  readonly measured: number;
  readonly max: number | null;
  readonly note: string;
  /** Over its budget, or budgeted and not measured. */
  readonly regressed: boolean;
}

/**
 * Each budgeted count against its maximum. A count with a budget but no finite measurement
 * regressed (a benchmark that stops measuring something must not pass silently); a measured
 * count without a budget is reported and passes.
 */
export function checkCounts(measured: Readonly<Record<string, number>>, budgets: Readonly<Record<string, Budget>>): CountCheck[] {
  const keys = [...new Set([...Object.keys(budgets), ...Object.keys(measured)])];
  return keys.map((key) => {
    const b = budgets[key];
    const m = measured[key] ?? Number.NaN;
    if (!b) return { key, measured: m, max: null, note: '', regressed: false };
    return { key, measured: m, max: b.max, note: b.note, regressed: !Number.isFinite(m) || m > b.max };
  });
}

/** Rounds up to one decimal, so a budget written from 10.04 is 10.1, never 10.0. */
export function ceil1(x: number): number {
  return Math.ceil(x * 10 - 1e-9) / 10;
}

/** Budgets from a run: measured × (1 + slack), rounded up, for every defined count measured. */
export function budgetsFromRun(measured: Readonly<Record<string, number>>, defs: readonly CountDef[]): Record<string, Budget> {
  const out: Record<string, Budget> = {};
  for (const d of defs) {
    const m = measured[d.key];
    if (m === undefined || !Number.isFinite(m)) continue;
    out[d.key] = { max: ceil1(m * (1 + d.slack)), note: d.note };
  }
  return out;
}

export function readBudgetFile(file = BUDGETS_FILE): BudgetFile {
  if (!fs.existsSync(file)) return {};
  return JSON.parse(fs.readFileSync(file, 'utf8')) as BudgetFile;
}

/** Replaces one benchmark's entry, keeping the others. */
export function writeBenchBudgets(bench: string, entry: BenchBudgets, file = BUDGETS_FILE): void {
  const all = { ...readBudgetFile(file), [bench]: entry };
  fs.writeFileSync(file, `${JSON.stringify(all, null, 2)}\n`);
}

export interface BudgetOptions {
  readonly check: boolean;
  readonly writeBudgets: boolean;
}

/**
 * Prints the counts against the benchmark's budgets; with `check`, marks the process failed
 * (exit code 1) and names each count that regressed; with `writeBudgets`, rewrites the entry.
 * Returns the keys that regressed.
 */
export function reportCounts(
  rep: Reporter,
  bench: string,
  title: string,
  measured: Readonly<Record<string, number>>,
  defs: readonly CountDef[],
  o: BudgetOptions & { readonly from: string },
): string[] {
  const budgets = readBudgetFile()[bench]?.counts ?? {};
  const checks = checkCounts(measured, budgets);
  const note = (key: string) => defs.find((d) => d.key === key)?.note ?? budgets[key]?.note ?? '';
  rep.table(
    `${title} (budgets: bench/budgets.json "${bench}")`,
    ['count', 'measured', 'budget', 'status', 'covers'],
    checks.map((c): Cell[] => [
      c.key,
      Number.isFinite(c.measured) ? Math.round(c.measured * 100) / 100 : null,
      c.max,
      c.max === null ? 'no budget' : c.regressed ? 'REGRESSED' : c.measured < c.max * 0.85 ? 'ok (well under: lower it?)' : 'ok',
      note(c.key),
    ]),
  );
  const regressed = checks.filter((c) => c.regressed).map((c) => c.key);
  if (o.writeBudgets) {
    writeBenchBudgets(bench, { from: o.from, counts: budgetsFromRun(measured, defs) });
    rep.log(`${bench}: budgets written to ${path.relative(REPO_ROOT, BUDGETS_FILE)} from this run`);
  }
  if (o.check) {
    if (Object.keys(budgets).length === 0) {
      rep.log(`${bench}: check FAILED: no budgets for "${bench}" in ${path.relative(REPO_ROOT, BUDGETS_FILE)} (write them with --write-budgets)`);
      process.exitCode = 1;
    } else if (regressed.length) {
      rep.log(
        `${bench}: check FAILED: over budget: ${checks
          .filter((c) => c.regressed)
          .map((c) => `${c.key} ${Number.isFinite(c.measured) ? Math.round(c.measured * 100) / 100 : 'not measured'} > ${c.max}`)
          .join('; ')}`,
      );
      process.exitCode = 1;
    } else rep.log(`${bench}: check passed: every budgeted count within its budget`);
  }
  return regressed;
}

/** With `check`, marks the process failed and names each of `goals` not met. */
export function checkGoals(rep: Reporter, bench: string, goals: readonly { name: string; met: boolean }[], check: boolean): void {
  if (!check) return;
  const missed = goals.filter((g) => !g.met).map((g) => g.name);
  if (missed.length) {
    rep.log(`${bench}: check FAILED: goals not met: ${missed.join('; ')}`);
    process.exitCode = 1;
  } else rep.log(`${bench}: check passed: ${goals.map((g) => g.name).join('; ')}`);
}
