// The poll interval by phase, slower while the provider's callbacks are healthy, as the poll
// activity writes it into task_attempt.next_poll_at (MockActivityEnvironment against real
// Postgres and the provider simulator), and the callback-health fact it is decided on.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import { createCallbackHealth } from '../../activities/callback-health';
import { createPollDemand, demandFloorMs } from '../../activities/poll-demand';
import { pollQueueRate } from '../../domain/poll-quota';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { cancelTask } from '../../api/tasks.service';
import { createTask, testActivityDeps } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import { recordProviderEvent } from '../../db/inbox';
import { callbackInbox, taskAttempt } from '../../db/schema';
import type { ProviderJob } from '../../providers/types';
import { freshActivities, runActivity as run, startActivityWorld, type ActivityWorld } from '../support/activities';

const INITIAL_MS = 1_000;
const MAX_MS = 4_000;
const FACTOR = 3;

let w: ActivityWorld;
before(async () => {
  w = await startActivityWorld({
    config: {
      POLL_INITIAL_MS: String(INITIAL_MS),
      POLL_MAX_MS: String(MAX_MS),
      POLL_HEALTHY_FACTOR: String(FACTOR),
      CALLBACK_HEALTHY_WINDOW_MS: '60000',
    },
  });
});
after(async () => w?.close());

/** Fresh activities: the callback-health cache of earlier ones does not carry over. */
const activities = (): TaskActivities => freshActivities(w);

let seq = 0;
async function submittedTask(acts: TaskActivities): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `pace-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `pace ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await run(acts, 'dispatchTask', taskId);
  const prepared = await run(acts, 'prepareAttempt', taskId);
  const r = await run(acts, 'submitAttempt', taskId);
  assert.equal(r.facts.status, 'SUBMITTED');
  return { taskId, attemptId: prepared.activeAttemptId! };
}

/** The interval the last poll chose: next_poll_at − last_polled_at. */
async function pollIntervalOf(attemptId: string): Promise<number> {
  const [a] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
  assert.ok(a?.last_polled_at && a.next_poll_at, 'the poll recorded when it ran and when the next is due');
  return a.next_poll_at.getTime() - a.last_polled_at.getTime();
}

const callbackJob = (n: number): ProviderJob => ({
  jobId: `health-${n}`,
  state: 'running',
  rawStatus: 'processing',
  updatedAt: new Date(),
  outputUrl: null,
  error: null,
  correlationToken: null,
  metrics: null,
});

/** A callback of `provider` in the inbox, received `agoMs` ago. */
async function callbackReceived(provider: string, agoMs: number, source: 'callback' | 'poll' = 'callback'): Promise<void> {
  seq += 1;
  const id = await recordProviderEvent(w.tdb.database.db, {
    provider,
    job: callbackJob(seq),
    providerEventId: `health-${seq}`,
    source,
    attemptId: null,
    taskId: null,
    receivedRegion: w.config.REGION,
    signatureValid: true,
    raw: {},
    processError: 'test row',
  });
  await w.tdb.database.db
    .update(callbackInbox)
    .set({ received_at: sql`now() - make_interval(secs => ${agoMs / 1000})` })
    .where(eq(callbackInbox.inbox_id, id!));
}

describe('callback health is read from the inbox', () => {
  test('a provider is healthy only while one of its callbacks arrived within the window; polls and other providers do not count', async () => {
    const health = () => createCallbackHealth({ db: w.tdb.database.db, clock: { now: () => new Date() }, windowMs: 60_000 });
    assert.equal(await health().healthy('kling'), false, 'no callbacks at all');
    await callbackReceived('kling', 120_000);
    await callbackReceived('kling', 1_000, 'poll');
    await callbackReceived('fal', 1_000);
    assert.equal(await health().healthy('kling'), false, 'only an old callback, a poll, and another provider');
    await callbackReceived('kling', 5_000);
    assert.equal(await health().healthy('kling'), true);
  });

  test('the answer is cached per provider for cacheMs, then read again', async () => {
    let now = Date.now();
    const health = createCallbackHealth({ db: w.tdb.database.db, clock: { now: () => new Date(now) }, windowMs: 60_000, cacheMs: 10_000 });
    assert.equal(await health.healthy('runway'), false);
    await callbackReceived('runway', 0);
    assert.equal(await health.healthy('runway'), false, 'cached');
    now += 10_001;
    assert.equal(await health.healthy('runway'), true, 'read again after cacheMs');
  });
});

