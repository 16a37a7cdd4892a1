// Polls run on a per-provider task queue whose global rate is the provider's query quota
// (docs/design.md §5 "Polling"; docs/providers.md "Poll queues"). Real Temporal,
// Postgres, S3 and the simulator, with callbacks off so only polls move the tasks.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import type { History } from '@temporalio/common/lib/proto-utils';
import { FAL_CAPABILITIES } from '../../providers/fal';
import { KLING_CAPABILITIES } from '../../providers/kling';
import { REPLICATE_CAPABILITIES } from '../../providers/replicate';
import { RUNWAY_CAPABILITIES } from '../../providers/runway';
import { pollQueueRate } from '../../domain/poll-quota';
import { queues } from '../../temporal/queues';
import { workflowIdForTask } from '../../workflows/definitions';
import { startE2E, type E2E } from '../support/e2e';
import { eventually, startWorker, testConfig, type RunningWorker } from '../support/stack';
import { historyFromJson } from '../workflows/history-json';
import { fixturePath, localActivities } from '../workflows/support';

type HistoryEvent = NonNullable<History['events']>[number];
const ms = (ev: HistoryEvent): number => {
  const t = ev.eventTime!;
  return Number(t.seconds) * 1000 + Math.floor((t.nanos ?? 0) / 1e6);
};

/**
 * The provider reads of a history (a pollProvider, or an awaitProviderChange whose attempts are
 * its polls, docs/decisions/0050-waits-in-activity-retries.md): the queue each was scheduled on,
 * when, and when its last attempt started (if one did).
 */
function polls(history: History): { queue: string; scheduledMs: number; startedMs: number | null }[] {
  const events = history.events ?? [];
  return events.flatMap((ev) => {
    const s = ev.activityTaskScheduledEventAttributes;
    if (s?.activityType?.name !== 'pollProvider' && s?.activityType?.name !== 'awaitProviderChange') return [];
    const started = events.find(
      (x) => x.activityTaskStartedEventAttributes && Number(x.activityTaskStartedEventAttributes.scheduledEventId) === Number(ev.eventId),
    );
    return [{ queue: s.taskQueue?.name ?? '', scheduledMs: ms(ev), startedMs: started ? ms(started) : null }];
  });
}

/** The table of docs/timeouts.md, written out here so a change to workflows/generation.ts's options must change it too. */
const FACT_STEP = { startToCloseS: 30, heartbeatS: 0 };
const ACTIVITY_TIMEOUTS: Record<string, { startToCloseS: number; heartbeatS: number }> = {
  getTaskFacts: FACT_STEP,
  dispatchTask: FACT_STEP,
  prepareAttempt: FACT_STEP,
  dispatchAndPrepare: FACT_STEP,
  applyInbox: FACT_STEP,
  escalateTask: FACT_STEP,
  resolveReview: FACT_STEP,
  requestProviderCancel: FACT_STEP,
  submitAttempt: { startToCloseS: 120, heartbeatS: 10 },
  pollProvider: { startToCloseS: 300, heartbeatS: 15 },
  awaitProviderChange: { startToCloseS: 300, heartbeatS: 15 },
  rescueOutput: { startToCloseS: 1800, heartbeatS: 20 },
  processMedia: { startToCloseS: 300, heartbeatS: 20 },
};

