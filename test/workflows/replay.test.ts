// Recorded histories (test/fixtures/histories, made by scripts/record-histories.ts) replay
// against the current workflow code: a change that alters the command sequence of a workflow
// that may still be running fails here, before it ships, instead of in production as a
// non-determinism error on every open task. docs/workflow-versioning.md says what to do then.
// The second half proves the check can fail: deliberately altered workflows
// (test/workflows/fixtures-broken) must be rejected, and the same change behind patched() must not.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import type { History } from '@temporalio/common/lib/proto-utils';
import { ReplayError, Runtime, Worker, bundleWorkflowCode, type WorkflowBundle } from '@temporalio/worker';
import { DeterminismViolationError } from '@temporalio/workflow';
import { temporalLogger } from '../../observability/temporal-logger';
import { bundleWorkflows } from '../../workers/generation-worker';
import { installTracing } from '../../observability/tracing';
import { InMemorySpanExporter } from '@opentelemetry/sdk-trace-base';
import { testLogger } from '../support/stack';
import { historyFromJson } from './history-json';
import { HISTORIES_DIR, RECORDED_SCENARIOS, fixturePath, ranActivities } from './support';

const BROKEN_WORKFLOWS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures-broken', 'index.ts');
const noop = () => undefined;
const quiet = { log: noop, trace: noop, debug: noop, info: noop, warn: noop, error: noop };

const fixtures = fs
  .readdirSync(HISTORIES_DIR)
  .filter((f) => f.endsWith('.json'))
  .map((f) => path.basename(f, '.json'))
  .sort();
const histories = new Map<string, History>(fixtures.map((name) => [name, historyFromJson(JSON.parse(fs.readFileSync(fixturePath(name), 'utf8')))]));
const historyOf = (name: string): History => histories.get(name)!;

// Replay workers log their lifecycle at INFO; keep the test output to warnings.
Runtime.install({ logger: temporalLogger(testLogger), shutdownSignals: [] });

let current: WorkflowBundle;
let traced: WorkflowBundle;
let broken: WorkflowBundle;
before(async () => {
  [current, traced, broken] = await Promise.all([
    bundleWorkflows(),
    bundleWorkflows({ tracing: true }),
    bundleWorkflowCode({ workflowsPath: BROKEN_WORKFLOWS, logger: quiet }),
  ]);
});
after(() => {
  histories.clear();
});

/** Replays every fixture on one replay worker; workflow ids are `<prefix>:<fixture>`. */
async function replayAll(workflowBundle: WorkflowBundle, prefix: string): Promise<Map<string, Error | undefined>> {
  const results = new Map<string, Error | undefined>();
  const input = fixtures.map((name) => ({ workflowId: `${prefix}:${name}`, history: historyOf(name) }));
  for await (const r of Worker.runReplayHistories({ workflowBundle, replayName: prefix }, input)) {
    results.set(r.workflowId.slice(prefix.length + 1), r.error);
  }
  return results;
}

const describeError = (err: unknown): string => {
  const parts: string[] = [];
  for (let e: unknown = err; e instanceof Error; e = e.cause) parts.push(`${e.name}: ${e.message}`);
  return parts.join(' ← ') || String(err);
};

describe('recorded histories replay against the current workflow code', () => {
  test('every representative scenario has a fixture, each a completed run that exercises its path', () => {
    for (const [name, { activities }] of Object.entries(RECORDED_SCENARIOS)) {
      assert.ok(fixtures.includes(name), `missing ${path.relative(process.cwd(), fixturePath(name))}: run \`npm run record-histories -- ${name}\``);
      const events = historyOf(name).events ?? [];
      assert.ok(events.at(-1)?.workflowExecutionCompletedEventAttributes, `${name}: the recorded run completed`);
      const ran = ranActivities(historyOf(name));
      for (const a of activities) assert.ok(ran.has(a), `${name}: history runs ${a}`);
    }
  });

  for (const name of fixtures) {
    test(`${name} replays without non-determinism`, async () => {
      try {
        await Worker.runReplayHistory({ workflowBundle: current, replayName: `replay-${name}` }, historyOf(name), `replay:${name}`);
      } catch (err) {
        assert.fail(
          `${name}.json no longer replays (${describeError(err)}). The workflow code changed its command sequence for ` +
            'workflows that may still be open: put the change behind patched() (docs/workflow-versioning.md).',
        );
      }
    });
  }
});

describe('the tracing workflow interceptors change no command (observability/tracing.ts)', () => {
  test('every fixture, recorded without them, replays with them in the bundle', async () => {
    assert.ok('code' in traced && traced.code.includes('OpenTelemetryInboundInterceptor'), 'the traced bundle holds the interceptors');
    assert.ok('code' in current && !current.code.includes('OpenTelemetryInboundInterceptor'), 'the untraced bundle does not');
    const spans = new InMemorySpanExporter();
    const tracing = await installTracing({ serviceName: 'replay', exporter: spans });
    try {
      const input = fixtures.map((name) => ({ workflowId: `traced:${name}`, history: historyOf(name) }));
      for await (const r of Worker.runReplayHistories({ workflowBundle: traced, replayName: 'traced', sinks: tracing.worker!.sinks }, input)) {
        assert.equal(r.error, undefined, `${r.workflowId}: ${describeError(r.error)}`);
      }
      // A replay is not a run: its spans are not exported again.
      assert.deepEqual(
        spans.getFinishedSpans().map((s) => s.name),
        [],
      );
    } finally {
      await tracing.shutdown();
    }
  });
});

describe('the replay check can fail', () => {
  test('activities scheduled in a different order are a DeterminismViolationError naming both activity types', async () => {
    await assert.rejects(
      Worker.runReplayHistory({ workflowBundle: broken, replayName: 'reordered' }, historyOf('happy-path'), 'reordered:happy-path'),
      (err: unknown) => {
        assert.ok(err instanceof DeterminismViolationError, `expected DeterminismViolationError, got ${describeError(err)}`);
        assert.ok(!(err instanceof ReplayError));
        assert.match(err.message, /dispatchTask/);
        assert.match(err.message, /getTaskFacts/);
        return true;
      },
    );
  });

  test('a timer added without a patch breaks the replay of every fixture', async () => {
    const results = await replayAll(broken, 'unpatched-timer');
    assert.deepEqual([...results.keys()].sort(), fixtures);
    for (const [name, err] of results) {
      assert.ok(err instanceof DeterminismViolationError, `${name}: expected DeterminismViolationError, got ${describeError(err)}`);
      // The timer meets what the history holds first: an activity, or (in runs started since
      // the 'short-runs' patch) that patch's marker.
      assert.match(err.message, /timer|Timer|patch marker encountered/, `${name}: ${err.message}`);
    }
  });

  test('the same timer behind patched() replays every fixture the current code replays', async (t) => {
    // The variants wrap the current workflow, so they cannot replay what it cannot (reported above).
    const baseline = await replayAll(current, 'current');
    const results = await replayAll(broken, 'patched-timer');
    assert.deepEqual([...results.keys()].sort(), fixtures);
    for (const [name, err] of results) {
      if (baseline.get(name)) t.diagnostic(`${name}: skipped, the current code does not replay it either`);
      else assert.equal(err, undefined, `${name}: ${describeError(err)}`);
    }
  });
});
