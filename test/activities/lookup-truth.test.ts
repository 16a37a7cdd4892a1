// The fingerprint lookup held to our own facts, and the bounded reads and cancels of a known job
// (activities/reconcile-lookup.ts, activities/apply-inbox.ts, db/job-evidence.ts,
// activities/provider-reads.ts, activities/cancel.ts), with MockActivityEnvironment against real
// Postgres and the strict provider simulator.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { and, eq, isNotNull } from 'drizzle-orm';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { createTask, testActivityDeps } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import { recordProviderEvent } from '../../db/inbox';
import { callbackInbox, generationTask, taskAttempt } from '../../db/schema';
import { classifyReadFailure, escalateAttempt } from '../../activities/provider-reads';
import { ProviderHttpError } from '../../providers/provider-http';
import type { ProviderAdapter, ProviderJob } from '../../providers/types';
import { freshActivities, runActivity as run, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  w = await startActivityWorld({ config: { UNKNOWN_PROOF_DELAY_MS: '0', UNKNOWN_OUTCOME_DEADLINE_MS: '600000', PROVIDER_READ_FAILURE_LIMIT: '5' } });
});
after(async () => w?.close());

const real = () => buildProviders(w.config)['replicate']!;
const activities = (replicate?: ProviderAdapter): TaskActivities => freshActivities(w, replicate ? { replicate } : {});

let seq = 0;
/** A Replicate task submitted with `fault` (null: a plain accepted submit); `prompt` makes twins. */
async function submitted(acts: TaskActivities, fault: 'accept_then_hang' | 'error_5xx_before_accept' | null, prompt = `truth ${++seq} ${Date.now()}`) {
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `truth-${++seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await run(acts, 'dispatchTask', taskId);
  const prepared = await run(acts, 'prepareAttempt', taskId);
  if (fault) w.sim.sim.setFaults({ submit: fault, submit_fault_count: 1, callbacks: 'off' });
  else w.sim.sim.setFaults({ callbacks: 'off' });
  const r = await run(acts, 'submitAttempt', taskId);
  w.sim.sim.clearFaults();
  return { taskId, attemptId: prepared.activeAttemptId!, status: r.facts.status };
}

const attempt = async (attemptId: string) => (await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId)))[0]!;
const statusOf = async (taskId: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId)))[0]!.status;
const fakeJob = (jobId: string): ProviderJob => ({
  jobId,
  state: 'running',
  rawStatus: 'processing',
  updatedAt: new Date(),
  outputUrl: null,
  error: null,
  correlationToken: null,
  metrics: null,
});
const ambiguousAdapter = (ids: string[]): ProviderAdapter => ({
  ...real(),
  findByCorrelationToken: () => Promise.resolve({ kind: 'ambiguous', jobs: ids.map(fakeJob), evidence: `${ids.length} jobs` }),
});

test('an inbox row whose job another attempt is bound to is set aside with the reason, not retried forever on the unique index', async () => {
  const acts = activities();
  const owner = await submitted(acts, null);
  const { taskId, attemptId } = await submitted(acts, 'error_5xx_before_accept');
  const ownersJob = (await attempt(owner.attemptId)).provider_job_id!;
  // A lookup that matched the owner's job just before the owner bound it (the race).
  await recordProviderEvent(w.tdb.database.db, {
    provider: 'replicate',
    job: { ...fakeJob(ownersJob), correlationToken: attemptId },
    providerEventId: null,
    source: 'reconcile',
    attemptId,
    taskId,
    receivedRegion: w.config.REGION,
    signatureValid: true,
    raw: { race: true },
  });
  const facts = await run(acts, 'applyInbox', taskId);
  assert.equal(facts.status, 'SUBMIT_UNKNOWN');
  assert.equal((await attempt(attemptId)).provider_job_id, null);
  const [row] = await w.tdb.database.db
    .select()
    .from(callbackInbox)
    .where(and(eq(callbackInbox.attempt_id, attemptId), isNotNull(callbackInbox.processed_at)));
  assert.match(row?.process_error ?? '', /bound to another attempt/);
});

test('"not-submitted" is refused after an ambiguous park: the candidate jobs are evidence', async () => {
  const acts = activities(ambiguousAdapter(['amb-1', 'amb-2']));
  const { taskId } = await submitted(acts, 'error_5xx_before_accept');
  assert.equal((await run(acts, 'pollProvider', taskId)).result, 'parked');
  assert.equal(await statusOf(taskId), 'MANUAL_REVIEW');
  await assert.rejects(
    run(acts, 'resolveReview', taskId, { kind: 'not-submitted', operator: 'ops-eve', reason: 'console shows nothing' }),
    /ambiguous lookup found job\(s\) amb-1, amb-2/,
  );
  assert.equal(await statusOf(taskId), 'MANUAL_REVIEW');
  await run(acts, 'resolveReview', taskId, { kind: 'fail', operator: 'ops-eve', reason: 'test cleanup' });
});

test('an ambiguous match while a twin with the same input is still submitting is unproven, not parked', async () => {
  const prompt = `twin submitting ${Date.now()}`;
  const acts = activities(ambiguousAdapter(['amb-3', 'amb-4']));
  const { taskId } = await submitted(acts, 'error_5xx_before_accept', prompt);
  // The twin's submit is in flight: SUBMITTING, started now, no outcome yet.
  const twin = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `twin-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  await run(acts, 'dispatchTask', twin.task.task_id);
  const prepared = await run(acts, 'prepareAttempt', twin.task.task_id);
  await w.tdb.database.db
    .update(taskAttempt)
    .set({ submit_state: 'SUBMITTING', submit_started_at: new Date() })
    .where(eq(taskAttempt.attempt_id, prepared.activeAttemptId!));
  assert.equal((await run(acts, 'pollProvider', taskId)).result, 'not-found');
  assert.equal(await statusOf(taskId), 'SUBMIT_UNKNOWN');
  await w.tdb.database.db.update(taskAttempt).set({ submit_state: 'FAILED' }).where(eq(taskAttempt.attempt_id, prepared.activeAttemptId!));
});

