// The breaker, the operator's switch and the bulkhead at the submit claim, against real
// Postgres and the simulator: a provider that may not be called is not called, and the
// attempt waits in PREPARED.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { eq, inArray } from 'drizzle-orm';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { breakerVerdict, type Admission, type ProviderGuard } from '../../activities/provider-guard';
import { inFlightByProvider } from '../../db/provider-control';
import { Registry } from 'prom-client';
import { registerResilienceGauges } from '../../observability/metrics';
import { createTask, testActivityDeps, testProviderGuard } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import { recordProviderEvent } from '../../db/inbox';
import { assertModeAllows, setMode } from '../../db/modes';
import type { Tx } from '../../db/client';
import { providerControl, slotWait, taskAttempt } from '../../db/schema';
import { takeSlot, type SlotRequest } from '../../db/slot-queue';
import { REPLICATE_CAPABILITIES } from '../../providers/replicate';
import { createTestDatabase, createTestTenant, startSimulator, testConfig, type RunningSimulator, type TestDatabase } from '../support/stack';

let sim: RunningSimulator;
let tdb: TestDatabase;
let acts: TaskActivities;
let tenantId: string;
let config: ReturnType<typeof testConfig>;

before(async () => {
  sim = await startSimulator(testConfig(), { generationMs: 60_000 });
  config = testConfig({ PROVIDER_REPLICATE_BASE_URL: `${sim.baseUrl}/replicate` });
  tdb = await createTestDatabase(config);
  acts = createTaskActivities(testActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) }));
  ({ tenantId } = await createTestTenant(tdb.database, config, '100000'));
});
after(async () => {
  await sim?.close();
  await tdb?.drop();
});
beforeEach(async () => {
  await tdb.database.db.delete(providerControl);
});

const run = <K extends keyof TaskActivities>(name: K, ...args: Parameters<TaskActivities[K]>) =>
  new MockActivityEnvironment().run(acts[name] as never, ...(args as unknown as never[])) as ReturnType<TaskActivities[K]>;

