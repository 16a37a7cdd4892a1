// The region fence at the activity boundary: a write under a stale epoch is rejected by the
// database and surfaces as the typed, retryable FenceRejected failure (another worker of the
// active region takes the task over); a mode that forbids a step surfaces as ModePaused; the
// in-memory submit switch stops a fenced process before it claims an attempt.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { MockActivityEnvironment } from '@temporalio/testing';
import { eq, sql } from 'drizzle-orm';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { fenced, type TaskActivityDeps } from '../../activities/deps';
import { createTask, testActivityDeps } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import { FenceRejectedError, acquireFence, holdFence } from '../../db/fence';
import { setMode, switchActiveRegion } from '../../db/modes';
import { generationTask, regionWriteFence, taskAttempt, taskTransition } from '../../db/schema';
import { casTaskStatus, lockTask } from '../../db/tasks';
import { FailureType } from '../../domain/errors';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let tenantId: string;
let deps: TaskActivityDeps;
let acts: TaskActivities;

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '1000'));
  deps = testActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) });
  acts = createTaskActivities(deps);
});
after(async () => {
  await tdb?.drop();
});
beforeEach(async () => {
  await tdb.database.db
    .update(regionWriteFence)
    .set({ active_region: config.REGION, mode: 'NORMAL' })
    .where(eq(regionWriteFence.resource_scope, config.FENCE_SCOPE));
});

const run = <K extends keyof TaskActivities>(name: K, ...args: Parameters<TaskActivities[K]>) =>
  new MockActivityEnvironment().run(acts[name] as never, ...(args as unknown as never[])) as ReturnType<TaskActivities[K]>;

let seq = 0;
async function newTask(): Promise<string> {
  const { token } = await acquireFence(tdb.database.db, config.FENCE_SCOPE, config.REGION);
  const created = await createTask(tdb.database.db, token, {
    tenantId,
    idempotencyKey: `fence-${++seq}`,
    body: { model: 'minimax/video-01', prompt: 'fence', duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  return created.task.task_id;
}

const failover = (to: string) =>
  switchActiveRegion(tdb.database.db, {
    scope: config.FENCE_SCOPE,
    toRegion: to,
    incidentId: `INC-${to}-${++seq}`,
    operator: 'test',
    reason: 'test',
    replicationPosition: '0/0',
    acceptedRpoSeconds: 0,
    startedAt: new Date(),
  });

function assertFailure(err: unknown, type: string, retryable: boolean): true {
  assert.ok(err instanceof ApplicationFailure, `expected an ApplicationFailure, got ${String(err)}`);
  assert.equal(err.type, type);
  assert.equal(err.nonRetryable, !retryable);
  return true;
}

test('a write carrying a stale epoch is rejected even when its region is active again, and fenced() raises FenceRejected (retryable)', async () => {
  const taskId = await newTask();
  await assert.rejects(
    fenced(deps, async (token) => {
      // The unit of work holds an epoch-1 token; meanwhile the region fails over and back.
      await failover('region-b');
      await failover(config.REGION);
      await tdb.database.db.transaction(async (tx) => {
        await holdFence(tx, token);
        const task = await lockTask(tx, taskId);
        await casTaskStatus(tx, token, {
          taskId,
          from: 'QUEUED',
          expectedVersion: task!.status_version,
          to: 'DISPATCHING',
          sourceEvent: 'test',
          actor: 'test',
        });
      });
    }),
    (err) => {
      assertFailure(err, FailureType.FenceRejected, true);
      assert.ok((err as ApplicationFailure).cause instanceof FenceRejectedError);
      assert.match((err as Error).message, /does not own writes/);
      return true;
    },
  );
  const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
  assert.equal(task!.status, 'QUEUED', 'nothing was written');
  const transitions = await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId));
  assert.equal(transitions.length, 1, 'only the creation');
});

test('the CAS itself refuses a stale epoch: a task last written under epoch N is not overwritten by a token of epoch N-1', async () => {
  const taskId = await newTask();
  const { token: old } = await acquireFence(tdb.database.db, config.FENCE_SCOPE, config.REGION);
  await tdb.database.db.execute(sql`UPDATE generation_task SET write_epoch = ${old.epoch + 1} WHERE task_id = ${taskId}`);
  const version = await tdb.database.db.transaction(async (tx) => {
    const task = await lockTask(tx, taskId);
    return casTaskStatus(tx, old, { taskId, from: 'QUEUED', expectedVersion: task!.status_version, to: 'DISPATCHING', sourceEvent: 'test', actor: 'test' });
  });
  assert.equal(version, null);
});

test('an activity of a region that is not active fails with FenceRejected and changes nothing', async () => {
  const taskId = await newTask();
  await failover('region-b');
  await assert.rejects(run('dispatchTask', taskId), (err) => assertFailure(err, FailureType.FenceRejected, true));
  const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
  assert.equal(task!.status, 'QUEUED');
});

test('READ_ONLY pauses fact steps with ModePaused (retryable, with a short next-retry delay); QUEUE_ONLY pauses only the new attempt', async () => {
  const taskId = await newTask();
  await setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode: 'READ_ONLY', actor: 'test', reason: 'test' });
  await assert.rejects(run('dispatchTask', taskId), (err) => {
    assertFailure(err, FailureType.ModePaused, true);
    const delay = (err as ApplicationFailure).nextRetryDelay;
    assert.ok(typeof delay === 'number' && delay >= 5_000 && delay <= 7_500, `next retry in ${String(delay)} ms`);
    return true;
  });
  await setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode: 'QUEUE_ONLY', actor: 'test', reason: 'test' });
  const facts = await run('dispatchTask', taskId);
  assert.equal(facts.status, 'DISPATCHING', 'dispatch adds no cost: it runs in QUEUE_ONLY');
  await assert.rejects(run('prepareAttempt', taskId), (err) => assertFailure(err, FailureType.ModePaused, true));
  assert.equal((await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId))).length, 0);
});