test('a twin left unresolved since yesterday does not block a later lookup of the same input', async () => {
  const prompt = `old twin ${Date.now()}`;
  const acts = activities();
  const old = await submitted(acts, 'error_5xx_before_accept', prompt);
  const yesterday = new Date(Date.now() - 86_400_000);
  await w.tdb.database.db.update(taskAttempt).set({ submit_started_at: yesterday, unknown_since: yesterday }).where(eq(taskAttempt.attempt_id, old.attemptId));
  const { taskId, attemptId, status } = await submitted(acts, 'accept_then_hang', prompt);
  assert.equal(status, 'SUBMIT_UNKNOWN');
  assert.equal((await run(acts, 'pollProvider', taskId)).result, 'recorded');
  await run(acts, 'applyInbox', taskId);
  assert.ok((await attempt(attemptId)).provider_job_id, 'the fingerprint match bound the job');
  assert.equal(w.sim.jobsFor(attemptId), 1);
  assert.equal((await attempt(old.attemptId)).provider_job_id, null);
});

test('transient read failures do not count toward the gone limit: four 503s then one 404 leave a healthy job polling', async () => {
  const answers = [503, 503, 503, 503, 404];
  const flaky: ProviderAdapter = {
    ...real(),
    getJob: () => {
      const status = answers.shift()!;
      return Promise.reject(new ProviderHttpError(`replicate answered ${status}`, status, status !== 404));
    },
  };
  const acts = activities(flaky);
  const { taskId, attemptId, status } = await submitted(activities(), null);
  assert.equal(status, 'SUBMITTED');
  for (let i = 0; i < 5; i++) assert.equal((await run(acts, 'pollProvider', taskId)).result, 'read-failed');
  assert.equal(await statusOf(taskId), 'SUBMITTED');
  assert.equal((await attempt(attemptId)).read_failures, 1);
});