let seq = 0;
async function prepared(): Promise<{ taskId: string; attemptId: string }> {
  seq += 1;
  const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
  const { task } = await createTask(tdb.database.db, token, {
    tenantId,
    idempotencyKey: `guard-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `guard ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  await run('dispatchTask', task.task_id);
  const facts = await run('prepareAttempt', task.task_id);
  return { taskId: task.task_id, attemptId: facts.activeAttemptId! };
}

const isUnavailable = (err: unknown) => err instanceof ApplicationFailure && err.type === 'ProviderUnavailable';
const IN_FLIGHT = ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN'] as const;
/** Jobs left in flight by earlier tests count against the bulkhead: end them. */
const freeInFlight = async () => {
  await tdb.database.db.delete(slotWait);
  await tdb.database.db
    .update(taskAttempt)
    .set({ submit_state: 'SUCCEEDED' })
    .where(inArray(taskAttempt.submit_state, [...IN_FLIGHT]));
};

class Waiting extends Error {}
/** What submitAttempt asks the slot queue for this attempt (no tenant caps, FIFO). */
async function slotRequest(tx: Tx, attemptId: string, admission: Admission): Promise<SlotRequest> {
  const [a] = await tx.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
  return {
    attemptId,
    taskId: a!.task_id,
    provider: a!.provider,
    tenantId,
    priority: 0,
    ceiling: admission.ceiling,
    policy: { mode: 'fifo', agingMs: 0 },
    grantTtlMs: 60_000,
    tenantDefaults: { perProvider: null, total: null, weight: 1 },
    locked: admission.locked,
  };
}

/** The claim as submitAttempt makes it: the mode check, the guard, PREPARED → SUBMITTING, in one transaction. */
async function claimWith(guard: ProviderGuard, attemptId: string): Promise<boolean> {
  try {
    await tdb.database.db.transaction(async (tx) => {
      await assertModeAllows(tx, config.FENCE_SCOPE, 'submit');
      const admission = await guard.admit(tx, 'replicate', REPLICATE_CAPABILITIES);
      const slot = await takeSlot(tx, await slotRequest(tx, attemptId, admission), new Date());
      if (slot.kind === 'waiting') {
        guard.queued('replicate', admission);
        throw new Waiting();
      }
      await tx.update(taskAttempt).set({ submit_state: 'SUBMITTING' }).where(eq(taskAttempt.attempt_id, attemptId));
    });
    return true;
  } catch (err) {
    assert.ok(err instanceof Waiting, String(err));
    // A waiter's row would count as a grant later: this helper claims or gives up at once.
    await tdb.database.db.delete(slotWait).where(eq(slotWait.attempt_id, attemptId));
    return false;
  }
}
async function claimAll(guard: ProviderGuard, attempts: { attemptId: string }[]): Promise<number> {
  let n = 0;
  for (const a of attempts) if (await claimWith(guard, a.attemptId)) n += 1;
  return n;
}

test('forced open by an operator: no call reaches the provider and the attempt stays PREPARED; closing the switch lets it go', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', breaker_force: 'open', reason: 'incident 42' });
  const { taskId, attemptId } = await prepared();
  await assert.rejects(run('submitAttempt', taskId), isUnavailable);
  const [a] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
  assert.equal(a?.submit_state, 'PREPARED');
  assert.equal(sim.jobsFor(attemptId), 0);
  await tdb.database.db.update(providerControl).set({ breaker_force: null }).where(eq(providerControl.provider, 'replicate'));
  assert.equal((await run('submitAttempt', taskId)).facts.status, 'SUBMITTED');
  assert.equal(sim.jobsFor(attemptId), 1);
});

test('the bulkhead holds under 10× overload: with 2 slots, 20 concurrent submits put exactly 2 jobs at the provider', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 2 });
  // Jobs already in flight from earlier tests count too: free them first.
  await tdb.database.db
    .update(taskAttempt)
    .set({ submit_state: 'SUCCEEDED' })
    .where(inArray(taskAttempt.submit_state, ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN']));
  const tasks = await Promise.all(Array.from({ length: 20 }, () => prepared()));
  const results = await Promise.all(tasks.map((t) => run('submitAttempt', t.taskId)));
  assert.equal(results.filter((r) => r.facts.status === 'SUBMITTED').length, 2);
  const waiting = results.filter((r) => r.facts.status !== 'SUBMITTED');
  assert.ok(
    waiting.every((r) => r.facts.status === 'SUBMITTING' && (r.waitMs ?? 0) > 0),
    'the others wait in the queue, asleep',
  );
  assert.equal((await tdb.database.db.select().from(slotWait)).length, 18, 'each waiter is a slot_wait fact');
  const jobs = tasks.reduce((n, t) => n + sim.jobsFor(t.attemptId), 0);
  assert.equal(jobs, 2);
  const inFlight = await tdb.database.db
    .select()
    .from(taskAttempt)
    .where(inArray(taskAttempt.submit_state, ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN']));
  assert.equal(inFlight.length, 2, 'slots counted from facts equal the attempts really in flight');
  await tdb.database.db.delete(slotWait);
});

test('a job the provider reported finished frees its slot while the report waits in the inbox', async () => {
  await freeInFlight();
  await tdb.database.db
    .insert(providerControl)
    .values({ provider: 'replicate', max_in_flight: 1 })
    .onConflictDoUpdate({ target: providerControl.provider, set: { max_in_flight: 1 } });
  const [a, b] = [await prepared(), await prepared()];
  assert.equal((await run('submitAttempt', a.taskId)).facts.status, 'SUBMITTED');
  assert.ok(((await run('submitAttempt', b.taskId)).waitMs ?? 0) > 0, 'the one slot is taken: b waits');
  const [attempt] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, a.attemptId));
  await recordProviderEvent(tdb.database.db, {
    provider: 'replicate',
    job: {
      jobId: attempt!.provider_job_id!,
      state: 'succeeded',
      rawStatus: 'succeeded',
      updatedAt: new Date(),
      outputUrl: null,
      error: null,
      correlationToken: null,
      metrics: null,
    },
    providerEventId: `evt-${a.attemptId}`,
    source: 'callback',
    attemptId: a.attemptId,
    taskId: a.taskId,
    receivedRegion: config.REGION,
    signatureValid: true,
    raw: {},
  });
  assert.equal((await inFlightByProvider(tdb.database.db))['replicate'] ?? 0, 0, 'not counted: it no longer runs at the provider');
  assert.equal((await run('submitAttempt', b.taskId)).facts.status, 'SUBMITTED', 'the slot went to the next attempt');
  await tdb.database.db.update(providerControl).set({ max_in_flight: null }).where(eq(providerControl.provider, 'replicate'));
});

