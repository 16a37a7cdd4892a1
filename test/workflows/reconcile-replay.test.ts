// The reconciler workflow moved from the reconcile queue to the generation queue, its one activity
// staying on the reconcile queue (reconcilers/schedules.ts). Runs started before the move carry
// no activity queue in their input and keep scheduling the activity on their own queue: the same
// command as before, so no patch. Two recorded histories replay against the current code: one
// recorded by the code before the move (its input `{ reconciler }`, everything on
// `<base>-reconcile`), one as the Schedules start it now. The generation fixtures
// (test/fixtures/histories) hold no reconciler workflow: replay.test.ts does not cover it.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { before, describe, test } from 'node:test';
import type { History } from '@temporalio/common/lib/proto-utils';
import { Runtime, Worker, type WorkflowBundle } from '@temporalio/worker';
import { temporalLogger } from '../../observability/temporal-logger';
import { bundleWorkflows } from '../../workers/generation-worker';
import { testLogger } from '../support/stack';
import { historyFromJson } from './history-json';

const DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'reconcile-histories');
const historyOf = (name: string): History => historyFromJson(JSON.parse(fs.readFileSync(path.join(DIR, `${name}.json`), 'utf8')));

Runtime.install({ logger: temporalLogger(testLogger), shutdownSignals: [] });

let bundle: WorkflowBundle;
before(async () => {
  bundle = await bundleWorkflows();
});

/** The workflow's own queue, its input, and the queue of each activity it scheduled. */
function queuesOf(history: History) {
  const events = history.events ?? [];
  const started = events[0]?.workflowExecutionStartedEventAttributes;
  const input = JSON.parse(Buffer.from(started?.input?.payloads?.[0]?.data ?? []).toString('utf8')) as Record<string, unknown>;
  const activities = events.flatMap((ev) => {
    const a = ev.activityTaskScheduledEventAttributes;
    return a ? [`${a.activityType?.name} on ${a.taskQueue?.name}`] : [];
  });
  return { workflow: started?.taskQueue?.name, input, activities, completed: Boolean(events.at(-1)?.workflowExecutionCompletedEventAttributes) };
}

describe('reconciler workflow histories replay against the current code', () => {
  test('a run started before the move (recorded by that code): everything on the reconcile queue', async () => {
    const history = historyOf('own-queue');
    assert.deepEqual(queuesOf(history), {
      workflow: 'rec-reconcile-reconcile',
      input: { reconciler: 'outbox' },
      activities: ['runReconciler on rec-reconcile-reconcile'],
      completed: true,
    });
    await Worker.runReplayHistory({ workflowBundle: bundle, replayName: 'reconcile-own-queue' }, history, 'replay:reconcile-own-queue');
  });

  test('a run as the Schedules start it now: the workflow on the generation queue, its activity on the reconcile queue', async () => {
    const history = historyOf('activity-queue');
    assert.deepEqual(queuesOf(history), {
      workflow: 'rec-reconcile',
      input: { reconciler: 'outbox', activityQueue: 'rec-reconcile-reconcile' },
      activities: ['runReconciler on rec-reconcile-reconcile'],
      completed: true,
    });
    await Worker.runReplayHistory({ workflowBundle: bundle, replayName: 'reconcile-activity-queue' }, history, 'replay:reconcile-activity-queue');
  });
});