test('a cancel that meets transient trouble is given up ({sent:false}) instead of blocking the workflow on retries', async () => {
  let calls = 0;
  const down: ProviderAdapter = { ...real(), cancel: () => Promise.reject(new ProviderHttpError(`replicate answered 503 (${++calls})`, 503, true)) };
  const acts = activities(down);
  const { taskId } = await submitted(activities(), null);
  await w.tdb.database.db.update(generationTask).set({ status: 'CANCEL_REQUESTED' }).where(eq(generationTask.task_id, taskId));
  assert.deepEqual(await run(acts, 'requestProviderCancel', taskId), { sent: false });
  assert.equal(calls, 3, 'a few tries, then given up');
  await w.tdb.database.db.update(generationTask).set({ status: 'FAILED' }).where(eq(generationTask.task_id, taskId));
});

test('a refusal without an HTTP status (Kling: HTTP 200 with a non-server business code) counts as refused, not transient forever', () => {
  assert.equal(classifyReadFailure(new ProviderHttpError('kling getJob k-1: code 1201: invalid parameter', null, false)).kind, 'refused');
  assert.equal(classifyReadFailure(new ProviderHttpError('kling getJob k-1: code 5000: server error', null, true)).kind, 'transient');
  assert.equal(classifyReadFailure(new ProviderHttpError('kling getJob k-1: not found', 404, false)).kind, 'gone');
});

test('a bounded-read park never parks a task whose provider success already waits in the inbox, nor one past the provider', async () => {
  const acts = activities();
  const deps = testActivityDeps(w.config, { db: w.tdb.database, storage: buildStorage(w.config), providers: buildProviders(w.config) });
  const { taskId, attemptId } = await submitted(acts, null);
  const jobId = (await attempt(attemptId)).provider_job_id!;
  await recordProviderEvent(w.tdb.database.db, {
    provider: 'replicate',
    job: { ...fakeJob(jobId), state: 'succeeded', rawStatus: 'succeeded', correlationToken: attemptId, outputUrl: `${w.sim.baseUrl}/replicate/files/x.mp4` },
    providerEventId: null,
    source: 'callback',
    attemptId,
    taskId,
    receivedRegion: w.config.REGION,
    signatureValid: true,
    raw: { done: true },
  });
  assert.equal(await escalateAttempt(deps, w.token, taskId, attemptId, { reason: 'test: past max run' }), false);
  assert.equal(await statusOf(taskId), 'SUBMITTED');
  assert.equal((await run(acts, 'applyInbox', taskId)).status, 'PROVIDER_SUCCEEDED');
  // A stale poll of the job after the success was applied: the task is past the provider.
  assert.equal(await escalateAttempt(deps, w.token, taskId, attemptId, { reason: 'test: stale poll' }), false);
  assert.equal(await statusOf(taskId), 'PROVIDER_SUCCEEDED');
});

test('bind-job starts the failed-read count again, so a task parked at the read limit is not re-parked by its next failed read', async () => {
  const acts = activities();
  const { taskId, attemptId } = await submitted(acts, null);
  const jobId = (await attempt(attemptId)).provider_job_id!;
  await w.tdb.database.db.update(taskAttempt).set({ read_failures: 5 }).where(eq(taskAttempt.attempt_id, attemptId));
  await run(acts, 'escalateTask', taskId, 'test: parked at the read limit');
  const facts = await run(acts, 'resolveReview', taskId, { kind: 'bind-job', operator: 'ops-eve', reason: 'job is fine in the console', providerJobId: jobId });
  assert.equal(facts.status, 'SUBMITTED');
  assert.equal((await attempt(attemptId)).read_failures, 0);
});

test('a lookup that never answers is given up after its budget: the poll returns and the deadline check runs', { timeout: 20_000 }, async () => {
  const stuck: ProviderAdapter = {
    ...real(),
    findByCorrelationToken: (q) => new Promise((_, reject) => q.signal?.addEventListener('abort', () => reject(new Error('lookup aborted')), { once: true })),
  };
  const budgeted = { ...w.config, RECONCILE_LOOKUP_BUDGET_MS: 300, UNKNOWN_OUTCOME_DEADLINE_MS: 0 };
  const acts = createTaskActivities(
    testActivityDeps(budgeted, { db: w.tdb.database, storage: buildStorage(budgeted), providers: { ...buildProviders(budgeted), replicate: stuck } }),
  );
  const { taskId } = await submitted(activities(), 'error_5xx_before_accept');
  assert.equal((await run(acts, 'pollProvider', taskId)).result, 'overdue');
});
