// A waiting task's poll (activities/poll-provider.ts), the step every open task repeats while its
// provider works: one read of the fence, the mode, the task and its attempt before the provider
// call, then the next poll time and the inbox row in one task transaction under the token read
// (db/task-tx.ts); a wait's attempt (activities/await-provider.ts) applies the inbox in that same
// transaction (docs/decisions/0051). Counted on the wire: each pg.Client#query is one round trip.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { and, eq, isNull } from 'drizzle-orm';
import pg from 'pg';
import { createTask } from '../support/deps';
import { callbackInbox, taskAttempt } from '../../db/schema';
import { startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  w = await startActivityWorld();
});
after(() => w?.close());

/** What `work` sends to Postgres, one entry per round trip. */
async function roundTrips(work: () => Promise<unknown>): Promise<string[]> {
  const sent: string[] = [];
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function counted(this: pg.Client, ...args: Parameters<typeof query>) {
    const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text: string }).text;
    sent.push(text.replace(/\s+/g, ' ').trim());
    return query.apply(this, args);
  } as typeof query;
  try {
    await work();
  } finally {
    pg.Client.prototype.query = query;
  }
  return sent;
}

test("a waiting task's poll is one read and one task transaction: five round trips, one commit", async () => {
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `poll-round-trips-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: 'poll round trips', duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await w.run('dispatchTask', taskId);
  await w.run('prepareAttempt', taskId);
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMITTED');
  // The first poll also fills the process's callback-health and poll-demand caches (10 s).
  assert.equal((await w.run('pollProvider', taskId)).result, 'recorded');
  const [before] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));

  let result;
  const sent = await roundTrips(async () => {
    result = await w.run('pollProvider', taskId);
  });
  assert.deepEqual(result, { result: 'recorded' }, 'each poll of a job in flight is a new inbox row (its poll time differs)');
  const verbs = sent.map((s) => s.split(/[ (]/)[0]!.toUpperCase());
  assert.deepEqual(verbs, ['SELECT', 'BEGIN;', 'UPDATE', 'INSERT', 'COMMIT'], sent.join('\n'));
  assert.match(sent[0]!, /FROM region_write_fence/, 'the read takes the fence with the task');
  assert.doesNotMatch(sent[0]!, /FOR (UPDATE|SHARE)/, 'no lock held across the provider call');
  assert.match(sent[1]!, /FOR SHARE/, 'the write holds the fence');

  const [afterwards] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.ok(afterwards!.last_polled_at! > before!.last_polled_at!, 'the next poll time was written');
  const polls = await w.tdb.database.db
    .select()
    .from(callbackInbox)
    .where(and(eq(callbackInbox.task_id, taskId), eq(callbackInbox.source, 'poll')));
  assert.equal(polls.length, 2);
});

test("a wait's attempt that reads the job records and applies it in that one transaction: eight round trips, two commits", async () => {
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `poll-round-trips-wait-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: 'wait round trips', duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await w.run('dispatchTask', taskId);
  await w.run('prepareAttempt', taskId);
  assert.equal((await w.run('submitAttempt', taskId)).facts.status, 'SUBMITTED');
  await w.run('pollProvider', taskId);
  const facts = await w.run('applyInbox', taskId);

  let failure: unknown;
  const sent = await roundTrips(async () => {
    failure = await w.run('awaitProviderChange', taskId, { statusVersion: facts.statusVersion, attemptState: facts.attemptState }).catch((e: unknown) => e);
  });
  assert.equal((failure as { type?: string }).type, 'ProviderUnchanged', String(failure));
  const verbs = sent.map((s) => s.split(/[ (]/)[0]!.toUpperCase());
  // The read; then one transaction: open (fence, task, attempt), poll time, inbox row, the pending
  // rows, the attempt as the job says, the rows marked, and the facts with COMMIT.
  assert.deepEqual(verbs, ['SELECT', 'BEGIN;', 'UPDATE', 'INSERT', 'SELECT', 'UPDATE', 'UPDATE', 'SELECT'], sent.join('\n'));
  assert.match(sent[1]!, /FROM task_attempt WHERE attempt_id = t\.active_attempt_id FOR UPDATE/, 'the attempt is locked with the task');
  assert.match(sent.at(-1)!, /; COMMIT$/, 'the facts are read in the commit round trip');
  const pending = await w.tdb.database.db
    .select()
    .from(callbackInbox)
    .where(and(eq(callbackInbox.task_id, taskId), isNull(callbackInbox.processed_at)));
  assert.equal(pending.length, 0, 'what the read recorded is applied');
});
