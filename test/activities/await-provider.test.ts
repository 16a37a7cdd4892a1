// awaitProviderChange (activities/await-provider.ts, docs/decisions/0050): one attempt is one poll
// and the inbox step after it; while the task stays where the workflow saw it, the attempt fails
// ProviderUnchanged (BENIGN) with the next poll's delay for Temporal's retry, and what it read is
// applied all the same. Anything that moved the task ends the wait with the poll's result.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import { and, eq, isNull } from 'drizzle-orm';
import { MockActivityEnvironment } from '@temporalio/testing';
import { TRANSIENT_RETRY_MS, createProviderWaitActivities, stillWaiting } from '../../activities/await-provider';
import { createInboxApply } from '../../activities/apply-inbox';
import { createPollSteps, type PollResult } from '../../activities/poll-provider';
import { callbackInbox, taskAttempt } from '../../db/schema';
import { FailureType } from '../../domain/errors';
import type { TaskFacts } from '../../domain/facts';
import { createTask } from '../support/deps';
import { eventually } from '../support/stack';
import { startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  // A job that runs for a minute, read at most 2 s apart.
  w = await startActivityWorld({ config: { POLL_INITIAL_MS: '1000', POLL_MAX_MS: '2000', CALLBACK_HEALTHY_WINDOW_MS: '0' } });
});
after(() => w?.close());

let seq = 0;
/** A task whose job the provider runs, with the facts the workflow would hold: RUNNING. */
async function runningTask(): Promise<{ taskId: string; facts: TaskFacts }> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `await-provider-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `await provider ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await w.run('dispatchTask', taskId);
  await w.run('prepareAttempt', taskId);
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMITTED');
  const facts = await eventually(
    async () => {
      await w.run('pollProvider', taskId);
      const f = await w.run('applyInbox', taskId);
      return f.status === 'RUNNING' ? f : undefined;
    },
    20_000,
    200,
  );
  return { taskId, facts };
}

const unapplied = async (taskId: string) =>
  (
    await w.tdb.database.db
      .select()
      .from(callbackInbox)
      .where(and(eq(callbackInbox.task_id, taskId), isNull(callbackInbox.processed_at)))
  ).length;

test('a read that leaves the task where the workflow saw it fails ProviderUnchanged, BENIGN, with the next poll time as its delay, and is applied', async () => {
  const { taskId, facts } = await runningTask();
  const before = (await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)))[0]!;
  const started = Date.now();
  const err = await w.run('awaitProviderChange', taskId, { statusVersion: facts.statusVersion, attemptState: facts.attemptState }).then(
    () => assert.fail('the wait ended though nothing moved the task'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof ApplicationFailure, String(err));
  assert.equal(err.type, FailureType.ProviderUnchanged);
  assert.equal(err.category, ApplicationFailureCategory.BENIGN);
  assert.equal(err.nonRetryable, false);
  const after = (await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)))[0]!;
  assert.ok(after.last_polled_at! > before.last_polled_at!, 'the provider was read');
  // The delay is the next poll time the read wrote (1–2 s out, jittered), as the workflow's timer used it.
  const dueIn = after.next_poll_at!.getTime() - started;
  assert.equal(typeof err.nextRetryDelay, 'number');
  assert.ok(Math.abs((err.nextRetryDelay as number) - dueIn) < 1_000, `delay ${String(err.nextRetryDelay)} ms, next poll due in ${dueIn} ms`);
  assert.equal(await unapplied(taskId), 0, 'what the read recorded was applied in the attempt');
});

