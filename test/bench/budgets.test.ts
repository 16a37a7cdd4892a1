// The benchmarks' count budgets (bench/lib/budgets.ts) and the arithmetic behind the counts
// (bench/lib/pg-counts.ts, bench/lib/history.ts): pure, no services.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { budgetsFromRun, ceil1, checkCounts, type CountDef } from '../../bench/lib/budgets';
import { historyCounts } from '../../bench/lib/history';
import { NO_COUNTS, pgDelta, withoutBackground, type PgCounts } from '../../bench/lib/pg-counts';

const budgets = {
  pgCommits: { max: 100, note: 'commits' },
  workflowTasks: { max: 12, note: 'workflow tasks' },
};

test('a count over its budget regresses, one at or under it passes', () => {
  const checks = checkCounts({ pgCommits: 100.01, workflowTasks: 12 }, budgets);
  assert.deepEqual(
    checks.map((c) => [c.key, c.regressed]),
    [
      ['pgCommits', true],
      ['workflowTasks', false],
    ],
  );
});

test('a budgeted count the run did not measure (missing or NaN) regresses rather than passing silently', () => {
  const checks = checkCounts({ pgCommits: Number.NaN }, budgets);
  assert.equal(checks.find((c) => c.key === 'pgCommits')?.regressed, true);
  assert.equal(checks.find((c) => c.key === 'workflowTasks')?.regressed, true);
});

test('a measured count without a budget is reported with no maximum and does not fail', () => {
  const c = checkCounts({ historyEvents: 60 }, {}).find((x) => x.key === 'historyEvents');
  assert.deepEqual(c, { key: 'historyEvents', measured: 60, max: null, note: '', regressed: false });
});

test('budgets written from a run sit the slack above it, rounded up to a tenth, and skip what was not measured', () => {
  const defs: CountDef[] = [
    { key: 'a', note: 'A', slack: 0.05 },
    { key: 'b', note: 'B', slack: 0 },
    { key: 'c', note: 'C', slack: 0.05 },
  ];
  assert.deepEqual(budgetsFromRun({ a: 100, b: 10.04, c: Number.NaN }, defs), { a: { max: 105, note: 'A' }, b: { max: 10.1, note: 'B' } });
  assert.equal(ceil1(10), 10);
  assert.equal(ceil1(10.01), 10.1);
  // A run exactly at the budget it wrote passes the check.
  const written = budgetsFromRun({ b: 10.04 }, defs);
  assert.equal(checkCounts({ b: 10.04 }, written)[0]?.regressed, false);
});

const counts = (statements: Record<string, number>, commits: number): PgCounts => ({
  total: Object.values(statements).reduce((a, b) => a + b, 0),
  commits,
  rollbacks: 0,
  statements,
});

test('the phase delta is the later reading less the earlier, statement by statement', () => {
  const d = pgDelta(counts({ a: 5, b: 2 }, 7), counts({ a: 3 }, 3));
  assert.deepEqual(d, { total: 4, commits: 4, rollbacks: 0, statements: { a: 2, b: 2 } });
  assert.deepEqual(pgDelta(counts({ a: 3 }, 3), NO_COUNTS), counts({ a: 3 }, 3));
});

test('the timer loops come out at their quiet rate, statement by statement, never below zero', () => {
  // Quiet: 10 s with 20 relay polls (each its own commit) and 10 fence reads.
  const quiet = counts({ relay: 20, fence: 10 }, 30);
  // Phase of 30 s: the relay polled 70 times (10 of them found work), the fence ran late (25
  // instead of 30), and the tasks ran 600 statements in 120 transactions.
  const phase = counts({ relay: 70, fence: 25, task: 600 }, 215);
  const own = withoutBackground(phase, quiet, 10, 30);
  assert.deepEqual(own.statements, { relay: 10, task: 600 });
  assert.equal(own.total, 610);
  assert.equal(own.commits, 125, 'commits as a total: 215 less 3 × 30');
  assert.equal(withoutBackground(counts({}, 50), quiet, 10, 30).commits, 0, 'never below zero');
  assert.deepEqual(withoutBackground(phase, quiet, 0, 30), phase, 'no quiet window: nothing is taken out');
});

test('without pg_stat_statements the statements stay uncounted (NaN) and the commits are still taken out', () => {
  const none = (commits: number): PgCounts => ({ total: Number.NaN, commits, rollbacks: 0, statements: {} });
  const own = withoutBackground(pgDelta(none(300), none(100)), pgDelta(none(40), none(10)), 10, 30);
  assert.ok(Number.isNaN(own.total));
  assert.equal(own.commits, 110);
});

test('a history is counted by dispatches, local activity markers, workflow tasks and events', () => {
  const events = [
    { workflowExecutionStartedEventAttributes: {} },
    { workflowTaskCompletedEventAttributes: {} },
    { activityTaskScheduledEventAttributes: {} },
    { markerRecordedEventAttributes: { markerName: 'core_local_activity' } },
    { markerRecordedEventAttributes: { markerName: 'core_patch' } },
    { workflowExecutionSignaledEventAttributes: {} },
    { workflowTaskFailedEventAttributes: {} },
    { upsertWorkflowSearchAttributesEventAttributes: {} },
    { timerStartedEventAttributes: {} },
  ];
  assert.deepEqual(historyCounts({ events }), {
    events: 9,
    activityDispatches: 1,
    localActivityMarkers: 1,
    workflowTasks: 2,
    signals: 1,
    timers: 1,
    upserts: 1,
  });
});
