// GET /v1/usage against real Postgres: its sums are the ledger's (succeeded, failed with its
// reservation released, cancelled), per day, model and API key; the CSV download carries the
// same groups; a bad query is a problem+json naming the field; a tenant sees its own usage only.
// Tasks are created through the API (so they carry their key) and ended through the settlement
// the workflow uses (db/settlement.ts); no worker polls this file's task queue.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import { holdFence } from '../../db/fence';
import { asset, generationTask, taskAttempt, type TaskRow } from '../../db/schema';
import { finishTask } from '../../db/settlement';
import { issueApiKey } from '../../db/tenants';
import { casTaskStatusRow } from '../../db/tasks';
import type { TaskStatus } from '../../domain/states';
import { configToEnv } from '../../config/env';
import { runNodeScript } from '../../harness';
import { costRates, usageReport } from '../../ops/usage';
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

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('usage') });
const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };

let tdb: TestDatabase;
let api: RunningApi;
let closeClient: () => Promise<void>;
let alice: { tenantId: string; apiKey: string };
let bob: { tenantId: string; apiKey: string };
let aliceSecondKey: string;

const SUCCESS_PATH: readonly TaskStatus[] = ['DISPATCHING', 'SUBMITTING', 'SUBMITTED', 'RUNNING', 'PROVIDER_SUCCEEDED', 'FETCHING_OUTPUT', 'PROCESSING_MEDIA'];

let seq = 0;
async function created(apiKey: string, body: Record<string, unknown>): Promise<string> {
  seq += 1;
  const res = await http(api.baseUrl, 'POST', '/v1/tasks', { apiKey, body, headers: { 'idempotency-key': `usage-${seq}` } });
  assert.equal(res.status, 202, JSON.stringify(res.body));
  return res.body.task_id as string;
}

/** Walks the task along `path` and ends it as the workflow would: terminal state and settlement in one transaction. */
async function end(taskId: string, to: 'SUCCEEDED' | 'FAILED' | 'CANCELLED', charge: string, path: readonly TaskStatus[] = []): Promise<void> {
  await tdb.database.db.transaction(async (tx) => {
    await holdFence(tx, token);
    let [task] = (await tx.select().from(generationTask).where(eq(generationTask.task_id, taskId))) as [TaskRow];
    for (const next of path) {
      task = (await casTaskStatusRow(tx, token, {
        taskId,
        from: task.status,
        expectedVersion: task.status_version,
        to: next,
        sourceEvent: 'test',
        actor: 'test',
      }))!;
    }
    assert.ok(await finishTask(tx, token, task, { to, charge, sourceEvent: 'test', actor: 'test' }));
  });
}

/** A provider job of the task, with what it cost (null: unknown). */
async function job(taskId: string, provider: string, cost: { amount: string; unit: 'USD' | 'runway_credit' } | null): Promise<void> {
  const [t] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
  const n = (await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId))).length;
  await tdb.database.db.insert(taskAttempt).values({
    attempt_id: randomUUID(),
    task_id: taskId,
    attempt_no: n + 1,
    provider,
    provider_model: t!.provider_model,
    provider_job_id: `job-${randomUUID()}`,
    submit_state: 'SUCCEEDED',
    provider_cost: cost?.amount ?? null,
    provider_cost_unit: cost?.unit ?? null,
    provider_cost_source: cost ? 'reported' : 'unknown',
  });
}

/** The delivered video's row, with its measured duration. */
async function delivered(taskId: string, seconds: number): Promise<void> {
  const [t] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
  await tdb.database.db.insert(asset).values({
    asset_id: randomUUID(),
    tenant_id: t!.tenant_id,
    task_id: taskId,
    attempt_id: randomUUID(),
    kind: 'video',
    bucket: 'test',
    region: config.REGION,
    object_key: `usage/${taskId}.mp4`,
    sha256: 'x'.repeat(64),
    size_bytes: 1000,
    content_type: 'video/mp4',
    media_info: { durationSeconds: seconds } as never,
  });
}

const minimax = { model: 'minimax/video-01', prompt: 'a red fox in snow', duration_seconds: 6, resolution: '720p' };
const ray = { model: 'luma/ray-2-720p', prompt: 'waves on rocks', duration_seconds: 5, resolution: '720p' };
const today = new Date().toISOString().slice(0, 10);
const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
const window = `from=${today}&to=${tomorrow}`;
const usage = (apiKey: string, query: string, headers: Record<string, string> = {}) => http(api.baseUrl, 'GET', `/v1/usage?${query}`, { apiKey, headers });

