// POST /v1/tasks/batch against real Postgres and a real Temporal server (no worker polls this
// file's queue: tasks stay QUEUED). Each answer is checked against /openapi.json.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { and, eq, inArray, sql } from 'drizzle-orm';
import { apiDocument } from '../../api/openapi';
import { findModel, priceFor } from '../../domain/catalog';
import { creditLedger, generationTask, taskBatchItem } from '../../db/schema';
import { contractValidator, type OpenApiDoc } from '../support/contract';
import {
  createTestDatabase,
  createTestTenant,
  http,
  startApi,
  temporalClient,
  testConfig,
  uniqueQueue,
  type RunningApi,
  type TestDatabase,
} from '../support/stack';

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('batch'), TENANT_CREATE_RATE_PER_SECOND: '5000', TASK_BATCH_CHUNK_SIZE: '100' });
const validator = contractValidator(apiDocument('http://127.0.0.1') as unknown as OpenApiDoc);
const request = { model: 'minimax/video-01', prompt: 'a red fox running through snow', duration_seconds: 6, resolution: '720p' };

let tdb: TestDatabase;
let api: RunningApi;
let closeClient: () => Promise<void>;

before(async () => {
  tdb = await createTestDatabase(config);
  const t = await temporalClient(config);
  closeClient = t.close;
  api = await startApi(config, tdb.database, { client: t.client });
});
after(async () => {
  await api?.close();
  await closeClient?.();
  await tdb?.drop();
});

async function batch(apiKey: string, key: string, body: unknown, baseUrl = api.baseUrl) {
  const res = await http(baseUrl, 'POST', '/v1/tasks/batch', { apiKey, body, headers: { 'idempotency-key': key } });
  const errors = validator.check({ method: 'POST', path: '/v1/tasks/batch' }, { status: res.status, headers: res.headers, text: JSON.stringify(res.body) });
  assert.deepEqual(errors, [], `answer matches /openapi.json: ${errors.join('; ')}`);
  return res;
}

const tasksOf = (tenantId: string) => tdb.database.db.select().from(generationTask).where(eq(generationTask.tenant_id, tenantId));

/** Every 100th item is invalid, each in a different way. */
function mixedItems(prefix: string, n: number) {
  const invalid = [
    { prompt: '' },
    { model: 'no-such-model' },
    { resolution: '8k' },
    { duration_seconds: 0 },
    { input_image_url: 'http://plain.example/x.png' },
    { unknown_field: true },
    { priority: 42 },
    { deadline_seconds: 1 },
    { metadata: { '': 'x' } },
    { project_id: 'not-a-uuid' },
  ];
  return Array.from({ length: n }, (_, i) => ({
    idempotency_key: `${prefix}-${i}`,
    request: i % 100 === 7 ? { ...request, ...invalid[Math.floor(i / 100) % invalid.length] } : { ...request, prompt: `${request.prompt} #${i}` },
  }));
}