describe("a poll runs on the poll queue of the attempt's provider", () => {
  let e: E2E;
  let replicatePolls: RunningWorker | null = null;
  before(async () => {
    // The generation worker and a poll worker for fal only: nobody serves replicate's poll queue.
    e = await startE2E('pollq', { POLL_INITIAL_MS: '300', POLL_MAX_MS: '300' }, { worker: false, generationMs: 300 });
    e.worker = await startWorker(e.config, e.tdb.database, { pollProviders: ['fal'] });
  });
  after(async () => {
    await replicatePolls?.stop();
    await e?.close();
  });

  test('without a replicate poll worker the poll waits on <base>-poll-replicate; one started for replicate completes it', async () => {
    e.sim.sim.setFaults({ callbacks: 'off' });
    const taskId = await e.createTask('pq-routing');
    const handle = e.client.workflow.getHandle(workflowIdForTask(taskId));
    const [first] = await eventually(async () => {
      const p = polls(await handle.fetchHistory());
      return p.length > 0 ? p : undefined;
    });
    assert.equal(first!.queue, queues.poll(e.config.TEMPORAL_TASK_QUEUE, 'replicate'));

    // The job finished at the provider long ago; with callbacks off only this poll can tell us.
    await new Promise((r) => setTimeout(r, 2_000));
    const waiting = polls(await handle.fetchHistory());
    assert.equal(waiting.length, 1, 'still the first poll');
    assert.equal(waiting[0]!.startedMs, null, "no worker of the generation queue or of fal's poll queue took it");
    assert.equal((await e.getTask(taskId)).status, 'SUBMITTED');

    replicatePolls = await startWorker(e.config, e.tdb.database, { pollProviders: ['replicate'] });
    await e.waitForStatus(taskId, 'SUCCEEDED', 30_000);
    const done = polls(await handle.fetchHistory());
    assert.ok(done[0]!.startedMs !== null, 'the replicate poll worker ran it');
    assert.ok(
      done.every((p) => p.queue === first!.queue),
      'every poll of the task on the same queue',
    );
  });

  test('every activity of a task is scheduled under its own timeouts (docs/timeouts.md), its polls too', async () => {
    const taskId = await e.createTask('pq-options');
    await e.waitForStatus(taskId, 'SUCCEEDED', 30_000);
    const history = await e.client.workflow.getHandle(workflowIdForTask(taskId)).fetchHistory();
    const seconds = (d: { seconds?: unknown; nanos?: number | null } | null | undefined) => (d ? Number(d.seconds ?? 0) + (d.nanos ?? 0) / 1e9 : 0);
    const scheduled = (history.events ?? []).flatMap((ev) => {
      const s = ev.activityTaskScheduledEventAttributes;
      return s ? [{ name: s.activityType!.name!, options: { startToCloseS: seconds(s.startToCloseTimeout), heartbeatS: seconds(s.heartbeatTimeout) } }] : [];
    });
    for (const { name, options } of scheduled) assert.deepEqual(options, ACTIVITY_TIMEOUTS[name], name);
    const names = new Set(scheduled.map((s) => s.name));
    for (const name of ['submitAttempt', 'rescueOutput']) assert.ok(names.has(name), `${name} scheduled`);
    assert.ok(names.has('awaitProviderChange') || names.has('pollProvider'), 'a provider read scheduled');
    // The fact steps run as local activities (docs/decisions/0034-local-fact-steps.md); one that
    // falls back to its regular activity is scheduled under FACT_STEP, checked above.
    const local = new Set(localActivities(history));
    for (const name of ['getTaskFacts', 'dispatchAndPrepare', 'applyInbox']) assert.ok(local.has(name), `${name} ran as a local activity`);
    for (const name of local) assert.ok(ACTIVITY_TIMEOUTS[name] === FACT_STEP, `${name} is a fact step`);
  });
});