before(async () => {
  tdb = await createTestDatabase(config);
  const t = await temporalClient(config);
  closeClient = t.close;
  api = await startApi(config, tdb.database, { client: t.client });
  alice = await createTestTenant(tdb.database, config, '100');
  bob = await createTestTenant(tdb.database, config, '100');
  aliceSecondKey = (await issueApiKey(tdb.database.db, alice.tenantId)).key;
  // Alice: a success (minimax, 4.5 reserved, 4.5 charged, 6 s delivered), a failure (ray, released
  // in full), a cancel before submit (minimax, released), and a success through her second key
  // that delivered less than ordered (ray, 5.25 reserved, 4.2 charged, 4 s).
  const ok = await created(alice.apiKey, minimax);
  await end(ok, 'SUCCEEDED', '4.500000', SUCCESS_PATH);
  await delivered(ok, 6);
  const failed = await created(alice.apiKey, ray);
  await end(failed, 'FAILED', '0', ['DISPATCHING']);
  await end(await created(alice.apiKey, minimax), 'CANCELLED', '0');
  const short = await created(aliceSecondKey, ray);
  await end(short, 'SUCCEEDED', '4.200000', SUCCESS_PATH);
  await delivered(short, 4);
  // What the jobs cost us: the failed task's job 30 Runway credits, the short one's 0.5 USD; the
  // first success's job reported nothing (unknown); the cancelled task never had a job.
  await job(failed, 'runway', { amount: '30.000000', unit: 'runway_credit' });
  await job(short, 'replicate', { amount: '0.500000', unit: 'USD' });
  await job(ok, 'replicate', null);
  // Still open: reserved, not in any usage yet.
  await created(alice.apiKey, minimax);
  // Bob: one success of his own.
  const his = await created(bob.apiKey, minimax);
  await end(his, 'SUCCEEDED', '4.500000', SUCCESS_PATH);
  await delivered(his, 6);
});
after(async () => {
  await api?.close();
  await closeClient?.();
  await tdb?.drop();
});