test('dispatchAndPrepare records both transitions in one step; in QUEUE_ONLY it commits only the dispatch and prepareAttempt waits', async () => {
  const transitionsOf = async (id: string) =>
    (await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, id)))
      .map((t) => `${t.from_status}→${t.to_status}:${t.source_event}`)
      .sort();
  const normal = await newTask();
  const prepared = await run('dispatchAndPrepare', normal);
  assert.equal(prepared.status, 'SUBMITTING');
  assert.equal(prepared.attemptState, 'PREPARED');
  assert.deepEqual(await transitionsOf(normal), [
    'DISPATCHING→SUBMITTING:workflow.attempt-prepared',
    'QUEUED→DISPATCHING:workflow.dispatch',
    'null→QUEUED:api.create',
  ]);
  // Run again (a retry, a reset): nothing more happens.
  assert.equal((await run('dispatchAndPrepare', normal)).statusVersion, prepared.statusVersion);
  assert.equal((await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, normal))).length, 1);

  const held = await newTask();
  await setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode: 'QUEUE_ONLY', actor: 'test', reason: 'test' });
  const dispatched = await run('dispatchAndPrepare', held);
  assert.equal(dispatched.status, 'DISPATCHING', 'the dispatch commits; no attempt while no provider job may start');
  assert.deepEqual(await transitionsOf(held), ['QUEUED→DISPATCHING:workflow.dispatch', 'null→QUEUED:api.create']);
  assert.equal((await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, held))).length, 0);
  await assert.rejects(run('prepareAttempt', held), (err) => assertFailure(err, FailureType.ModePaused, true));
  await setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode: 'NORMAL', actor: 'test', reason: 'test' });
  assert.equal((await run('dispatchAndPrepare', held)).status, 'SUBMITTING', 'a task already dispatched is only prepared');
});

test('a closed submit switch refuses the submit before the claim: the attempt stays PREPARED', async () => {
  const taskId = await newTask();
  await run('dispatchTask', taskId);
  const prepared = await run('prepareAttempt', taskId);
  assert.equal(prepared.status, 'SUBMITTING');
  const fencedActs = createTaskActivities({ ...deps, submitSwitch: { closedReason: () => 'region-a is not active' } });
  await assert.rejects(
    new MockActivityEnvironment().run(fencedActs.submitAttempt, taskId),
    (err) => assertFailure(err, FailureType.FenceRejected, true) && /submit switch closed/.test((err as Error).message),
  );
  const [attempt] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.equal(attempt!.submit_state, 'PREPARED', 'not claimed, so never sent');
});
