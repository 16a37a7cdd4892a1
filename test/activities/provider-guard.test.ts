// The breaker, the operator's switch and the bulkhead at the submit claim, against real
// Postgres and the simulator: a provider that may not be called is not called, and the
// attempt waits in PREPARED.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { eq, inArray } from 'drizzle-orm';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { ProviderGuard, breakerVerdict, resilienceSnapshots } from '../../activities/provider-guard';
import { Registry } from 'prom-client';
import { registerResilienceGauges } from '../../observability/metrics';
import { createTask } from '../../api/tasks.service';
import { buildActivityDeps, buildProviders, buildStorage } from '../../config/services';
import { providerControl, taskAttempt } from '../../db/schema';
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
  acts = createTaskActivities(buildActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) }));
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
    body: { model: 'minimax/video-01', prompt: `guard ${seq}`, duration_seconds: 1, resolution: '480p', priority: 0 },
  });
  await run('dispatchTask', task.task_id);
  const facts = await run('prepareAttempt', task.task_id);
  return { taskId: task.task_id, attemptId: facts.activeAttemptId! };
}

const isUnavailable = (err: unknown) => err instanceof ApplicationFailure && err.type === 'ProviderUnavailable';

test('forced open by an operator: no call reaches the provider and the attempt stays PREPARED; closing the switch lets it go', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', breaker_force: 'open', reason: 'incident 42' });
  const { taskId, attemptId } = await prepared();
  await assert.rejects(run('submitAttempt', taskId), isUnavailable);
  const [a] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
  assert.equal(a?.submit_state, 'PREPARED');
  assert.equal(sim.sim.tokenCount(attemptId), 0);
  await tdb.database.db.update(providerControl).set({ breaker_force: null }).where(eq(providerControl.provider, 'replicate'));
  assert.equal((await run('submitAttempt', taskId)).facts.status, 'SUBMITTED');
  assert.equal(sim.sim.tokenCount(attemptId), 1);
});

test('the bulkhead holds under 10× overload: with 2 slots, 20 concurrent submits put exactly 2 jobs at the provider', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 2 });
  // Jobs already in flight from earlier tests count too: free them first.
  await tdb.database.db.update(taskAttempt).set({ submit_state: 'SUCCEEDED' }).where(inArray(taskAttempt.submit_state, ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN']));
  const tasks = await Promise.all(Array.from({ length: 20 }, () => prepared()));
  const results = await Promise.allSettled(tasks.map((t) => run('submitAttempt', t.taskId)));
  assert.equal(results.filter((r) => r.status === 'fulfilled').length, 2);
  assert.ok(results.filter((r) => r.status === 'rejected').every((r) => isUnavailable((r as PromiseRejectedResult).reason)));
  const jobs = tasks.reduce((n, t) => n + sim.sim.tokenCount(t.attemptId), 0);
  assert.equal(jobs, 2);
  const inFlight = await tdb.database.db.select().from(taskAttempt).where(inArray(taskAttempt.submit_state, ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN']));
  assert.equal(inFlight.length, 2, 'slots counted from facts equal the attempts really in flight');
});

test('the breaker opens after provider failures and refuses until its cool-down; our own 4xx does not count against the provider', async () => {
  let now = 1_000_000;
  const guard = new ProviderGuard({ now: () => now, breaker: { minimumRequests: 4, failureRateThreshold: 0.5, openMs: 10_000 } });
  const admit = () => tdb.database.db.transaction((tx) => guard.admit(tx, 'replicate', REPLICATE_CAPABILITIES));
  for (let i = 0; i < 4; i += 1) guard.report('replicate', await admit(), { kind: 'unknown', reason: 'timeout' });
  await assert.rejects(admit(), isUnavailable);
  now += 10_001;
  const probe = await admit();
  assert.equal(probe.probe, true, 'after the cool-down a probe goes through (half-open)');
  assert.equal(breakerVerdict({ kind: 'rejected', retryable: false, status: 400, retryAfterMs: null, reason: 'bad input' }), 'success');
  assert.equal(breakerVerdict({ kind: 'rejected', retryable: true, status: 429, retryAfterMs: 1000, reason: 'rate' }), 'failure');
});

test('the retry budget bounds retry attempts to a share of first attempts; over budget a retry waits instead of calling', async () => {
  const now = 5_000_000;
  const guard = new ProviderGuard({ now: () => now, retryBudget: { ratio: 0.1, minRetriesPerSecond: 0, windowMs: 10_000 } });
  const admit = (attemptNo: number) => tdb.database.db.transaction((tx) => guard.admit(tx, 'replicate', REPLICATE_CAPABILITIES, attemptNo));
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1_000_000 }).onConflictDoUpdate({ target: providerControl.provider, set: { max_in_flight: 1_000_000 } });
  for (let i = 0; i < 30; i += 1) guard.report('replicate', await admit(1), { kind: 'accepted', job: { jobId: `j${i}`, state: 'queued', rawStatus: 'starting', updatedAt: null, outputUrl: null, error: null, correlationToken: null, metrics: null } });
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
  const guard = new ProviderGuard({ now: () => 9_000_000, breaker: { minimumRequests: 2, failureRateThreshold: 0.5, openMs: 60_000 } });
  const admit = () => tdb.database.db.transaction((tx) => guard.admit(tx, 'metrics-provider', REPLICATE_CAPABILITIES));
  for (let i = 0; i < 2; i += 1) guard.report('metrics-provider', await admit(), { kind: 'unknown', reason: 'timeout' });
  const registry = new Registry();
  registerResilienceGauges(registry, resilienceSnapshots);
  const text = await registry.metrics();
  assert.match(text, /vidorch_breaker_state\{provider="metrics-provider",state="open",forced="no"\} 1/);
  assert.match(text, /vidorch_breaker_state\{provider="metrics-provider",state="closed",forced="no"\} 0/);
  assert.match(text, /vidorch_breaker_failure_rate\{provider="metrics-provider"\} 1/);
  assert.match(text, /vidorch_retry_budget_available\{provider="metrics-provider"\} \d+/);
});
