// No accepted task is lost when Temporal is unreachable: the API still answers 202 (the task,
// its reservation and its outbox row are committed), and the outbox relay starts the
// workflow later. Two relays at once publish each row once; a relay holds no lock while it talks
// to Temporal (its rows are claimed with a lease instead), and a claim left by a dead relay is
// taken over once its lease has run out (docs/decisions/0035-outbox-claim-lease.md).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Client } from '@temporalio/client';
import { eq, inArray, isNull, sql } from 'drizzle-orm';
import { outboxEvent } from '../../db/schema';
import { createGenerationFacade, type GenerationFacade } from '../../temporal/facade';
import { relayOnce, type RelayOptions } from '../../workers/outbox-relay';
import {
  createTestDatabase,
  createTestTenant,
  eventually,
  http,
  startApi,
  temporalClient,
  testConfig,
  testLogger,
  uniqueQueue,
  type RunningApi,
  type TestDatabase,
} from '../support/stack';

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('outbox') });
let tdb: TestDatabase;
let api: RunningApi;
let client: Client;
let closeClient: () => Promise<void>;
let apiKey: string;

before(async () => {
  tdb = await createTestDatabase(config);
  ({ client, close: closeClient } = await temporalClient(config));
  // This API's Temporal is unreachable: nothing listens on port 1.
  const deadFacade = createGenerationFacade(async () => {
    const { client: c } = await temporalClient({ ...config, TEMPORAL_ADDRESS: '127.0.0.1:1' });
    return c;
  }, config.TEMPORAL_TASK_QUEUE);
  api = await startApi(config, tdb.database, { facade: deadFacade });
  ({ apiKey } = await createTestTenant(tdb.database, config, '100'));
});
after(async () => {
  await api?.close();
  await closeClient?.();
  await tdb?.drop();
});

const body = { model: 'minimax/video-01', prompt: 'outbox', duration_seconds: 6, resolution: '720p' };

test('with Temporal unreachable a create is still accepted, and the relay later starts exactly one workflow per task', async () => {
  const ids: string[] = [];
  for (let i = 0; i < 6; i += 1) {
    const res = await http(api.baseUrl, 'POST', '/v1/tasks', { apiKey, body, headers: { 'idempotency-key': `outbox-${i}` } });
    assert.equal(res.status, 202);
    ids.push(res.body.task_id);
  }
  const pending = await tdb.database.db.select().from(outboxEvent).where(isNull(outboxEvent.published_at));
  assert.equal(pending.length, 6, 'every accepted task waits in the outbox');

  const facade = createGenerationFacade(async () => client, config.TEMPORAL_TASK_QUEUE);
  const relay = { db: tdb.database.db, fence: { scope: config.FENCE_SCOPE, region: config.REGION }, facade, logger: testLogger, batchSize: 4, intervalMs: 10 };
  // Two relays at once: SKIP LOCKED splits the rows between them.
  const [a, b] = await Promise.all([relayOnce(relay), relayOnce(relay)]);
  const rest = await relayOnce(relay);
  assert.equal(a.published + b.published + rest.published, 6);

  const rows = await tdb.database.db.select().from(outboxEvent);
  assert.ok(
    rows.every((r) => r.published_at !== null && r.publish_attempts === 1),
    'each row published once',
  );
  for (const id of ids) {
    const d = await client.workflow.getHandle(facade.workflowIdFor(id)).describe();
    assert.equal(d.status.name, 'RUNNING');
  }
  // Publishing again (a relay that crashed before marking the row) starts nothing new.
  await tdb.database.db.update(outboxEvent).set({ published_at: null }).where(eq(outboxEvent.aggregate_id, ids[0]!));
  const again = await relayOnce(relay);
  assert.equal(again.published, 1);
  const runs: string[] = [];
  for await (const wf of client.workflow.list({ query: `WorkflowId = '${facade.workflowIdFor(ids[0]!)}'` })) runs.push(wf.runId);
  assert.ok(runs.length <= 1, `one run for the task, found ${runs.length}`);
  for (const id of ids) await client.workflow.getHandle(facade.workflowIdFor(id)).terminate('test cleanup');
});