test('the breaker opens after provider failures and refuses until its cool-down; our own 4xx does not count against the provider', async () => {
  let now = 1_000_000;
  const guard = testProviderGuard({ now: () => now, breaker: { minimumRequests: 4, failureRateThreshold: 0.5, openMs: 10_000 } });
  const admit = () => tdb.database.db.transaction((tx) => guard.admit(tx, 'replicate', REPLICATE_CAPABILITIES).then((a) => a.ticket));
  for (let i = 0; i < 4; i += 1) guard.report('replicate', await admit(), { kind: 'unknown', reason: 'timeout' });
  await assert.rejects(admit(), isUnavailable);
  now += 10_001;
  const probe = await admit();
  assert.equal(probe.probe, true, 'after the cool-down a probe goes through (half-open)');
  assert.equal(breakerVerdict({ kind: 'rejected', retryable: false, status: 400, retryAfterMs: null, reason: 'bad input' }), 'success');
  assert.equal(breakerVerdict({ kind: 'rejected', retryable: true, status: 429, retryAfterMs: 1000, reason: 'rate' }), 'failure');
});

test('a probe slot taken by a claim that did not stand is given back: the next claim probes instead of waiting', async () => {
  let now = 1_000_000;
  const guard = testProviderGuard({ now: () => now, breaker: { minimumRequests: 4, failureRateThreshold: 0.5, openMs: 10_000, halfOpenMaxProbes: 1 } });
  const admit = () => tdb.database.db.transaction((tx) => guard.admit(tx, 'replicate', REPLICATE_CAPABILITIES).then((a) => a.ticket));
  for (let i = 0; i < 4; i += 1) guard.report('replicate', await admit(), { kind: 'unknown', reason: 'timeout' });
  now += 10_001;
  const probe = await admit();
  assert.equal(probe.probe, true);
  await assert.rejects(admit(), (err) => isUnavailable(err) && /probes-busy/.test((err as Error).message), 'the one probe slot is taken');
  guard.release('replicate', probe);
  const again = await admit();
  assert.equal(again.probe, true, 'released: another claim may probe at once');
});

test('the retry budget bounds retry attempts to a share of first attempts; over budget a retry waits instead of calling', async () => {
  const now = 5_000_000;
  const guard = testProviderGuard({ now: () => now, retryBudget: { ratio: 0.1, minRetriesPerSecond: 0, windowMs: 10_000 } });
  const admit = (attemptNo: number) =>
    tdb.database.db.transaction((tx) => guard.admit(tx, 'replicate', REPLICATE_CAPABILITIES, attemptNo).then((a) => a.ticket));
  await tdb.database.db
    .insert(providerControl)
    .values({ provider: 'replicate', max_in_flight: 1_000_000 })
    .onConflictDoUpdate({ target: providerControl.provider, set: { max_in_flight: 1_000_000 } });
  for (let i = 0; i < 30; i += 1)
    guard.report('replicate', await admit(1), {
      kind: 'accepted',
      job: { jobId: `j${i}`, state: 'queued', rawStatus: 'starting', updatedAt: null, outputUrl: null, error: null, correlationToken: null, metrics: null },
    });
  let allowed = 0;
  for (let i = 0; i < 10; i += 1) {
    try {
      await admit(2);
      allowed += 1;
    } catch (err) {
      assert.ok(isUnavailable(err));
    }
  }
  assert.equal(allowed, 3, '30 first attempts earn 3 retries at 10 %');
});