test("a read of a known job is recorded and applied in the poll's one transaction, with no inbox step of its own; a failed apply still leaves the read recorded", async () => {
  const { taskId, facts } = await runningTask();
  const since = { statusVersion: facts.statusVersion, attemptState: facts.attemptState };
  const steps = createPollSteps(w.deps);
  const apply = createInboxApply(w.deps);
  const separateSteps: string[] = [];
  const applyInbox = async (id: string) => {
    separateSteps.push(id);
    return w.run('applyInbox', id);
  };
  const wait = createProviderWaitActivities({ pollAndApply: (id) => steps.poll(id, apply), applyInbox });
  const rowsOf = async () => w.tdb.database.db.select().from(callbackInbox).where(eq(callbackInbox.task_id, taskId));
  const before = (await rowsOf()).length;
  const err = await new MockActivityEnvironment().run(wait.awaitProviderChange, taskId, since).catch((e: unknown) => e);
  assert.ok(err instanceof ApplicationFailure && err.type === FailureType.ProviderUnchanged, String(err));
  assert.deepEqual(separateSteps, [], 'the poll applied what it recorded itself');
  const rows = await rowsOf();
  assert.equal(rows.length, before + 1, 'the read was recorded');
  assert.ok(
    rows.every((r) => r.processed_at !== null),
    'and applied in the same attempt',
  );

  // The inbox step fails inside the poll's transaction: the read is still recorded (on its own),
  // left for the next inbox step, and the failure goes on.
  const [attemptBefore] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  const broken = createProviderWaitActivities({
    pollAndApply: (id) =>
      steps.poll(id, async (tx, task, lock) => {
        await apply(tx, task, lock);
        throw new Error('the inbox step broke');
      }),
    applyInbox,
  });
  const failed = await new MockActivityEnvironment().run(broken.awaitProviderChange, taskId, since).catch((e: unknown) => e);
  assert.ok(failed instanceof ApplicationFailure && /the inbox step broke/.test(failed.message), String(failed));
  assert.equal(failed.nonRetryable, false, 'retried on the wait clock');
  assert.equal((await rowsOf()).length, before + 2, "the failed attempt's read is recorded");
  assert.equal(await unapplied(taskId), 1, 'and waits for the next inbox step');
  const [attemptAfter] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.ok(attemptAfter!.last_polled_at! > attemptBefore!.last_polled_at!, 'with its poll time');
  assert.deepEqual(separateSteps, []);
  assert.equal((await w.run('applyInbox', taskId)).status, 'RUNNING');
});

test("a lookup's hit for an unknown outcome is not applied in the poll's transaction: its row is recorded first, as the evidence of a job", async () => {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `await-provider-unknown-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `await provider unknown ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await w.run('dispatchTask', taskId);
  await w.run('prepareAttempt', taskId);
  // The provider created the job; its answer was lost.
  w.sim.sim.setFaults({ submit: 'error_5xx_after_accept', submit_fault_count: 1 });
  const submitted = await w.run('submitAttempt', taskId);
  w.sim.sim.clearFaults();
  assert.equal(submitted.facts.status, 'SUBMIT_UNKNOWN');
  const steps = createPollSteps(w.deps);
  const folded: string[] = [];
  const separateSteps: string[] = [];
  const wait = createProviderWaitActivities({
    pollAndApply: (id) =>
      steps.poll(id, async (tx, task, lock) => {
        folded.push(id);
        await createInboxApply(w.deps)(tx, task, lock);
      }),
    applyInbox: async (id) => {
      separateSteps.push(id);
      return w.run('applyInbox', id);
    },
  });
  const polled = await eventually(
    async () => {
      const r = (await new MockActivityEnvironment()
        .run(wait.awaitProviderChange, taskId, { statusVersion: submitted.facts.statusVersion, attemptState: submitted.facts.attemptState })
        .catch(() => null)) as PollResult | null;
      return r?.result === 'recorded' ? r : undefined;
    },
    20_000,
    200,
  );
  assert.deepEqual(polled, { result: 'recorded' }, 'the lookup found the job and the task moved');
  assert.deepEqual(folded, [], 'no inbox step inside the lookup');
  assert.ok(separateSteps.includes(taskId), 'the inbox step ran as a transaction of its own');
  const [attempt] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.ok(attempt!.provider_job_id, 'the job is bound');
});

test('a task that moved since the workflow saw it ends the wait with the poll result', async () => {
  const { taskId, facts } = await runningTask();
  // The workflow's facts are a version behind: something (a reset, an operator) moved the task.
  const polled = await w.run('awaitProviderChange', taskId, { statusVersion: facts.statusVersion - 1, attemptState: facts.attemptState });
  assert.deepEqual(polled, { result: 'recorded' });
  const polledAgain = await w.run('awaitProviderChange', taskId, { statusVersion: facts.statusVersion, attemptState: 'SUBMITTED' });
  assert.deepEqual(polledAgain, { result: 'recorded' }, 'and so does an attempt state the workflow did not see');
});