/** The real facade, counting starts per task; `hold` parks every start until it resolves. */
function countingFacade(inner: GenerationFacade, hold?: Promise<void>) {
  const starts = new Map<string, number>();
  let waiting = 0;
  const facade: GenerationFacade = {
    ...inner,
    async startGeneration(task) {
      starts.set(task.taskId, (starts.get(task.taskId) ?? 0) + 1);
      waiting += 1;
      await hold;
      waiting -= 1;
      return inner.startGeneration(task);
    },
  };
  return { facade, starts, waiting: () => waiting };
}

/** A relay pass's options over this file's database, batches of 10. */
function relayOptions(facade: GenerationFacade, extra: Partial<RelayOptions> = {}): RelayOptions {
  return {
    db: tdb.database.db,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    facade,
    logger: testLogger,
    batchSize: 10,
    intervalMs: 10,
    ...extra,
  };
}

async function createTasks(prefix: string, n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i += 1) {
    const res = await http(api.baseUrl, 'POST', '/v1/tasks', { apiKey, body, headers: { 'idempotency-key': `${prefix}-${i}` } });
    assert.equal(res.status, 202);
    ids.push(res.body.task_id);
  }
  return ids;
}

/**
 * Runs of the task's workflow, by a visibility query: visibility trails the start (a loaded run
 * read 0 right after the relay started one), so wait until at least one shows, then count.
 */
async function runsOf(facade: GenerationFacade, taskId: string): Promise<number> {
  const count = async () => {
    let runs = 0;
    for await (const _ of client.workflow.list({ query: `WorkflowId = '${facade.workflowIdFor(taskId)}'` })) runs += 1;
    return runs;
  };
  await eventually(async () => ((await count()) > 0 ? true : undefined), 15_000);
  return count();
}

test('a relay starts workflows outside any transaction: its claimed rows stay unlocked, no other relay starts them, each is started once', async () => {
  await tdb.database.db
    .update(outboxEvent)
    .set({ published_at: sql`now()` })
    .where(isNull(outboxEvent.published_at));
  const ids = await createTasks(`claim-${Date.now()}`, 4);
  const real = createGenerationFacade(async () => client, config.TEMPORAL_TASK_QUEUE);
  let release!: () => void;
  const a = countingFacade(real, new Promise<void>((r) => (release = r)));
  const b = countingFacade(real);
  const relay = (facade: GenerationFacade) => relayOptions(facade);

  const passA = relayOnce(relay(a.facade));
  while (a.waiting() === 0) await new Promise((r) => setTimeout(r, 20));
  // Relay A is inside its first start. No row lock is held: a NOWAIT lock on every row succeeds.
  await tdb.database.db.transaction(async (tx) => {
    const { rows } = await tx.execute(sql`SELECT event_id FROM outbox_event WHERE aggregate_id IN ${ids} FOR UPDATE NOWAIT`);
    assert.equal(rows.length, 4);
  });
  // A second relay finds every row claimed and starts nothing.
  assert.deepEqual(await relayOnce(relay(b.facade)), { published: 0, failed: 0 });
  assert.equal(b.starts.size, 0);
  release();
  assert.deepEqual(await passA, { published: 4, failed: 0 });

  const rows = await tdb.database.db.select().from(outboxEvent).where(inArray(outboxEvent.aggregate_id, ids));
  assert.ok(
    rows.every((r) => r.published_at !== null && r.publish_attempts === 1 && r.claimed_until === null),
    'each row published once, its claim cleared',
  );
  for (const id of ids) {
    assert.equal(a.starts.get(id), 1, 'one start call per task');
    assert.equal(await runsOf(real, id), 1, 'one run per task');
  }
  for (const id of ids) await client.workflow.getHandle(real.workflowIdFor(id)).terminate('test cleanup');
});

