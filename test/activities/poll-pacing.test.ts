// The poll interval by phase, slower while the provider's callbacks are healthy, as the poll
// activity writes it into task_attempt.next_poll_at (MockActivityEnvironment against real
// Postgres and the provider simulator), and the callback-health fact it is decided on.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { eq, sql } from 'drizzle-orm';
import { createCallbackHealth } from '../../activities/callback-health';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { cancelTask, createTask } from '../../api/tasks.service';
import { buildActivityDeps, buildProviders, buildStorage } from '../../config/services';
import type { FenceToken } from '../../db/fence';
import { recordProviderEvent } from '../../db/inbox';
import { callbackInbox, taskAttempt } from '../../db/schema';
import type { ProviderJob } from '../../providers/types';
import { createTestDatabase, createTestTenant, startSimulator, testConfig, type RunningSimulator, type TestDatabase } from '../support/stack';

const INITIAL_MS = 1_000;
const MAX_MS = 4_000;
const FACTOR = 3;

let sim: RunningSimulator;
let tdb: TestDatabase;
let tenantId: string;
let config: ReturnType<typeof testConfig>;
const token = (): FenceToken => ({ scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 });

before(async () => {
  sim = await startSimulator(testConfig(), { generationMs: 60_000 });
  config = testConfig({
    PROVIDER_REPLICATE_BASE_URL: `${sim.baseUrl}/replicate`,
    POLL_INITIAL_MS: String(INITIAL_MS),
    POLL_MAX_MS: String(MAX_MS),
    POLL_HEALTHY_FACTOR: String(FACTOR),
    CALLBACK_HEALTHY_WINDOW_MS: '60000',
  });
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '1000'));
});
after(async () => {
  await sim?.close();
  await tdb?.drop();
});

/** Fresh activities: the callback-health cache of earlier ones does not carry over. */
const activities = (): TaskActivities =>
  createTaskActivities(buildActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) }));

function run<K extends keyof TaskActivities>(acts: TaskActivities, name: K, ...args: Parameters<TaskActivities[K]>): ReturnType<TaskActivities[K]> {
  return new MockActivityEnvironment().run(acts[name] as never, ...(args as unknown as never[])) as ReturnType<TaskActivities[K]>;
}

let seq = 0;
async function submittedTask(acts: TaskActivities): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const created = await createTask(tdb.database.db, token(), {
    tenantId,
    idempotencyKey: `pace-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `pace ${seq}`, duration_seconds: 2, resolution: '480p', priority: 0 },
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
  const [a] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
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
  const id = await recordProviderEvent(tdb.database.db, {
    provider, job: callbackJob(seq), providerEventId: `health-${seq}`, source, attemptId: null, taskId: null,
    receivedRegion: config.REGION, signatureValid: true, raw: {}, processError: 'test row',
  });
  await tdb.database.db
    .update(callbackInbox)
    .set({ received_at: sql`now() - make_interval(secs => ${agoMs / 1000})` })
    .where(eq(callbackInbox.inbox_id, id!));
}

describe('callback health is read from the inbox', () => {
  test('a provider is healthy only while one of its callbacks arrived within the window; polls and other providers do not count', async () => {
    const health = () => createCallbackHealth({ db: tdb.database.db, clock: { now: () => new Date() }, windowMs: 60_000 });
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
    const health = createCallbackHealth({ db: tdb.database.db, clock: { now: () => new Date(now) }, windowMs: 60_000, cacheMs: 10_000 });
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
    assert.equal((await cancelTask(tdb.database.db, token(), tenantId, cancelling.taskId)).status, 'CANCEL_REQUESTED');
    await run(acts, 'pollProvider', cancelling.taskId);
    const plain = await pollIntervalOf(cancelling.attemptId);
    assert.ok(plain >= INITIAL_MS * 0.8 && plain <= INITIAL_MS * 1.2, `cancelling: ${plain} ms`);
  });
});