test('breaker state and retry budget are exported as metrics for operators', async () => {
  const guard = testProviderGuard({ now: () => 9_000_000, breaker: { minimumRequests: 2, failureRateThreshold: 0.5, openMs: 60_000 } });
  const admit = () => tdb.database.db.transaction((tx) => guard.admit(tx, 'metrics-provider', REPLICATE_CAPABILITIES).then((a) => a.ticket));
  for (let i = 0; i < 2; i += 1) guard.report('metrics-provider', await admit(), { kind: 'unknown', reason: 'timeout' });
  const registry = new Registry();
  registerResilienceGauges(
    registry,
    () => guard.snapshots(),
    () => inFlightByProvider(tdb.database.db),
  );
  await assert.rejects(admit(), isUnavailable);
  const text = await registry.metrics();
  assert.match(text, /vidorch_breaker_state\{provider="metrics-provider",state="open",forced="no"\} 1/);
  assert.match(text, /vidorch_breaker_state\{provider="metrics-provider",state="closed",forced="no"\} 0/);
  assert.match(text, /vidorch_breaker_failure_rate\{provider="metrics-provider"\} 1/);
  assert.match(text, /vidorch_retry_budget_available\{provider="metrics-provider"\} \d+/);
  assert.match(text, /vidorch_provider_refusals_total\{provider="metrics-provider",guard="breaker",reason="open"\} 1/);
  assert.match(text, /vidorch_provider_calls_total\{provider="metrics-provider",verdict="failure"\} 2/, 'the two reported calls, both failures');
  assert.match(text, /vidorch_bulkhead_limit\{provider="metrics-provider",kind="configured"\} 50/);
  assert.match(text, /vidorch_bulkhead_limit\{provider="metrics-provider",kind="effective"\} 10/, 'ramping: 20 % of 50 right after the start');
  assert.match(text, /# TYPE vidorch_bulkhead_in_flight gauge/);
});

test('after a rebuild the bulkhead ramps up: a fresh guard admits 2 of 10, then 6, then 10 over a minute, counted from the facts', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 10 });
  await freeInFlight();
  let now = 20_000_000;
  const guard = testProviderGuard({ now: () => now, bulkheadRamp: { startShare: 0.2, durationMs: 60_000, minSlots: 1 } });
  const tasks = await Promise.all(Array.from({ length: 12 }, () => prepared()));
  const waiting = async () => {
    const rows = await tdb.database.db
      .select()
      .from(taskAttempt)
      .where(
        inArray(
          taskAttempt.attempt_id,
          tasks.map((t) => t.attemptId),
        ),
      );
    return tasks.filter((t) => rows.find((r) => r.attempt_id === t.attemptId)?.submit_state === 'PREPARED');
  };
  assert.equal(await claimAll(guard, await waiting()), 2, 'at the guard start: 20 % of the limit');
  assert.equal(await claimAll(guard, await waiting()), 0, 'and no more however often it is asked');
  now += 30_000;
  assert.equal(await claimAll(guard, await waiting()), 4, 'half way: 60 %, so 6 in flight');
  now += 30_000;
  assert.equal(await claimAll(guard, await waiting()), 4, 'after the ramp: the full limit of 10');
  assert.equal((await waiting()).length, 2);
  assert.equal((await inFlightByProvider(tdb.database.db)).replicate, 10, 'in flight by facts = the limit, never more');
  const refusals = guard.snapshots().replicate?.refusals ?? {};
  assert.equal(refusals['bulkhead/ramp'], 10 + 10 + 6, 'refused while ramping (the ceiling under the limit)');
  assert.equal(refusals['bulkhead/full'], 2, 'refused at the full limit');
});