test('stillWaiting: the same version and attempt state, and a next poll time', () => {
  const f = { statusVersion: 4, attemptState: 'RUNNING', pollInMs: 3_000 } as TaskFacts;
  assert.equal(stillWaiting(f, { statusVersion: 4, attemptState: 'RUNNING' }), true);
  assert.equal(stillWaiting(f, { statusVersion: 3, attemptState: 'RUNNING' }), false);
  assert.equal(stillWaiting(f, { statusVersion: 4, attemptState: 'SUBMITTED' }), false);
  assert.equal(stillWaiting({ ...f, pollInMs: null }, { statusVersion: 4, attemptState: 'RUNNING' }), false, 'no next poll: not waiting on the provider');
});

describe('the poll results the workflow acts on end the wait at once, without the inbox step', () => {
  // The steps here are plain functions: what is under test is the attempt's routing, not SQL.
  const unchanged = { statusVersion: 4, attemptState: 'SUBMIT_UNKNOWN', pollInMs: 3_000 } as TaskFacts;
  const since = { statusVersion: 4, attemptState: 'SUBMIT_UNKNOWN' } as const;
  const waitWith = (result: PollResult['result'], applied: string[]) =>
    createProviderWaitActivities({
      pollAndApply: async () => ({ polled: { result }, applied: null }),
      applyInbox: async (taskId) => {
        applied.push(taskId);
        return unchanged;
      },
    });
  // 'overdue' is the one whose loss would never end: an unknown outcome past its deadline leaves
  // the facts as they were, so the wait would retry for ever instead of escalating.
  for (const result of ['overdue', 'absent', 'parked', 'escalated', 'nothing-to-poll'] as const) {
    test(result, async () => {
      const applied: string[] = [];
      const polled = await new MockActivityEnvironment().run(waitWith(result, applied).awaitProviderChange, 't-1', since);
      assert.deepEqual(polled, { result });
      assert.deepEqual(applied, [], 'the workflow decides: no inbox step in the attempt');
    });
  }
  for (const result of ['recorded', 'duplicate', 'not-found', 'read-failed'] as const) {
    test(`${result} is applied and, the task unchanged, waits on`, async () => {
      const applied: string[] = [];
      const err = await new MockActivityEnvironment().run(waitWith(result, applied).awaitProviderChange, 't-1', since).catch((e: unknown) => e);
      assert.ok(err instanceof ApplicationFailure && err.type === FailureType.ProviderUnchanged, String(err));
      assert.deepEqual(applied, ['t-1']);
    });
  }
});

test("an attempt that fails on its own is retried on the wait's short clock, not the policy's backoff; a Temporal failure goes as it is", async () => {
  const failing = (err: Error) =>
    createProviderWaitActivities({
      pollAndApply: async () => {
        throw err;
      },
      applyInbox: async () => assert.fail('not reached'),
    });
  const since = { statusVersion: 1, attemptState: 'RUNNING' } as const;
  const blip = await new MockActivityEnvironment()
    .run(failing(Object.assign(new Error('connection terminated unexpectedly'), { name: 'DatabaseError' })).awaitProviderChange, 't-2', since)
    .catch((e: unknown) => e);
  assert.ok(blip instanceof ApplicationFailure, String(blip));
  assert.equal(blip.type, 'DatabaseError');
  assert.equal(blip.nonRetryable, false);
  assert.match(blip.message, /connection terminated/);
  const delay = blip.nextRetryDelay as number;
  assert.ok(delay >= TRANSIENT_RETRY_MS && delay <= TRANSIENT_RETRY_MS * 1.5, `retry in ${delay} ms`);
  const fatal = ApplicationFailure.create({ type: FailureType.InvalidState, message: 'no attempt', nonRetryable: true });
  assert.equal(await new MockActivityEnvironment().run(failing(fatal).awaitProviderChange, 't-2', since).catch((e: unknown) => e), fatal);
});