describe('GET /v1/usage', () => {
  test("the totals are the ledger's: SETTLE charged, RELEASE given back, per closed task", async () => {
    const res = await usage(alice.apiKey, `${window}&group_by=day`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const { rows } = await tdb.database.db.execute<{ settled: string; released: string; tasks: number }>(sql`
      SELECT coalesce(sum(amount) FILTER (WHERE entry_type = 'SETTLE'), 0)::numeric(18,6)::text AS settled,
             coalesce(sum(amount) FILTER (WHERE entry_type = 'RELEASE'), 0)::numeric(18,6)::text AS released,
             count(*) FILTER (WHERE entry_type = 'SETTLE')::int AS tasks
      FROM credit_ledger WHERE tenant_id = ${alice.tenantId}::uuid`);
    const ledger = rows[0]!;
    assert.deepEqual(res.body.totals, { tasks: ledger.tasks, seconds: '10.000', charged: ledger.settled, refunded: ledger.released });
    assert.deepEqual(res.body.totals, { tasks: 4, seconds: '10.000', charged: '8.700000', refunded: '10.800000' });
    assert.deepEqual(res.body.groups, [{ group: today, tasks: 4, seconds: '10.000', charged: '8.700000', refunded: '10.800000' }]);
  });

  test('per model and per API key', async () => {
    const byModel = await usage(alice.apiKey, `${window}&group_by=model`);
    assert.deepEqual(byModel.body.groups, [
      { group: 'luma/ray-2-720p', tasks: 2, seconds: '4.000', charged: '4.200000', refunded: '6.300000' },
      { group: 'minimax/video-01', tasks: 2, seconds: '6.000', charged: '4.500000', refunded: '4.500000' },
    ]);
    const byKey = await usage(alice.apiKey, `${window}&group_by=key`);
    const keyIds = (
      await tdb.database.db.execute<{ key_id: string; n: number }>(sql`
      SELECT api_key_id::text AS key_id, count(*)::int AS n FROM generation_task
      WHERE tenant_id = ${alice.tenantId}::uuid AND terminal_at IS NOT NULL GROUP BY 1`)
    ).rows;
    assert.equal(byKey.body.groups.length, 2);
    for (const g of byKey.body.groups as { group: string; tasks: number }[]) {
      assert.equal(g.tasks, keyIds.find((k) => k.key_id === g.group)?.n, `key ${g.group}`);
    }
  });

  test('Accept: text/csv downloads the same groups as CSV', async () => {
    const res = await fetch(`${api.baseUrl}/v1/usage?${window}&group_by=model`, { headers: { authorization: `Bearer ${alice.apiKey}`, accept: 'text/csv' } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/csv/);
    assert.match(res.headers.get('content-disposition') ?? '', /^attachment; filename="?usage-model-\d{4}-\d{2}-\d{2}-\d{4}-\d{2}-\d{2}\.csv/);
    assert.equal(
      await res.text(),
      'group,tasks,seconds,charged,refunded\r\nluma/ray-2-720p,2,4.000,4.200000,6.300000\r\nminimax/video-01,2,6.000,4.500000,4.500000\r\n',
    );
  });

  test('a bad query is a 400 problem+json naming the field, never a 500', async () => {
    const cases: [string, string][] = [
      [`${window}&group_by=week`, 'query.group_by'],
      [`to=${tomorrow}`, 'query.from'],
      [`from=${tomorrow}&to=${today}`, 'query.to'],
      [`from=2020-01-01&to=${tomorrow}`, 'query.to'],
      [`from=yesterday&to=${tomorrow}`, 'query.from'],
      [`${window}&tenant=${bob.tenantId}`, 'query.tenant'],
    ];
    for (const [query, field] of cases) {
      const res = await usage(alice.apiKey, query);
      assert.equal(res.status, 400, query);
      assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/);
      assert.ok(
        (res.body.errors as { field: string }[]).some((e) => e.field === field),
        `${query}: ${JSON.stringify(res.body.errors)}`,
      );
    }
  });

  test("a tenant never sees another tenant's usage", async () => {
    const his = await usage(bob.apiKey, `${window}&group_by=key`);
    assert.equal(his.status, 200);
    assert.equal(his.body.totals.tasks, 1);
    assert.deepEqual(his.body.totals, { tasks: 1, seconds: '6.000', charged: '4.500000', refunded: '0.000000' });
    const aliceKeys = (await usage(alice.apiKey, `${window}&group_by=key`)).body.groups.map((g: { group: string }) => g.group);
    assert.ok(his.body.groups.every((g: { group: string }) => !aliceKeys.includes(g.group)));
  });
});

describe('ops usage: the same sums with provider cost and margin', () => {
  const rates = costRates(['USD=1', 'runway_credit=0.01']);
  const from = new Date(`${today}T00:00:00Z`);
  const to = new Date(`${tomorrow}T00:00:00Z`);

  test('per model: cost in credits and margin where every job is priced, unknown where one is not', async () => {
    const r = await usageReport(tdb.database.db, { from, to, groupBy: 'model', tenant: (await tenantName(alice.tenantId))!, rates });
    const ray = r.groups.find((g) => g.group === 'luma/ray-2-720p')!;
    assert.deepEqual(
      { tasks: ray.tasks, charged: ray.charged, cost: ray.cost, costCredits: ray.costCredits, margin: ray.margin, unknown: ray.costUnknownJobs },
      { tasks: 2, charged: '4.200000', cost: { USD: '0.500000', runway_credit: '30.000000' }, costCredits: '0.800000', margin: '3.400000', unknown: 0 },
    );
    const minimax = r.groups.find((g) => g.group === 'minimax/video-01')!;
    assert.deepEqual([minimax.costUnknownJobs, minimax.costCredits, minimax.margin], [1, null, null]);
    // Per provider (the task's provider): the tenant's sums again, split.
    assert.equal(
      r.providers.reduce((n, p) => n + p.tasks, 0),
      4,
    );
  });

  test("the tenant's sums are GET /v1/usage's; without --tenant every tenant's", async () => {
    const mine = await usageReport(tdb.database.db, { from, to, groupBy: 'day', tenant: (await tenantName(alice.tenantId))!, rates });
    const api = (await usage(alice.apiKey, `${window}&group_by=day`)).body.groups[0];
    const g = mine.groups[0]!;
    assert.deepEqual({ group: g.group, tasks: g.tasks, seconds: g.seconds, charged: g.charged, refunded: g.refunded }, api);
    const all = await usageReport(tdb.database.db, { from, to, groupBy: 'day', rates });
    assert.equal(all.groups[0]?.tasks, 5);
  });

  test('the CLI prints the report, readable and as --json', async () => {
    const env = { ...configToEnv(config), DATABASE_URL: tdb.url, LOG_LEVEL: 'warn' };
    const name = (await tenantName(alice.tenantId))!;
    const json = await runNodeScript('ops/cli.ts', ['usage', '--from', today, '--to', tomorrow, '--tenant', name, '--json'], env, { timeoutMs: 60_000 });
    assert.equal(json.code, 0, json.stderr);
    const parsed = JSON.parse(json.stdout.trim().split('\n').pop()!) as { groups: { group: string; margin: string | null }[] };
    assert.equal(parsed.groups.find((g) => g.group === 'luma/ray-2-720p')?.margin, '3.400000');
    const text = await runNodeScript('ops/cli.ts', ['usage', '--from', today, '--to', tomorrow, '--group-by', 'provider'], env, { timeoutMs: 60_000 });
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /by provider/);
    assert.match(text.stdout, /margin/);
    const bad = await runNodeScript('ops/cli.ts', ['usage', '--group-by', 'week'], env, { timeoutMs: 60_000 });
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /one of day, model, key, provider/);
  });
});

async function tenantName(tenantId: string): Promise<string | undefined> {
  const { rows } = await tdb.database.db.execute<{ name: string }>(sql`SELECT name FROM tenant WHERE tenant_id = ${tenantId}::uuid`);
  return rows[0]?.name;
}
