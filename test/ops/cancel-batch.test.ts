// `ops task cancel --apply` (ops/cancel-batch.ts) in the modes that pause cancels (docs/modes.md:
// READ_ONLY, MAINTENANCE): the batch is refused as a whole before it starts, and a mode narrowed
// while it runs stops each later cancel in its own transaction (api/tasks.service.ts cancelTask).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { and, eq, inArray } from 'drizzle-orm';
import { setMode } from '../../db/modes';
import { creditLedger, generationTask } from '../../db/schema';
import type { SystemMode } from '../../domain/states';
import type { BatchPlan } from '../../ops/batch';
import { applyCancelBatch, planCancelBatch } from '../../ops/cancel-batch';
import type { GenerationFacade } from '../../temporal/facade';
import { createTask } from '../support/deps';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let tenantId: string;
const db = () => tdb.database.db;
const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
const mode = (m: SystemMode) => setMode(db(), { scope: config.FENCE_SCOPE, mode: m, actor: 'operator:test', reason: 'test' });

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '100'));
});
after(async () => {
  await tdb?.drop();
});

async function queued(label: string): Promise<string> {
  const created = await createTask(
    db(),
    { ...fence, epoch: 1 },
    {
      tenantId,
      idempotencyKey: `cancel-batch-${label}-${Date.now()}`,
      body: { model: 'minimax/video-01', prompt: `cancel batch ${label}`, duration_seconds: 6, resolution: '720p', priority: 0 },
    },
  );
  return created.task.task_id;
}
const factsOf = async (id: string) => ({
  status: (await db().select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!.status,
  ledger: (
    await db()
      .select()
      .from(creditLedger)
      .where(and(eq(creditLedger.task_id, id), inArray(creditLedger.entry_type, ['SETTLE', 'RELEASE'])))
  )
    .map((l) => `${l.entry_type} ${l.amount}`)
    .sort(),
});
const apply = (plan: BatchPlan, facade: Pick<GenerationFacade, 'wakeTask'>) =>
  applyCancelBatch(db(), facade as GenerationFacade, plan, { operator: 'test', reason: 'test', ratePerSecond: 100, fence });

test('MAINTENANCE: the batch is refused before any cancel, naming the mode; nothing is settled', async () => {
  const id = await queued('maintenance');
  const plan = await planCancelBatch(db(), { statuses: ['QUEUED'] }, 1000);
  await mode('MAINTENANCE');
  try {
    await assert.rejects(apply(plan, { wakeTask: async () => false }), /system mode is MAINTENANCE: cancels are paused; cancel after `mode set`/);
  } finally {
    await mode('NORMAL');
  }
  assert.deepEqual(await factsOf(id), { status: 'QUEUED', ledger: [] });
});

test('a mode narrowed to READ_ONLY during the batch: the cancels after it are refused in their own transaction and each result says why', async () => {
  const first = await queued('first');
  const second = await queued('second');
  const plan = await planCancelBatch(db(), { statuses: ['QUEUED'] }, 1000);
  const mine = plan.items.filter((i) => i.taskId === first || i.taskId === second).map((i) => i.taskId);
  assert.deepEqual(mine, [first, second]);
  let woken = 0;
  try {
    const r = await apply(plan, {
      // The operator's `mode set READ_ONLY` lands right after the first cancel of this test's tasks.
      wakeTask: async (taskId) => {
        if (taskId === first) await mode('READ_ONLY');
        woken += 1;
        return true;
      },
    });
    const results = Object.fromEntries(r.results.filter((x) => mine.includes(x.taskId)).map((x) => [x.taskId, `${x.outcome}: ${x.detail}`]));
    assert.deepEqual(results, { [first]: 'done: now CANCELLED', [second]: 'error: system mode is READ_ONLY: cancels are paused' });
  } finally {
    await mode('NORMAL');
  }
  assert.ok(woken >= 1);
  assert.deepEqual(await factsOf(first), { status: 'CANCELLED', ledger: ['RELEASE 4.500000', 'SETTLE 0.000000'] });
  assert.deepEqual(await factsOf(second), { status: 'QUEUED', ledger: [] });
});
