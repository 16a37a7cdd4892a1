// The alert rules and the dashboard in deploy/ are part of the product: promtool accepts the
// rules and their unit tests pass, and every metric a rule or a panel names is one that a real
// API process or a real worker process (after running a task) exports. A renamed metric breaks
// this test instead of silently blinding an alert.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { REPO_ROOT, readToolPaths, startNodeProcess, type ManagedProcess } from '../../harness';
import { startE2E, type E2E } from '../support/e2e';
import { configToEnv, eventually, freePort } from '../support/stack';

const run = promisify(execFile);
const RULES = path.join(REPO_ROOT, 'deploy/prometheus/vidorch-alerts.yml');
const RULE_TESTS = path.join(REPO_ROOT, 'deploy/prometheus/vidorch-alerts.test.yml');
const DASHBOARD = path.join(REPO_ROOT, 'deploy/grafana/vidorch-dashboard.json');

interface RuleFile {
  groups: { name: string; rules: { alert?: string; record?: string; expr: string; labels?: Record<string, string>; annotations?: Record<string, string> }[] }[];
}
interface Panel {
  title?: string;
  targets?: { expr?: string }[];
  panels?: Panel[];
}

/** Our metric names in a PromQL expression (every one we export starts with vidorch_ or temporal_). */
export function metricNames(expr: string): string[] {
  return [...new Set(expr.match(/\b(?:vidorch|temporal)_[a-zA-Z0-9_]+/g) ?? [])];
}

/** The names an exposition declares (# TYPE lines), plus a histogram's _bucket/_sum/_count series. */
function exportedNames(exposition: string): Set<string> {
  const names = new Set<string>();
  for (const m of exposition.matchAll(/^# TYPE (\S+) (\S+)/gm)) {
    const [, name, type] = m;
    names.add(name!);
    if (type === 'histogram' || type === 'summary') for (const s of ['_bucket', '_sum', '_count']) names.add(`${name}${s}`);
  }
  return names;
}

const rules = parse(fs.readFileSync(RULES, 'utf8')) as RuleFile;
const dashboard = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8')) as { panels: Panel[] };
const panelExprs = (panels: Panel[]): { where: string; expr: string }[] =>
  panels.flatMap((p) => [...(p.targets ?? []).flatMap((t) => (t.expr ? [{ where: `panel "${p.title}"`, expr: t.expr }] : [])), ...panelExprs(p.panels ?? [])]);
const named = [...rules.groups.flatMap((g) => g.rules.map((r) => ({ where: `rule ${r.alert ?? r.record}`, expr: r.expr }))), ...panelExprs(dashboard.panels)];

test('promtool accepts the rules and their unit tests pass', async () => {
  const promtool = readToolPaths().promtool;
  const checked = await run(promtool, ['check', 'rules', RULES]);
  assert.match(checked.stdout, /SUCCESS: \d+ rules found/);
  const tested = await run(promtool, ['test', 'rules', RULE_TESTS], { cwd: path.dirname(RULE_TESTS) });
  assert.match(tested.stdout, /SUCCESS/);
});

test('every alert has a severity, a summary and a runbook anchor that exists', () => {
  const runbook = fs.readFileSync(path.join(REPO_ROOT, 'docs/runbooks/alerts.md'), 'utf8').toLowerCase();
  for (const r of rules.groups.flatMap((g) => g.rules)) {
    if (!r.alert) continue;
    assert.ok(['page', 'ticket'].includes(r.labels?.severity ?? ''), `${r.alert}: severity page or ticket`);
    assert.ok(r.annotations?.summary, `${r.alert}: a summary`);
    const anchor = r.annotations?.runbook?.split('#')[1];
    assert.equal(anchor, r.alert.toLowerCase(), `${r.alert}: runbook anchor is its name`);
    assert.ok(runbook.includes(`## ${r.alert.toLowerCase()}`), `docs/runbooks/alerts.md has a "## ${r.alert}" section`);
  }
});

let e: E2E;
const children: ManagedProcess[] = [];
before(async () => {
  e = await startE2E('alert-metrics', {}, { worker: false });
});
after(async () => {
  await Promise.all(children.map((c) => c.stop('SIGTERM', 10_000)));
  await e?.close();
});

test('every metric a rule or a dashboard panel names is exported by the API or a worker', async () => {
  const base = { ...configToEnv(e.config), DATABASE_URL: e.tdb.url, LOG_LEVEL: 'warn' };
  const workerOps = await freePort();
  const apiOps = await freePort();
  children.push(startNodeProcess('metrics-worker', 'workers/main.ts', { ...base, WORKER_METRICS_PORT: String(workerOps) }, { log: () => undefined }));
  children.push(
    startNodeProcess('metrics-api', 'api/server.ts', { ...base, PORT: String(await freePort()), OPS_PORT: String(apiOps) }, { log: () => undefined }),
  );
  const scrape = (port: number) => fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(3_000) }).then((r) => (r.ok ? r.text() : undefined));

  // A task through the worker process, so the SDK's workflow-task histograms have samples.
  const taskId = await e.createTask('metrics-1');
  await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
  const exported = await eventually(
    async () => {
      const [w, a] = await Promise.all([scrape(workerOps).catch(() => undefined), scrape(apiOps).catch(() => undefined)]);
      if (!w || !a || !/^# TYPE temporal_workflow_task_schedule_to_start_latency /m.test(w)) return undefined;
      return new Set([...exportedNames(w), ...exportedNames(a)]);
    },
    30_000,
    250,
  );

  assert.ok(named.length > 20, 'the rules and the dashboard name metrics');
  const missing = named.flatMap(({ where, expr }) =>
    metricNames(expr)
      .filter((n) => !exported.has(n))
      .map((n) => `${where}: ${n}`),
  );
  assert.deepEqual(missing, [], 'metrics named in deploy/ that no process exports');
});
