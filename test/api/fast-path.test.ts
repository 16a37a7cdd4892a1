// The fast path's outbox mark is a fact write (api/fast-path.ts, db/outbox.ts): it holds the
// region fence under the create's token in its one statement, so an API whose region was failed
// over since the create (its epoch moved) marks nothing, says so, and leaves the row to the
// active region's relay; under the current token the row is marked as before.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import { createFastPath } from '../../api/fast-path';
import type { FenceToken } from '../../db/fence';
import { outboxEvent } from '../../db/schema';
import { createMetrics } from '../../observability/metrics';
import type { GenerationFacade } from '../../temporal/facade';
import { createTask } from '../support/deps';
import { createTestDatabase, createTestTenant, testConfig, testLogger, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let tenantId: string;
const token: FenceToken = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
const started: string[] = [];
/** Temporal answers at once: only the mark can keep a row unpublished. */
const facade = {
  startGeneration: (task: { taskId: string }) => {
    started.push(task.taskId);
    return Promise.resolve({ started: true });
  },
} as unknown as GenerationFacade;

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '50'));
});
after(async () => {
  await tdb?.drop();
});

/** A task committed as the API commits one, under `under`: its workflow reference and outbox row. */
async function committedTask(key: string, under: FenceToken = token) {
  const created = await createTask(tdb.database.db, under, {
    tenantId,
    idempotencyKey: key,
    body: { model: 'minimax/video-01', prompt: key, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  if (created.kind !== 'created') throw new Error(`${key}: not created`);
  return { ref: { taskId: created.task.task_id, tenantId, provider: created.task.provider }, outboxEventId: created.outboxEventId };
}
const publishedAt = async (eventId: string) => (await tdb.database.db.select().from(outboxEvent).where(eq(outboxEvent.event_id, eventId)))[0]!.published_at;

test('a fenced-out API marks nothing: the workflow start stands, the outbox row stays for the active region, no cool-down', async () => {
  const metrics = createMetrics({ service: 'api' });
  const fastPath = createFastPath({ db: tdb.database.db, facade, logger: testLogger, metrics, timeoutMs: 5_000, cooldownMs: 60_000 });
  const { ref, outboxEventId } = await committedTask('fenced-out');
  // A failover moved the epoch after this create committed.
  await tdb.database.db.execute(sql`UPDATE region_write_fence SET write_epoch = write_epoch + 1 WHERE resource_scope = ${config.FENCE_SCOPE}`);
  try {
    assert.equal(await fastPath.tryStart(ref, outboxEventId, token), false);
    assert.deepEqual(started, [ref.taskId], 'Temporal was asked (an idempotent start)');
    assert.equal(await publishedAt(outboxEventId), null, 'the row is left for the relay of the active region');
    const counted = (await metrics.outboxPublished.get()).values.find((v) => v.labels['outcome'] === 'fenced');
    assert.equal(counted?.value, 1);

    // No cool-down: the next create's start under the current token goes at once and marks.
    const current: FenceToken = { ...token, epoch: 2 };
    const next = await committedTask('current-epoch', current);
    assert.equal(await fastPath.tryStart(next.ref, next.outboxEventId, current), true);
    assert.notEqual(await publishedAt(next.outboxEventId), null);
    assert.equal(await publishedAt(outboxEventId), null, 'still only the relay marks the fenced-out row');
  } finally {
    await tdb.database.db.execute(sql`UPDATE region_write_fence SET write_epoch = 1 WHERE resource_scope = ${config.FENCE_SCOPE}`);
  }
});

test('under the current token every row of a batch of concurrent starts is marked', async () => {
  const fastPath = createFastPath({
    db: tdb.database.db,
    facade,
    logger: testLogger,
    metrics: createMetrics({ service: 'api' }),
    timeoutMs: 5_000,
    cooldownMs: 60_000,
  });
  const tasks = await Promise.all(['batch-a', 'batch-b', 'batch-c'].map((k) => committedTask(k)));
  const results = await Promise.all(tasks.map((t) => fastPath.tryStart(t.ref, t.outboxEventId, token)));
  assert.deepEqual(results, [true, true, true]);
  for (const t of tasks) assert.notEqual(await publishedAt(t.outboxEventId), null);
});
