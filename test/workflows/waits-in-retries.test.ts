// The 'waits-in-retries' patch (docs/decisions/0050-waits-in-activity-retries.md): once a wait's
// first poll is due, its reads run as the attempts of one awaitProviderChange activity, retried by
// Temporal after the next poll's delay, with no workflow task between them. The task must still
// end as it would have (one job, one charge), the provider must still be read at the pace the
// facts set, and a wake must still reach the workflow at once while the reads wait in Temporal.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import type { History } from '@temporalio/common/lib/proto-utils';
import { attemptIdFor } from '../../activities/dispatch';
import { FailureType } from '../../domain/errors';
import { startE2E, type E2E } from '../support/e2e';
import { eventually } from '../support/stack';
import { eventsWhere, scheduledActivities } from './support';

let e: E2E;
before(async () => {
  // Callbacks off: only the polls can see the job move.
  e = await startE2E('retries', { POLL_INITIAL_MS: '300', POLL_MAX_MS: '300', CALLBACK_HEALTHY_WINDOW_MS: '0' }, { generationMs: 8_000 });
});
after(async () => {
  await e?.close();
});
beforeEach(() => {
  e.sim.sim.clearFaults();
  e.sim.sim.setFaults({ callbacks: 'off' });
});

const historyOf = (taskId: string): Promise<History> => e.client.workflow.getHandle(e.api.facade.workflowIdFor(taskId)).fetchHistory();

test('a long wait reads the provider in activity retries, no workflow task between its reads, one job, one charge', async () => {
  const readsBefore = e.sim.sim.stats().status_reads;
  const taskId = await e.createTask('retries-long-wait');
  await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
  const reads = e.sim.sim.stats().status_reads - readsBefore;

  const events = (await historyOf(taskId)).events ?? [];
  const scheduledAt = new Map<string, number>();
  let attempts = 0;
  events.forEach((ev, i) => {
    if (ev.activityTaskScheduledEventAttributes?.activityType?.name === 'awaitProviderChange') scheduledAt.set(String(ev.eventId), i);
    const started = ev.activityTaskStartedEventAttributes;
    const from = started ? scheduledAt.get(String(started.scheduledEventId)) : undefined;
    if (!started || from === undefined) return;
    // Temporal writes the Started event of a retried activity once, with its last attempt.
    attempts += started.attempt ?? 0;
    const between = events.slice(from + 1, i).filter((x) => x.workflowTaskCompletedEventAttributes).length;
    assert.equal(between, 0, `no workflow task between the reads of the wait scheduled at event ${String(ev.eventId)}`);
  });
  // Temporal retries no sooner than a second apart here (the facts ask for 300 ms): the ~8 s
  // generation is read about once a second, in one or two waits (the job's start ends one).
  assert.ok(scheduledAt.size >= 1 && scheduledAt.size <= 3, `${scheduledAt.size} waits`);
  assert.ok(reads >= 5, `${reads} status reads`);
  assert.ok(attempts >= reads - 2, `${attempts} wait attempts for ${reads} status reads`);
  assert.equal(scheduledActivities(await historyOf(taskId)).filter((name) => name === 'pollProvider').length, 0, 'no per-cycle poll activity');
  assert.equal(e.sim.jobsFor(attemptIdFor(taskId, 1)), 1, 'one provider job');
  assert.deepEqual(await e.ledgerOf(taskId), { RESERVE: '4.500000', SETTLE: '4.500000', RELEASE: '0.000000' });
});

test('a wake while the reads wait in Temporal cancels them and the workflow acts on it at once', async () => {
  // Its own stack: a long generation, and polls that double from 0.5 s to a minute apart, so the
  // wait soon sits in Temporal's backoff for many seconds between two reads.
  const w = await startE2E('retries-wake', { POLL_INITIAL_MS: '500', POLL_MAX_MS: '60000', CALLBACK_HEALTHY_WINDOW_MS: '0' }, { generationMs: 600_000 });
  try {
    w.sim.sim.setFaults({ callbacks: 'off' });
    const taskId = await w.createTask('retries-wake');
    const handle = w.client.workflow.getHandle(w.api.facade.workflowIdFor(taskId));
    // The wait's reads are in their retry loop, the next one at least 4 s away.
    const nextReadAt = await eventually(
      async () => {
        const pending = (await handle.describe()).raw.pendingActivities ?? [];
        const wait = pending.find((a) => a.activityType?.name === 'awaitProviderChange');
        const next = wait?.scheduledTime?.seconds;
        if (!wait || wait.lastFailure?.applicationFailureInfo?.type !== FailureType.ProviderUnchanged || next == null) return undefined;
        const at = Number(next) * 1000 + Math.floor((wait.scheduledTime?.nanos ?? 0) / 1e6);
        return at - Date.now() >= 4_000 ? at : undefined;
      },
      45_000,
      100,
    );
    const cancel = await w.cancelTask(taskId);
    assert.ok(cancel.status < 300, `cancel answered ${cancel.status}`);
    // The wake cancelled the wait, the cancel was waited for, and the next step ran: the provider cancel.
    await eventually(async () => (scheduledActivities(await handle.fetchHistory()).includes('requestProviderCancel') ? true : undefined), 10_000, 50);
    const actedAt = Date.now();
    const history = await handle.fetchHistory();
    assert.equal(eventsWhere(history, (ev) => ev.activityTaskCancelRequestedEventAttributes).length, 1, 'the wait was cancelled');
    assert.equal(eventsWhere(history, (ev) => ev.activityTaskCanceledEventAttributes).length, 1, 'and its cancel completed');
    assert.ok(actedAt < nextReadAt, `the workflow acted on the wake ${nextReadAt - actedAt} ms before the next read was due`);
    await handle.terminate('test done');
  } finally {
    await w.close();
  }
});