describe("a poll queue is dispatched at most at the provider's query quota", () => {
  const RATE = 2;
  let e: E2E;
  before(async () => {
    // Each task would poll ten times a second; six of them ask for thirty times the quota.
    e = await startE2E('pollrate', { POLL_INITIAL_MS: '100', POLL_MAX_MS: '100', POLL_QUEUE_RATES: `replicate=${RATE}` }, { generationMs: 3_000 });
  });
  after(async () => {
    await e?.close();
  });

  test("the rate holds the adapter's declared requestsPerSecond, or the POLL_QUEUE_RATES override, over any 10 s", () => {
    // Below the quota by what the server's partition bursts can add (domain/poll-quota.ts).
    const held = (quota: number | undefined) => pollQueueRate(quota!, testConfig().POLL_QUEUE_PARTITIONS);
    assert.deepEqual(Object.fromEntries(e.worker!.worker.pollRates), {
      replicate: held(RATE),
      fal: held(FAL_CAPABILITIES.requestsPerSecond),
      runway: held(RUNWAY_CAPABILITIES.requestsPerSecond),
      kling: held(KLING_CAPABILITIES.requestsPerSecond),
    });
    assert.notEqual(REPLICATE_CAPABILITIES.requestsPerSecond, RATE, 'the override differs from the declared quota');
    assert.deepEqual([...e.worker!.worker.polls.keys()].sort(), ['fal', 'kling', 'replicate', 'runway']);
  });

  test(`a burst of polls from six tasks reaches the provider at no more than ${RATE} a second`, async (t) => {
    e.sim.sim.setFaults({ callbacks: 'off' });
    // Every read the provider sees, not what histories say: a wait's polls are the attempts of one
    // activity (docs/decisions/0050-waits-in-activity-retries.md), and only its last is an event.
    const reads: { atMs: number; id: string }[] = [];
    const unsubscribe = e.sim.sim.onStatusRead((atMs, id) => reads.push({ atMs, id }));
    try {
      const ids = await Promise.all([1, 2, 3, 4, 5, 6].map((i) => e.createTask(`pq-rate-${i}`)));
      await Promise.all(ids.map((id) => e.waitForStatus(id, 'SUCCEEDED', 60_000)));
    } finally {
      unsubscribe();
    }
    const starts = reads.map((r) => r.atMs).sort((a, b) => a - b);
    const jobs = new Set(reads.map((r) => r.id));
    assert.ok(jobs.size >= 6, `at least one read of each task's job: ${jobs.size} jobs read`);
    const spanS = (starts.at(-1)! - starts[0]!) / 1000;
    t.diagnostic(`status reads (s after the first): ${starts.map((x) => ((x - starts[0]!) / 1000).toFixed(2)).join(' ')}`);
    // A token bucket allows one second's worth at once, then the rate.
    assert.ok(starts.length <= RATE * spanS + RATE + 1, `${starts.length} reads in ${spanS.toFixed(1)} s at ${RATE}/s`);
    let busiest = 0;
    for (const s of starts) busiest = Math.max(busiest, starts.filter((x) => x >= s && x < s + 1_000).length);
    assert.ok(busiest <= 2 * RATE, `at most ${2 * RATE} reads in any second (burst included): ${busiest}`);
    // The limit did bind: each job asked for a read every 100 ms (Temporal's retry clock makes it
    // about one a second, decision 0050), and the jobs read before their generation ended were
    // read again seconds later: six jobs share ${RATE}/s, spread over the queue's partitions.
    const gaps = [...jobs].flatMap((id) => {
      const at = reads.filter((r) => r.id === id).map((r) => r.atMs);
      return at.slice(1).map((x, i) => x - at[i]!);
    });
    const meanGapMs = gaps.reduce((a, b) => a + b, 0) / Math.max(1, gaps.length);
    t.diagnostic(`${gaps.length} gaps between a job's reads, mean ${meanGapMs.toFixed(0)} ms`);
    assert.ok(gaps.length >= 2, `jobs read more than once: ${gaps.length} gaps`);
    assert.ok(meanGapMs >= 1_500, `a job's reads were ${meanGapMs.toFixed(0)} ms apart on average`);
  });
});

describe('the recorded history of the new path', () => {
  test("polling-on-poll-queue schedules its polls on the provider's poll queue, behind the patch marker", () => {
    const history = historyFromJson(JSON.parse(fs.readFileSync(fixturePath('polling-on-poll-queue'), 'utf8')));
    const markers = (history.events ?? []).filter((ev) => ev.markerRecordedEventAttributes?.markerName === 'core_patch');
    assert.ok(markers.length >= 1, 'a patch marker');
    const p = polls(history);
    assert.ok(p.length > 0 && p.every((x) => x.queue.endsWith('-poll-replicate')), p.map((x) => x.queue).join(', '));
  });
});
