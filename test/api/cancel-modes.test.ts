// A cancel is a fact write the mode can pause (docs/modes.md: READ_ONLY and MAINTENANCE answer
// cancels 503). The API's admission reads a mode cached up to a second (api/admission.ts), so the
// cancel's own transaction checks it again: once `mode set` has returned, no cancel settles a task.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { and, eq, inArray } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { ModePausedError, setMode } from '../../db/modes';
import { creditLedger, generationTask } from '../../db/schema';
import type { SystemMode } from '../../domain/states';
import { startApiInProcess, worldFacade, type InProcessApi } from '../../harness/world';
import { createMetrics } from '../../observability/metrics';
import { createTask } from '../support/deps';
import { createTestDatabase, createTestTenant, http, testConfig, testLogger, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let api: InProcessApi;
let tenantId: string;
let apiKey: string;
const db = () => tdb.database.db;
const token = () => ({ scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 });
const mode = (m: SystemMode) => setMode(db(), { scope: config.FENCE_SCOPE, mode: m, actor: 'operator:test', reason: 'test' });

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId, apiKey } = await createTestTenant(tdb.database, config, '100'));
  // The production admission cache (1 s), not the tests' usual 0.
  api = await startApiInProcess(config, tdb.database, {
    facade: worldFacade(config, () => undefined),
    logger: testLogger,
    metrics: createMetrics({ service: 'api-cancel-modes' }),
    fenceCacheMs: 1_000,
  });
});
after(async () => {
  await api?.close();
  await tdb?.drop();
});

let seq = 0;
async function queued(): Promise<string> {
  seq += 1;
  const created = await createTask(db(), token(), {
    tenantId,
    idempotencyKey: `cancel-modes-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `cancel modes ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  return created.task.task_id;
}
const factsOf = async (id: string) => ({
  status: (await db().select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!.status,
  ledger: (
    await db()
      .select()
      .from(creditLedger)
      .where(and(eq(creditLedger.task_id, id), inArray(creditLedger.entry_type, ['SETTLE', 'RELEASE'])))
  ).map((l) => `${l.entry_type} ${l.amount}`),
});

test('a cancel within a second of `mode set READ_ONLY` (the admission still caching NORMAL) is a 503 naming the mode, and settles nothing', async () => {
  const id = await queued();
  // A request fills the admission cache with NORMAL.
  assert.equal((await http(api.baseUrl, 'GET', `/v1/tasks/${id}`, { apiKey })).status, 200);
  await mode('READ_ONLY');
  try {
    const res = await http(api.baseUrl, 'POST', `/v1/tasks/${id}/cancel`, { apiKey });
    assert.equal(res.status, 503);
    assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/);
    assert.equal(res.headers.get('retry-after'), '30');
    assert.match((res.body as { detail: string }).detail, /system mode is READ_ONLY: cancels are paused/);
    assert.deepEqual(await factsOf(id), { status: 'QUEUED', ledger: [] });
  } finally {
    await mode('NORMAL');
  }
});

test('cancelTask refuses inside its transaction while the mode pauses cancels (MAINTENANCE), whoever calls it', async () => {
  const id = await queued();
  await mode('MAINTENANCE');
  try {
    await assert.rejects(cancelTask(db(), token(), tenantId, id), (err: unknown) => err instanceof ModePausedError && err.mode === 'MAINTENANCE');
  } finally {
    await mode('NORMAL');
  }
  assert.deepEqual(await factsOf(id), { status: 'QUEUED', ledger: [] });
  assert.equal((await cancelTask(db(), token(), tenantId, id)).status, 'CANCELLED', 'once reopened the cancel goes through');
});