describe('POST /v1/tasks/batch', () => {
  test('1,000 items with 10 invalid: 990 tasks, 10 item problems naming the field; the replay answers the same and creates nothing', async () => {
    const alice = await createTestTenant(tdb.database, config, '1000000');
    const items = mixedItems('big', 1000);
    const first = await batch(alice.apiKey, 'batch-big', { items });
    assert.equal(first.status, 200);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    assert.equal(first.body.items.length, 1000);
    assert.deepEqual([first.body.accepted, first.body.refused, first.body.not_attempted, first.body.complete], [990, 10, 0, true]);
    const bad = first.body.items.filter((r: { status: number }) => r.status !== 202);
    assert.deepEqual(
      bad.map((r: { index: number }) => r.index),
      Array.from({ length: 10 }, (_, k) => k * 100 + 7),
    );
    for (const r of bad) {
      assert.equal(r.status, 400);
      assert.equal(r.problem.status, 400);
      assert.ok(r.problem.errors.length > 0 && r.problem.errors.every((e: { field: string }) => e.field.length > 0), JSON.stringify(r.problem));
      assert.equal(r.task_id, undefined);
    }
    assert.equal(bad[0].problem.errors[0].field, 'request.prompt');
    assert.equal(bad[1].problem.errors[0].field, 'model');
    const tasks = await tasksOf(alice.tenantId);
    assert.equal(tasks.length, 990);
    const byKey = new Map(tasks.map((t) => [t.idempotency_key, t.task_id]));
    for (const r of first.body.items.filter((x: { status: number }) => x.status === 202)) assert.equal(byKey.get(r.idempotency_key), r.task_id);
    // One reserve per task, nothing for a refused item.
    const reserves = await tdb.database.db
      .select({ n: sql<number>`count(*)::int` })
      .from(creditLedger)
      .where(inArray(creditLedger.task_id, [...byKey.values()]));
    assert.equal(reserves[0]!.n, 990);

    const replay = await batch(alice.apiKey, 'batch-big', { items });
    assert.equal(replay.status, 200);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(replay.body, first.body);
    assert.equal((await tasksOf(alice.tenantId)).length, 990);
  });

  test('another body under the same batch key is a 422 and writes nothing', async () => {
    const alice = await createTestTenant(tdb.database, config, '1000');
    const first = await batch(alice.apiKey, 'batch-422', { items: mixedItems('k422', 3) });
    assert.equal(first.body.accepted, 3);
    const other = await batch(alice.apiKey, 'batch-422', { items: mixedItems('k422-other', 3) });
    assert.equal(other.status, 422);
    assert.equal((await tasksOf(alice.tenantId)).length, 3);
  });

  test('an item key that names an earlier task answers that task (replayed), or 422 for another body; a key used twice in one batch is a 400', async () => {
    const alice = await createTestTenant(tdb.database, config, '1000');
    const single = await http(api.baseUrl, 'POST', '/v1/tasks', { apiKey: alice.apiKey, body: request, headers: { 'idempotency-key': 'earlier' } });
    assert.equal(single.status, 202);
    const res = await batch(alice.apiKey, 'batch-mixed-keys', {
      items: [
        { idempotency_key: 'earlier', request },
        { idempotency_key: 'fresh', request },
      ],
    });
    assert.deepEqual(
      res.body.items.map((r: { status: number; replayed?: boolean }) => [r.status, r.replayed ?? false]),
      [
        [202, true],
        [202, false],
      ],
    );
    assert.equal(res.body.items[0].task_id, single.body.task_id);
    const conflict = await batch(alice.apiKey, 'batch-conflict', { items: [{ idempotency_key: 'earlier', request: { ...request, prompt: 'another' } }] });
    assert.equal(conflict.body.items[0].status, 422);
    const twice = await batch(alice.apiKey, 'batch-twice', {
      items: [
        { idempotency_key: 'same', request },
        { idempotency_key: 'same', request },
      ],
    });
    assert.equal(twice.status, 400);
    assert.equal(twice.body.errors[0].field, 'items.1.idempotency_key');
    assert.equal((await tasksOf(alice.tenantId)).length, 2);
  });

  test('an item the credits cannot cover is refused alone (402) while the others of its chunk commit', async () => {
    // Credits for two and a half tasks: two fit, the third does not.
    const cost = Number(priceFor(findModel(request.model)!, '720p', 6));
    const carol = await createTestTenant(tdb.database, config, String(cost * 2 + cost / 2));
    const res = await batch(carol.apiKey, 'batch-credits', { items: mixedItems('cr', 3) });
    assert.deepEqual(
      res.body.items.map((r: { status: number }) => r.status),
      [202, 202, 402],
    );
    assert.equal(res.body.items[2].problem.type, 'https://docs.vidorch.dev/problems/insufficient-credits');
    assert.equal((await tasksOf(carol.tenantId)).length, 2);
    const stored = await tdb.database.db
      .select()
      .from(taskBatchItem)
      .where(and(eq(taskBatchItem.batch_id, res.body.batch_id)));
    assert.equal(stored.length, 3, 'the refusal is final: stored with the chunk');
  });
});

describe('POST /v1/tasks/batch: the tenant create rate applies per item', () => {
  let slow: RunningApi;
  const slowConfig = testConfig({
    TEMPORAL_TASK_QUEUE: config.TEMPORAL_TASK_QUEUE,
    TENANT_CREATE_RATE_PER_SECOND: '5',
    TASK_BATCH_CHUNK_SIZE: '4',
    REDIS_URL: '',
  });
  before(async () => {
    slow = await startApi(slowConfig, tdb.database, { facade: api.facade });
  });
  after(async () => {
    await slow?.close();
  });

  test('items past the rate are 429, not attempted and not stored; the retry under the same key attempts them and changes nothing else', async () => {
    const dave = await createTestTenant(tdb.database, config, '1000');
    const items = mixedItems('rate', 12).map((item, i) => ({ ...item, request: { ...request, prompt: `rate ${i}` } }));
    const first = await batch(dave.apiKey, 'batch-rate', { items }, slow.baseUrl);
    assert.equal(first.status, 200);
    assert.equal(first.body.complete, false);
    assert.ok(Number(first.headers.get('retry-after')) >= 1);
    const statuses = first.body.items.map((r: { status: number }) => r.status);
    assert.deepEqual(statuses, [...Array(5).fill(202), ...Array(7).fill(429)]);
    assert.equal((await tasksOf(dave.tenantId)).length, 5);
    let last = first;
    for (let round = 0; round < 5 && !last.body.complete; round++) {
      await new Promise((r) => setTimeout(r, 1_100));
      last = await batch(dave.apiKey, 'batch-rate', { items }, slow.baseUrl);
    }
    assert.equal(last.body.complete, true);
    assert.equal(last.body.accepted, 12);
    // The items answered first keep their answers.
    assert.deepEqual(last.body.items.slice(0, 5), first.body.items.slice(0, 5));
    assert.equal((await tasksOf(dave.tenantId)).length, 12);
  });
});