test("when a provider's breaker closes again after being open, the bulkhead ramps up again from its floor", async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 10 });
  await freeInFlight();
  let now = 30_000_000;
  const guard = testProviderGuard({
    now: () => now,
    breaker: { minimumRequests: 2, openMs: 1_000, halfOpenMaxProbes: 1, halfOpenSuccesses: 1, recoveryMs: 0 },
    bulkheadRamp: { startShare: 0.2, durationMs: 60_000, minSlots: 1 },
  });
  const admit = () => tdb.database.db.transaction((tx) => guard.admit(tx, 'replicate', REPLICATE_CAPABILITIES).then((a) => a.ticket));
  now += 60_000; // past the start-up ramp
  assert.equal(guard.effectiveLimit('replicate', 10), 10);
  for (let i = 0; i < 2; i += 1) guard.report('replicate', await admit(), { kind: 'unknown', reason: 'timeout' });
  assert.equal(guard.breaker('replicate').state, 'open');
  now += 1_000;
  const probe = await admit();
  guard.report('replicate', probe, { kind: 'rejected', retryable: false, status: 422, retryAfterMs: null, reason: 'bad input' });
  assert.equal(guard.breaker('replicate').state, 'closed');
  const tasks = await Promise.all(Array.from({ length: 5 }, () => prepared()));
  assert.equal(await claimAll(guard, tasks), 2, 'closed again: back to 20 % of the limit');
  assert.deepEqual(
    { limit: guard.snapshots().replicate?.bulkhead?.limit, effective: guard.snapshots().replicate?.bulkhead?.effectiveLimit },
    { limit: 10, effective: 2 },
  );
});

test('DEGRADED_PROVIDER closes unhealthy providers at the claim: a lower trip rate and no half-open probes; healthy providers still go, and NORMAL probes again', async () => {
  await freeInFlight();
  let now = 40_000_000;
  const guard = testProviderGuard({ now: () => now, breaker: { minimumRequests: 4, openMs: 10_000 }, degradedFailureRate: 0.2 });
  const admitIn = (provider: string) =>
    tdb.database.db.transaction(async (tx) => {
      await assertModeAllows(tx, config.FENCE_SCOPE, 'submit');
      return (await guard.admit(tx, provider, REPLICATE_CAPABILITIES)).ticket;
    });
  const ok = {
    kind: 'accepted',
    job: { jobId: 'j', state: 'queued', rawStatus: 'starting', updatedAt: null, outputUrl: null, error: null, correlationToken: null, metrics: null },
  } as const;
  for (const outcome of [ok, ok, ok, { kind: 'unknown', reason: 'timeout' } as const]) guard.report('flaky', await admitIn('flaky'), outcome);
  assert.equal(guard.breaker('flaky').state, 'closed', '25 % failures: under NORMAL the breaker stays closed');
  await setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode: 'DEGRADED_PROVIDER', actor: 'test', reason: 'provider incident' });
  try {
    await assert.rejects(admitIn('flaky'), (err) => isUnavailable(err) && /flaky circuit not healthy/.test((err as Error).message));
    assert.ok((await admitIn('healthy')).generation >= 0, 'a healthy provider is admitted in DEGRADED_PROVIDER');
    now += 10_001;
    await assert.rejects(admitIn('flaky'), isUnavailable, 'no half-open probe while the mode holds');
  } finally {
    await setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode: 'NORMAL', actor: 'test', reason: 'incident over' });
  }
  const probe = await admitIn('flaky');
  assert.equal(probe.probe, true, 'back in NORMAL the breaker probes the provider again');
  assert.equal(guard.snapshots().flaky?.refusals['breaker/strict'], 2);
});