test('a claim left by a dead relay is taken over once its lease has run out, a live claim is not, and a task whose workflow already closed counts as started', async () => {
  await tdb.database.db
    .update(outboxEvent)
    .set({ published_at: sql`now()` })
    .where(isNull(outboxEvent.published_at));
  const [expired, live, closed] = await createTasks(`lease-${Date.now()}`, 3);
  const real = createGenerationFacade(async () => client, config.TEMPORAL_TASK_QUEUE);
  // The dead relay claimed two rows and never came back: one lease has run out, one has not.
  await tdb.database.db
    .update(outboxEvent)
    .set({ claimed_until: sql`now() - interval '1 second'` })
    .where(eq(outboxEvent.aggregate_id, expired!));
  await tdb.database.db
    .update(outboxEvent)
    .set({ claimed_until: sql`now() + interval '1 minute'` })
    .where(eq(outboxEvent.aggregate_id, live!));
  // The third task's workflow already ran and closed (here: terminated): starting it again is refused.
  await real.startGeneration({ taskId: closed!, tenantId: 'x', provider: 'replicate' });
  await client.workflow.getHandle(real.workflowIdFor(closed!)).terminate('closed before the relay');

  const c = countingFacade(real);
  const relay = relayOptions(c.facade);
  assert.deepEqual(await relayOnce(relay), { published: 2, failed: 0 });
  assert.deepEqual([...c.starts.keys()].sort(), [expired!, closed!].sort(), 'the live claim is left to its relay');
  const byTask = new Map(
    (
      await tdb.database.db
        .select()
        .from(outboxEvent)
        .where(inArray(outboxEvent.aggregate_id, [expired!, live!, closed!]))
    ).map((r) => [r.aggregate_id, r]),
  );
  assert.notEqual(byTask.get(expired!)!.published_at, null);
  assert.notEqual(byTask.get(closed!)!.published_at, null, 'WorkflowExecutionAlreadyStarted on a closed run is done');
  assert.equal(byTask.get(live!)!.published_at, null, 'not lost: still waiting for its lease');
  assert.equal(await runsOf(real, closed!), 1, 'the closed workflow was not started again');

  // Once the live claim runs out too, it is published: nothing is lost.
  await tdb.database.db
    .update(outboxEvent)
    .set({ claimed_until: sql`now() - interval '1 second'` })
    .where(eq(outboxEvent.aggregate_id, live!));
  assert.deepEqual(await relayOnce(relay), { published: 1, failed: 0 });
  assert.equal(await runsOf(real, live!), 1);
  for (const id of [expired!, live!]) await client.workflow.getHandle(real.workflowIdFor(id)).terminate('test cleanup');
});

test('a relay with a hold-off leaves rows younger than it to the fast path, and takes them once they are older', async () => {
  await tdb.database.db
    .update(outboxEvent)
    .set({ published_at: sql`now()` })
    .where(isNull(outboxEvent.published_at));
  const [young, old] = await createTasks(`hold-off-${Date.now()}`, 2);
  const real = createGenerationFacade(async () => client, config.TEMPORAL_TASK_QUEUE);
  const c = countingFacade(real);
  const relay = relayOptions(c.facade, { holdOffMs: 60_000 });
  // Both rows are seconds old: the API's fast path may still be starting them.
  assert.deepEqual(await relayOnce(relay), { published: 0, failed: 0 });
  assert.equal(c.starts.size, 0, 'no start call for a row inside the hold-off');
  // One of them has waited past the hold-off (its fast path failed): the relay starts it.
  await tdb.database.db
    .update(outboxEvent)
    .set({ created_at: sql`now() - interval '61 seconds'` })
    .where(eq(outboxEvent.aggregate_id, old!));
  assert.deepEqual(await relayOnce(relay), { published: 1, failed: 0 });
  assert.deepEqual([...c.starts.keys()], [old!]);
  // Without a hold-off (0, the relay's own default) the young row goes too: nothing is lost.
  assert.deepEqual(await relayOnce({ ...relay, holdOffMs: 0 }), { published: 1, failed: 0 });
  for (const id of [young!, old!]) await client.workflow.getHandle(real.workflowIdFor(id)).terminate('test cleanup');
});
