// The 'short-runs' patch: a run started with the default input continues as new after
// STEPS_PER_RUN (50) steps, so a task that waits on its provider for hours never builds a history
// that a worker must replay in full after each cache eviction. Runs started before the patch
// (no marker) keep the old length: the recorded fixtures replay (test/workflows/replay.test.ts).
// Since 'waits-in-retries' a wait's polls add no step (docs/decisions/0050-waits-in-activity-retries.md);
// what still makes a long wait's steps is its wakes: a provider that calls back with progress
// (Replicate's "logs" events, docs/providers.md) wakes the workflow once per callback.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { wakeSignal } from '../../workflows/definitions';
import { startE2E, startTaskWorkflow, type E2E } from '../support/e2e';

let e: E2E;
before(async () => {
  // A generation far longer than the test, callbacks off: only the wakes the test sends make steps.
  e = await startE2E('short-runs', { POLL_INITIAL_MS: '100', POLL_MAX_MS: '200', CALLBACK_HEALTHY_WINDOW_MS: '0' }, { generationMs: 120_000 });
});
after(async () => {
  await e?.close();
});

test('a run of a waiting task continues as new after 50 steps, with the patch marker, and its history stays short', async () => {
  e.sim.sim.setFaults({ callbacks: 'off' });
  // The default input: the run length is the workflow's own.
  const { handle } = await startTaskWorkflow(e, 'short-runs');
  const first = e.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId);
  // A wake every 150 ms, as progress callbacks would send them: each one a step (apply the inbox, wait again).
  const deadline = Date.now() + 90_000;
  while ((await first.describe()).status.name === 'RUNNING' && Date.now() < deadline) {
    await first.signal(wakeSignal).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 150));
  }
  assert.equal((await first.describe()).status.name, 'CONTINUED_AS_NEW', 'the first run rolled over while the job still ran');

  const events = (await first.fetchHistory()).events ?? [];
  const markers = events.filter((ev) => ev.markerRecordedEventAttributes?.markerName === 'core_patch');
  assert.ok(markers.length >= 1, 'the short-runs patch marker is in the new history');
  // Scheduled and local (the fact steps, docs/decisions/0034-local-fact-steps.md) alike.
  const activities = events.filter(
    (ev) => ev.activityTaskScheduledEventAttributes || ev.markerRecordedEventAttributes?.markerName === 'core_local_activity',
  ).length;
  // 50 steps: the first few move the task to the provider, every later one is a wait (1–3 activities).
  assert.ok(activities >= 50 && activities <= 160, `${activities} activities in the first run`);
  assert.ok(events.length < 1_500, `${events.length} events in the first run`);

  const next = await e.client.workflow.getHandle(handle.workflowId).describe();
  assert.notEqual(next.runId, handle.firstExecutionRunId);
  await e.client.workflow.getHandle(handle.workflowId).terminate('test done');
});