describe('the poll activity paces the next poll by phase and callback health', () => {
  // Order matters: the first test runs before any replicate callback is in the inbox.
  test('callbacks not healthy: a waiting poll is due after the initial interval, ±20 % jitter', async () => {
    const acts = activities();
    const { taskId, attemptId } = await submittedTask(acts);
    await run(acts, 'pollProvider', taskId);
    const ms = await pollIntervalOf(attemptId);
    assert.ok(ms >= INITIAL_MS * 0.8 && ms <= INITIAL_MS * 1.2, `${ms} ms`);
  });

  test('callbacks healthy: a waiting poll is stretched by the factor; a cancelling poll is not', async () => {
    await callbackReceived('replicate', 1_000);
    const acts = activities();
    const waiting = await submittedTask(acts);
    await run(acts, 'pollProvider', waiting.taskId);
    const stretched = await pollIntervalOf(waiting.attemptId);
    assert.ok(stretched >= INITIAL_MS * FACTOR * 0.8 && stretched <= INITIAL_MS * FACTOR * 1.2, `waiting: ${stretched} ms`);
    // Growth continues from the stretched interval, up to the stretched cap.
    await run(acts, 'pollProvider', waiting.taskId);
    const grown = await pollIntervalOf(waiting.attemptId);
    assert.ok(grown >= Math.min(stretched * 2, MAX_MS * FACTOR) * 0.8 && grown <= MAX_MS * FACTOR, `waiting, second poll: ${grown} ms`);

    const cancelling = await submittedTask(acts);
    assert.equal((await cancelTask(w.tdb.database.db, w.token, w.tenantId, cancelling.taskId)).status, 'CANCEL_REQUESTED');
    await run(acts, 'pollProvider', cancelling.taskId);
    const plain = await pollIntervalOf(cancelling.attemptId);
    assert.ok(plain >= INITIAL_MS * 0.8 && plain <= INITIAL_MS * 1.2, `cancelling: ${plain} ms`);
  });
});

describe('polls are paced by demand: never sooner than the quota lets every waiting job be read in turn', () => {
  const RATE = 0.5; // replicate's quota: one read every 2 s (its poll queue's rate is lower still: domain/poll-quota.ts)
  const SHARE = 0.5;
  const slowConfig = () => ({ ...w.config, POLL_QUEUE_RATES: [`replicate=${RATE}`], POLL_QUOTA_SHARE: SHARE });
  const slowActivities = (): TaskActivities =>
    createTaskActivities(testActivityDeps(slowConfig(), { db: w.tdb.database, storage: buildStorage(w.config), providers: buildProviders(w.config) }));

  /** The jobs the wait loops poll on `provider`, from the attempt facts. */
  async function waitingOn(provider: string): Promise<number> {
    const [row] = await w.tdb.database.db
      .select({ n: sql<number>`count(*)::int` })
      .from(taskAttempt)
      .where(sql`${taskAttempt.provider} = ${provider} AND ${taskAttempt.submit_state} IN ('SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN')`);
    return row!.n;
  }

  test('with more jobs waiting than the quota share can visit, the next poll is waiting / (rate × share) away, ±10 %', async () => {
    const acts = slowActivities();
    const { taskId, attemptId } = await submittedTask(acts);
    await submittedTask(acts);
    const waiting = await waitingOn('replicate');
    assert.ok(waiting >= 2, `${waiting} waiting`);
    await run(acts, 'pollProvider', taskId);
    const ms = await pollIntervalOf(attemptId);
    const floor = (waiting / (pollQueueRate(RATE, w.config.POLL_QUEUE_PARTITIONS) * SHARE)) * 1000;
    assert.ok(floor > MAX_MS * FACTOR, 'the floor is past every cap, so only the demand can explain the interval');
    assert.ok(ms >= floor * 0.9 && ms <= floor * 1.1, `${ms} ms against a floor of ${floor} ms for ${waiting} jobs`);
  });

  test('a provider whose quota covers its jobs keeps the plain pace', async () => {
    // The default config: replicate's declared 10 reads/s at a share of 0.8 visits 8 jobs a second.
    const acts = activities();
    const { taskId, attemptId } = await submittedTask(acts);
    assert.ok((await waitingOn('replicate')) < 8);
    await run(acts, 'pollProvider', taskId);
    assert.ok((await pollIntervalOf(attemptId)) <= MAX_MS * FACTOR * 1.2);
  });

  test('the floor follows the jobs: it drops once they stop waiting (read again after cacheMs)', async () => {
    let now = Date.now();
    const demand = createPollDemand({ db: w.tdb.database.db, clock: { now: () => new Date(now) }, rateOf: () => RATE, share: SHARE, cacheMs: 5_000 });
    const before = await demand.floorMs('replicate');
    assert.equal(before, demandFloorMs(await waitingOn('replicate'), RATE, SHARE));
    assert.ok(before > 0);
    await w.tdb.database.db
      .update(taskAttempt)
      .set({ submit_state: 'SUCCEEDED' })
      .where(sql`${taskAttempt.provider} = 'replicate' AND ${taskAttempt.submit_state} IN ('SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN')`);
    assert.equal(await demand.floorMs('replicate'), before, 'cached');
    now += 5_001;
    assert.equal(await demand.floorMs('replicate'), 0, 'nothing waits: no floor');
    assert.equal(
      await createPollDemand({ db: w.tdb.database.db, clock: { now: () => new Date(now) }, rateOf: () => undefined, share: SHARE }).floorMs('replicate'),
      0,
      'no quota: no floor',
    );
  });
});
