// Storage outages while outputs wait to be rescued (docs/decisions/0028, 0029), against two
// real S3 servers of this file's own (primary and fallback) and the simulator's expiring URLs:
// - both buckets down: OUTPUT_AT_RISK with NeedsAttention, then SUCCEEDED byte for byte when
//   the primary returns;
// - a download cut at half resumes with Range from its stored parts;
// - the primary down: the output lands in the fallback bucket, the task SUCCEEDS and its download
//   URL works; the asset reconciler copies it back once the primary returns;
// - the asset reconciler reports an orphaned and a missing object;
// - a URL the provider refuses while storage was down: FAILED OUTPUT_LOST, the reservation released;
// - DELETE /v1/tasks/:id/output, with the hostile cases.
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { and, eq, inArray, sql } from 'drizzle-orm';
import { createTaskWithoutWorkflow as createTaskRow } from '../support/deps';
import { buildFallbackStorage, buildStorage } from '../../config/services';
import { acquireFence } from '../../db/fence';
import { asset, generationTask, opsAudit, taskAttempt, tenant } from '../../db/schema';
import { freePort, startS3, type S3Process } from '../../harness';
import { reconcileAssets, reconcileAssetsToEnd } from '../../storage/asset-reconciler';
import { setTenantOutputRetention } from '../../ops/tenants';
import { expireOutputs } from '../../storage/output-lifecycle';
import type { ObjectStorage } from '../../storage/s3';
import { SA_NEEDS_ATTENTION } from '../../workflows/definitions';
import { defaultRequest, startE2E, type E2E } from '../support/e2e';
import { createTestTenant, eventually, http, testConfig } from '../support/stack';

const MiB = 1024 * 1024;
let e: E2E;
let primary: S3Process | null = null;
let fallback: S3Process | null = null;
let ports: { primary: number; fallback: number };
let primaryStore: ObjectStorage;
let fallbackStore: ObjectStorage;
const dataDir = path.join(os.tmpdir(), `vidorch-s3-outage-${process.pid}`);
const base = testConfig();
const startStorage = (which: 'primary' | 'fallback') =>
  startS3({
    port: ports[which],
    dataDir: path.join(dataDir, which),
    accessKey: which === 'primary' ? base.S3_ACCESS_KEY_ID : base.S3_FALLBACK_ACCESS_KEY_ID,
    secretKey: which === 'primary' ? base.S3_SECRET_ACCESS_KEY : base.S3_FALLBACK_SECRET_ACCESS_KEY,
    buckets: [which === 'primary' ? base.S3_BUCKET_OUTPUTS : base.S3_FALLBACK_BUCKET],
    log: () => undefined,
  });
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const fetchBytes = async (url: string) => Buffer.from(await (await fetch(url)).arrayBuffer());
const reconcilerDeps = () => ({
  db: e.tdb.database.db,
  storage: primaryStore,
  fallbackStorage: fallbackStore,
  token: async () => (await acquireFence(e.tdb.database.db, e.config.FENCE_SCOPE, e.config.REGION)).token,
});
const videoOf = async (taskId: string) =>
  (
    await e.tdb.database.db
      .select()
      .from(asset)
      .where(and(eq(asset.task_id, taskId), eq(asset.kind, 'video')))
  )[0]!;

before(async () => {
  ports = { primary: await freePort(), fallback: await freePort() };
  [primary, fallback] = await Promise.all([startStorage('primary'), startStorage('fallback')]);
  // Any failed rescue counts as "near the deadline", so the outage shows at once.
  e = await startE2E('s3-outage', {
    S3_ENDPOINT: primary.endpoint,
    S3_FALLBACK_ENDPOINT: fallback.endpoint,
    OUTPUT_AT_RISK_MARGIN_MS: String(24 * 3600 * 1000),
    OUTPUT_PART_BYTES: String(5 * MiB),
  });
  primaryStore = buildStorage(e.config);
  fallbackStore = buildFallbackStorage(e.config)!;
});
after(async () => {
  await e?.close();
  await primary?.stop();
  await fallback?.stop();
});

test('both buckets down during rescue: OUTPUT_AT_RISK with NeedsAttention, then SUCCEEDED with the right bytes when the primary returns', async () => {
  await Promise.all([primary!.stop(), fallback!.stop()]);
  try {
    const taskId = await e.createTask('outage-1');
    await e.waitForStatus(taskId, 'OUTPUT_AT_RISK', 60_000);
    const handle = e.client.workflow.getHandle(e.api.facade.workflowIdFor(taskId));
    const needsAttention = async () => (await handle.describe()).typedSearchAttributes.get(SA_NEEDS_ATTENTION);
    await eventually(async () => ((await needsAttention()) === true ? true : undefined), 15_000);

    primary = await startStorage('primary');
    const task = await e.waitForStatus(taskId, 'SUCCEEDED', 90_000);
    assert.equal(sha(await fetchBytes(task.output.download_url)), task.output.sha256);
    const path = task.transitions.map((t: { to: string }) => t.to);
    assert.deepEqual(path.slice(path.indexOf('FETCHING_OUTPUT'), path.indexOf('FETCHING_OUTPUT') + 3), [
      'FETCHING_OUTPUT',
      'OUTPUT_AT_RISK',
      'PROCESSING_MEDIA',
    ]);
    // The workflow publishes its search attributes after the step that wrote SUCCEEDED to
    // Postgres commits, so the flag clears just after the status the API reads, not with it.
    await eventually(async () => ((await needsAttention()) === false ? true : undefined), 15_000);
    assert.equal((await videoOf(taskId)).location, 'primary');
  } finally {
    // Both servers are up again for the tests that follow, whatever this one found.
    if (primary!.exitInfo) primary = await startStorage('primary');
    if (fallback!.exitInfo) fallback = await startStorage('fallback');
  }
});

test('a download cut at half resumes with Range from its stored parts: about half the bytes again, the same sha256', { timeout: 120_000 }, async () => {
  const pad = 40 * MiB;
  e.sim.sim.setFaults({ output: 'reset_mid_body', output_fault_count: 1, output_pad_bytes: pad });
  const before = e.sim.sim.stats();
  try {
    const taskId = await e.createTask('resume-1');
    const task = await e.waitForStatus(taskId, 'SUCCEEDED', 90_000);
    const after = e.sim.sim.stats();
    const size = Number(task.output.size_bytes);
    assert.ok(size > pad, `the padded output is served (${size} bytes)`);
    const served = after.output_bytes - before.output_bytes;
    assert.equal(after.output_reads - before.output_reads, 2, 'one cut read, one resumed read');
    assert.equal(after.output_range_reads - before.output_range_reads, 1, 'the second read asked for a Range');
    // Half was sent before the cut. Starting over would send the whole file again (1.5 × in
    // all); the resumed read sends only what is not stored yet (at least one 5 MiB part is).
    assert.ok(served <= 1.5 * size - 5 * MiB, `served ${served} bytes for a ${size}-byte output: the stored parts were not fetched again`);
    assert.ok(served >= size, `served ${served} ≥ ${size}`);
    const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    const source = await fetchBytes(attempt!.output_url!);
    assert.equal(task.output.sha256, sha(source), 'the recorded sha256 covers the whole object');
    assert.equal(sha(await fetchBytes(task.output.download_url)), sha(source), 'the stored bytes are the source bytes');
  } finally {
    e.sim.sim.setFaults({});
  }
});

test(
  'primary down: the rescue lands in the fallback bucket, SUCCEEDED, download URL works; the asset reconciler copies it back, a second run changes nothing',
  { timeout: 120_000 },
  async () => {
    await primary!.stop();
    let taskId: string;
    try {
      taskId = await e.createTask('fallback-1');
      const task = await e.waitForStatus(taskId, 'SUCCEEDED', 90_000);
      const row = await videoOf(taskId);
      assert.equal(row.location, 'fallback');
      assert.equal(row.bucket, e.config.S3_FALLBACK_BUCKET);
      assert.ok(row.downloaded_at && row.download_ms !== null, 'download time recorded');
      assert.ok(row.source_url && !row.source_url.includes('?'), `source URL kept without its query: ${row.source_url}`);
      assert.ok(task.output.download_url.startsWith(fallback!.endpoint), 'the download URL points at the fallback endpoint');
      assert.equal(sha(await fetchBytes(task.output.download_url)), row.sha256);
      // The thumbnail follows SUCCEEDED, next to its video: in the fallback bucket too.
      const thumbnail = await eventually(
        async () =>
          (
            await e.tdb.database.db
              .select()
              .from(asset)
              .where(and(eq(asset.task_id, taskId), eq(asset.kind, 'thumbnail')))
          )[0],
        20_000,
        100,
      );
      assert.equal(thumbnail.location, 'fallback');
    } finally {
      primary = await startStorage('primary');
    }

    const first = await reconcileAssets(reconcilerDeps(), { dryRun: false, limit: 500 });
    const copied = first.findings.filter((f) => f.kind === 'copied_back' && f.taskId === taskId);
    assert.equal(copied.length, 2, `video and thumbnail copied back: ${JSON.stringify(first.findings)}`);
    const row = await videoOf(taskId);
    assert.equal(row.location, 'primary');
    assert.equal((await primaryStore.head(row.object_key))?.sha256, row.sha256);
    assert.equal(await fallbackStore.head(row.object_key), null, 'the fallback copy is removed');
    const task = await e.getTask(taskId);
    const url = task.output?.download_url;
    assert.ok(url?.startsWith(primary.endpoint), `the download URL points at the primary: ${url}`);
    assert.equal(sha(await fetchBytes(url!)), row.sha256);
    const audits = await e.tdb.database.db
      .select()
      .from(opsAudit)
      .where(and(eq(opsAudit.target_id, taskId), eq(opsAudit.action, 'asset.copy-back')));
    assert.equal(audits.length, 2);

    const second = await reconcileAssets(reconcilerDeps(), { dryRun: false, limit: 500 });
    assert.equal(second.changed, 0, JSON.stringify(second.findings));
    assert.deepEqual(second.findings, []);
  },
);

test('the asset reconciler finds an orphaned object and a missing one, and a dry run changes nothing', async () => {
  const taskId = await e.createTask('reconcile-1');
  await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
  const video = await videoOf(taskId);
  const orphanKey = `tenants/${e.tenant.tenantId}/tasks/${randomUUID()}/attempts/${randomUUID()}/output.mp4`;
  await primaryStore.put(orphanKey, Buffer.from('no row knows me'), { contentType: 'video/mp4', sha256: sha(Buffer.from('no row knows me')) });
  await primaryStore.delete(video.object_key);

  const report = await reconcileAssets(reconcilerDeps(), { dryRun: true, limit: 500 });
  assert.deepEqual(
    report.findings.filter((f) => f.kind === 'orphaned').map((f) => f.key),
    [orphanKey],
  );
  assert.deepEqual(
    report.findings.filter((f) => f.kind === 'missing').map((f) => [f.taskId, f.key]),
    [[taskId, video.object_key]],
  );
  assert.equal(report.changed, 0);
  assert.notEqual(await primaryStore.head(orphanKey), null, 'the orphan is reported, not removed');
  await primaryStore.delete(orphanKey);
});

test("a fallback copy left by a copy-back is removed only while the primary holds the row's object; once the primary lost it, that last copy is kept and reported", async () => {
  const taskId = await e.createTask('stale-fallback-1');
  await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
  const video = await videoOf(taskId);
  assert.equal(video.location, 'primary');
  const bytes = await primaryStore.read(video.object_key);
  // What a copy-back whose removal of the fallback copy failed leaves behind.
  const leaveFallbackCopy = () => fallbackStore.put(video.object_key, bytes, { contentType: video.content_type, sha256: video.sha256 });
  const findings = (r: Awaited<ReturnType<typeof reconcileAssets>>) =>
    r.findings.filter((f) => f.key === video.object_key).map((f) => `${f.kind}: ${f.detail}`);

  await leaveFallbackCopy();
  const first = await reconcileAssets(reconcilerDeps(), { dryRun: false, limit: 500 });
  assert.deepEqual(findings(first), ['orphaned: a stale copy in the fallback bucket; the row says primary; removed']);
  assert.equal(await fallbackStore.head(video.object_key), null, 'the primary holds it: the stale copy is removed');

  // Left behind again, then the primary loses its object (a bucket restore, a lifecycle rule).
  await leaveFallbackCopy();
  await primaryStore.delete(video.object_key);
  try {
    const second = await reconcileAssets(reconcilerDeps(), { dryRun: false, limit: 500 });
    const found = findings(second);
    assert.ok(
      found.some((f) => f.startsWith('missing: ')),
      `the row is reported missing in the primary: ${found.join(' | ')}`,
    );
    assert.ok(
      found.some((f) => /^orphaned: .*; kept: the primary bucket \S+ does not have it \(the only copy\)$/.test(f)),
      found.join(' | '),
    );
    assert.equal((await fallbackStore.head(video.object_key))?.sha256, video.sha256, 'the only copy is not deleted');
  } finally {
    await primaryStore.put(video.object_key, bytes, { contentType: video.content_type, sha256: video.sha256 });
    await fallbackStore.delete(video.object_key);
  }
});

test(
  'a provider URL refused (expired) after storage was down: FAILED OUTPUT_LOST, the reservation released, nothing charged',
  { timeout: 120_000 },
  async () => {
    await Promise.all([primary!.stop(), fallback!.stop()]);
    let taskId: string;
    try {
      taskId = await e.createTask('lost-1');
      await e.waitForStatus(taskId, 'OUTPUT_AT_RISK', 60_000);
      // What an expired signed URL answers: 403. (The simulator checks expiry and signature alike.)
      const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
      const url = new URL(attempt!.output_url!);
      url.searchParams.set('expires', String(Date.now() - 1000));
      await e.tdb.database.db.update(taskAttempt).set({ output_url: url.toString() }).where(eq(taskAttempt.attempt_id, attempt!.attempt_id));
      // A rescue already running holds the old URL: let it fail on the stopped storage first.
      await new Promise((r) => setTimeout(r, 4_000));
    } finally {
      [primary, fallback] = await Promise.all([startStorage('primary'), startStorage('fallback')]);
    }
    const task = await e.waitForStatus(taskId, 'FAILED', 90_000);
    assert.equal(task.failure.code, 'OUTPUT_LOST');
    assert.equal(task.output, null);
    const ledger = await e.ledgerOf(taskId);
    assert.equal(ledger['RELEASE'], ledger['RESERVE'], `the reservation is released: ${JSON.stringify(ledger)}`);
    assert.equal(Number(ledger['SETTLE'] ?? 0), 0, 'nothing charged');
  },
);

test(
  'a provider that reissues output URLs (Runway) is asked for a fresh one when the stored URL is refused: SUCCEEDED, not lost',
  { timeout: 120_000 },
  async () => {
    await Promise.all([primary!.stop(), fallback!.stop()]);
    let taskId: string;
    try {
      taskId = await e.createTask('refresh-1', { model: 'gen4.5', prompt: 'a red fox', duration_seconds: 5, resolution: '720p' });
      await e.waitForStatus(taskId, 'OUTPUT_AT_RISK', 60_000);
      const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
      assert.equal(attempt!.provider, 'runway');
      const url = new URL(attempt!.output_url!);
      url.searchParams.set('expires', String(Date.now() - 1000));
      await e.tdb.database.db.update(taskAttempt).set({ output_url: url.toString() }).where(eq(taskAttempt.attempt_id, attempt!.attempt_id));
      await new Promise((r) => setTimeout(r, 4_000));
    } finally {
      [primary, fallback] = await Promise.all([startStorage('primary'), startStorage('fallback')]);
    }
    const task = await e.waitForStatus(taskId, 'SUCCEEDED', 90_000);
    const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    assert.ok(attempt!.output_deadline_at! > new Date(), "the attempt carries the reissued URL's deadline");
    assert.equal(sha(await fetchBytes(task.output.download_url)), task.output.sha256);
  },
);

test('DELETE /v1/tasks/:id/output removes the objects, the task keeps its facts; another tenant 404, no output 409, repeat answers the same', async () => {
  const taskId = await e.createTask('delete-1');
  const done = await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
  // The video, and the thumbnail made just after SUCCEEDED.
  const keys = await eventually(
    async () => {
      const all = (await e.tdb.database.db.select().from(asset).where(eq(asset.task_id, taskId))).map((a) => a.object_key);
      return all.length === 2 ? all : undefined;
    },
    20_000,
    100,
  );

  const other = await createTestTenant(e.tdb.database, e.config, '10');
  const foreign = await http(e.api.baseUrl, 'DELETE', `/v1/tasks/${taskId}/output`, { apiKey: other.apiKey });
  assert.equal(foreign.status, 404);
  for (const k of keys) assert.notEqual(await primaryStore.head(k), null, "another tenant's DELETE removed nothing");
  assert.equal((await http(e.api.baseUrl, 'DELETE', `/v1/tasks/not-a-uuid/output`, { apiKey: e.tenant.apiKey })).status, 404);

  const res = await http(e.api.baseUrl, 'DELETE', `/v1/tasks/${taskId}/output`, { apiKey: e.tenant.apiKey });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.objects_deleted, 2);
  for (const k of keys) assert.equal(await primaryStore.head(k), null, `${k} removed`);
  const after = await e.getTask(taskId);
  assert.equal(after.status, 'SUCCEEDED');
  assert.equal(after.output?.deleted_at, res.body.deleted_at);
  assert.equal(after.output?.download_url, null);
  assert.equal(after.output?.sha256, done.output.sha256, 'the facts stay');
  assert.deepEqual(after.ledger, done.ledger);
  const again = await http(e.api.baseUrl, 'DELETE', `/v1/tasks/${taskId}/output`, { apiKey: e.tenant.apiKey });
  assert.equal(again.status, 200);
  assert.equal(again.body.deleted_at, res.body.deleted_at);
  const audits = await e.tdb.database.db
    .select()
    .from(opsAudit)
    .where(and(eq(opsAudit.target_id, taskId), eq(opsAudit.action, 'output.delete')));
  assert.equal(audits.length, 1);
  assert.equal(audits[0]!.actor, `tenant:${e.tenant.tenantId}`);

  // A task that has not produced an output: 409 problem+json, nothing written.
  const queued = await createTaskRow(
    e.tdb.database.db,
    { scope: e.config.FENCE_SCOPE, region: e.config.REGION, epoch: 1 },
    {
      tenantId: e.tenant.tenantId,
      idempotencyKey: `no-output-${Date.now()}`,
      body: { ...defaultRequest, resolution: '720p', priority: 0 },
    },
  );
  const conflict = await http(e.api.baseUrl, 'DELETE', `/v1/tasks/${queued.task.task_id}/output`, { apiKey: e.tenant.apiKey });
  assert.equal(conflict.status, 409);
  assert.match(conflict.headers.get('content-type') ?? '', /application\/problem\+json/);
  assert.match(conflict.body.detail, /the task is QUEUED; its output can be deleted once it has ended/);

  // The asset reconciler does not call the deleted output missing.
  const report = await reconcileAssets(reconcilerDeps(), { dryRun: true, limit: 500 });
  assert.deepEqual(
    report.findings.filter((f) => f.taskId === taskId),
    [],
  );
});

test("output retention: a task past its tenant's output_retention_days loses its objects (audited), one inside it keeps them, a second run changes nothing", async () => {
  const [oldTask, newTask] = [await e.createTask('retention-old'), await e.createTask('retention-new')];
  await Promise.all([e.waitForStatus(oldTask, 'SUCCEEDED', 60_000), e.waitForStatus(newTask, 'SUCCEEDED', 60_000)]);
  const db = e.tdb.database.db;
  const [row] = await db.select().from(tenant).where(eq(tenant.tenant_id, e.tenant.tenantId));
  await setTenantOutputRetention(db, {
    name: row!.name,
    days: 7,
    reason: 'test',
    actor: 'operator:test',
    fence: { scope: e.config.FENCE_SCOPE, region: e.config.REGION },
  });
  await db
    .update(generationTask)
    .set({ terminal_at: new Date(Date.now() - 8 * 86_400_000) })
    .where(eq(generationTask.task_id, oldTask));
  const deps = { db, stores: { storage: primaryStore, fallbackStorage: fallbackStore }, token: reconcilerDeps().token, now: () => new Date(), defaultDays: 0 };

  const dry = await expireOutputs(deps, { dryRun: true, limit: 100 });
  assert.deepEqual(
    dry.findings.map((f) => f.taskId),
    [oldTask],
  );
  assert.equal(dry.changed, 0);
  const applied = await expireOutputs(deps, { dryRun: false, limit: 100 });
  assert.equal(applied.changed, 1);
  assert.equal(await primaryStore.head((await videoOf(oldTask)).object_key), null);
  assert.notEqual(await primaryStore.head((await videoOf(newTask)).object_key), null, 'inside its retention: kept');
  assert.ok((await e.getTask(oldTask)).output?.deleted_at);
  const audits = await db
    .select()
    .from(opsAudit)
    .where(and(eq(opsAudit.target_id, oldTask), eq(opsAudit.action, 'output.delete')));
  assert.equal(audits[0]?.actor, 'retention');
  assert.equal((await expireOutputs(deps, { dryRun: false, limit: 100 })).changed, 0);
});

test('a FAILED task that kept its stored video (the media step refused the bytes) loses it to retention and to DELETE like a SUCCEEDED one', async () => {
  const [expiring, deleting] = [await e.createTask('failed-retention'), await e.createTask('failed-delete')];
  await Promise.all([e.waitForStatus(expiring, 'SUCCEEDED', 60_000), e.waitForStatus(deleting, 'SUCCEEDED', 60_000)]);
  const db = e.tdb.database.db;
  // What an INVALID_MEDIA task leaves: the rescued video stored, the task FAILED.
  await db
    .update(generationTask)
    .set({ status: 'FAILED', failure_code: 'INVALID_MEDIA' })
    .where(inArray(generationTask.task_id, [expiring, deleting]));
  await db
    .update(generationTask)
    .set({ terminal_at: new Date(Date.now() - 400 * 86_400_000) })
    .where(eq(generationTask.task_id, expiring));
  const deps = { db, stores: { storage: primaryStore, fallbackStorage: fallbackStore }, token: reconcilerDeps().token, now: () => new Date(), defaultDays: 30 };
  const applied = await expireOutputs(deps, { dryRun: false, limit: 100 });
  assert.ok(applied.findings.some((f) => f.taskId === expiring));
  assert.equal(await primaryStore.head((await videoOf(expiring)).object_key), null);

  const deleted = await http(e.api.baseUrl, 'DELETE', `/v1/tasks/${deleting}/output`, { apiKey: e.tenant.apiKey });
  assert.ok(deleted.status === 200 || deleted.status === 202 || deleted.status === 204, JSON.stringify(deleted.body));
  assert.equal(await primaryStore.head((await videoOf(deleting)).object_key), null);
});

test('DELETE /v1/tasks/:id/output while the primary is down: 503 problem+json with Retry-After, nothing recorded; it succeeds once storage is back', async () => {
  const taskId = await e.createTask('delete-outage');
  await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
  await primary!.stop();
  try {
    const res = await http(e.api.baseUrl, 'DELETE', `/v1/tasks/${taskId}/output`, { apiKey: e.tenant.apiKey });
    assert.equal(res.status, 503, JSON.stringify(res.body));
    assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/);
    assert.ok(res.headers.get('retry-after'));
    assert.equal((await videoOf(taskId)).deleted_at, null, 'nothing recorded');
    assert.equal((await e.getTask(taskId)).output?.deleted_at, null);
  } finally {
    primary = await startStorage('primary');
  }
  const res = await http(e.api.baseUrl, 'DELETE', `/v1/tasks/${taskId}/output`, { apiKey: e.tenant.apiKey });
  assert.equal(res.status, 200);
  assert.equal(await primaryStore.head((await videoOf(taskId)).object_key), null);
});

test('the asset reconciler pages: with more rows and objects than one run looks at, successive runs reach every one, then start over', async () => {
  const db = e.tdb.database.db;
  const taskIds = [await e.createTask('paging-1'), await e.createTask('paging-2'), await e.createTask('paging-3')];
  for (const id of taskIds) await e.waitForStatus(id, 'SUCCEEDED', 60_000);
  // Three rows whose objects are gone, and four objects no row knows.
  const videos = await Promise.all(taskIds.map(videoOf));
  for (const v of videos) await primaryStore.delete(v.object_key);
  const orphans = Array.from({ length: 4 }, () => `tenants/${e.tenant.tenantId}/tasks/${randomUUID()}/attempts/${randomUUID()}/output.mp4`);
  for (const key of orphans) await primaryStore.put(key, Buffer.from(key), { contentType: 'video/mp4', sha256: sha(Buffer.from(key)) });
  const live = (await db.select().from(asset)).filter((a) => a.deleted_at === null).length;
  // The three rows share one created_at to the microsecond (rows of one transaction's now()), and
  // are the oldest: a page boundary falls inside the group.
  await db
    .update(asset)
    .set({ created_at: sql`'2000-01-01 00:00:00.123456+00'::timestamptz` })
    .where(
      inArray(
        asset.asset_id,
        videos.map((v) => v.asset_id),
      ),
    );

  const missing = new Set<string>();
  const orphaned = new Set<string>();
  let cursor: Parameters<typeof reconcileAssets>[1]['cursor'] = null;
  let runs = 0;
  do {
    const report = await reconcileAssets(reconcilerDeps(), { dryRun: true, limit: 2, cursor });
    for (const f of report.findings) {
      if (f.kind === 'missing' && f.key) missing.add(f.key);
      if (f.kind === 'orphaned' && f.key) orphaned.add(f.key);
    }
    cursor = report.cursor;
    runs += 1;
  } while (cursor && runs < 200);
  assert.equal(cursor, null, 'a pass ends');
  assert.ok(runs >= Math.ceil(live / 2), `${runs} runs of 2 for ${live} live rows`);
  for (const v of videos) assert.ok(missing.has(v.object_key), `row ${v.object_key} reached`);
  for (const key of orphans) assert.ok(orphaned.has(key), `object ${key} reached`);
  // The pass over, the next run starts from the first page again.
  const again = await reconcileAssets(reconcilerDeps(), { dryRun: true, limit: 2, cursor: null });
  assert.ok(again.cursor !== null, 'more than one page: the new pass goes on');
  for (const key of orphans) await primaryStore.delete(key);
});

test('copy-back pages past fallback rows that fail for good: the one behind them is copied back, the others stay and are reported', async () => {
  const db = e.tdb.database.db;
  const taskIds = [await e.createTask('copy-page-1'), await e.createTask('copy-page-2')];
  for (const id of taskIds) await e.waitForStatus(id, 'SUCCEEDED', 60_000);
  const rows = await eventually(async () => {
    const all = await db.select().from(asset).where(inArray(asset.task_id, taskIds));
    return all.length === 4 ? all : undefined;
  }, 20_000);
  // Three rows whose fallback copy does not hash to their sha256, then one good row: the oldest
  // three fill a run of 2 and a half, so a copy-back that always took the oldest page would
  // never reach the good one.
  const order = [...rows].sort((a, b) => (a.kind === b.kind ? a.task_id.localeCompare(b.task_id) : a.kind === 'video' ? -1 : 1));
  const [bad1, bad2, bad3, good] = order as [typeof asset.$inferSelect, typeof asset.$inferSelect, typeof asset.$inferSelect, typeof asset.$inferSelect];
  for (const [i, row] of [bad1, bad2, bad3, good].entries()) {
    const bytes = row === good ? await fetchBytes(await primaryStore.presignGet(row.object_key, 60)) : Buffer.from(`not the bytes of ${row.object_key}`);
    await fallbackStore.put(row.object_key, bytes, { contentType: row.content_type, sha256: row.sha256 });
    await primaryStore.delete(row.object_key);
    await db
      .update(asset)
      .set({ location: 'fallback', bucket: e.config.S3_FALLBACK_BUCKET, created_at: sql`${`2000-01-02 00:00:00.00000${i}+00`}::timestamptz` })
      .where(eq(asset.asset_id, row.asset_id));
  }

  let cursor: Parameters<typeof reconcileAssets>[1]['cursor'] = null;
  const mismatched = new Set<string>();
  for (let run = 0; run < 3; run++) {
    const report = await reconcileAssets(reconcilerDeps(), { dryRun: false, limit: 2, cursor });
    for (const f of report.findings) if (f.kind === 'checksum_mismatch' && f.key) mismatched.add(f.key);
    cursor = report.cursor;
  }
  const [after] = await db.select().from(asset).where(eq(asset.asset_id, good.asset_id));
  assert.equal(after!.location, 'primary', 'the row behind three failing ones is copied back');
  // What `ops assets --all` runs: from the start to the end of a pass, a page at a time.
  const pagesSeen: number[] = [];
  const all = await reconcileAssetsToEnd(reconcilerDeps(), { dryRun: true, limit: 2 }, (page) => pagesSeen.push(page));
  assert.equal(all.cursor, null, 'the pass ended');
  assert.equal(all.stalled, false);
  assert.deepEqual(
    pagesSeen,
    Array.from({ length: all.pages - 1 }, (_, i) => i + 1),
    'a progress call a page but the last',
  );
  for (const bad of [bad1, bad2, bad3]) {
    assert.ok(
      all.findings.some((f) => f.kind === 'in_fallback' && f.key === bad.object_key),
      `${bad.object_key} reached by the pass`,
    );
  }
  assert.equal((await primaryStore.head(good.object_key))?.sha256, good.sha256);
  for (const bad of [bad1, bad2, bad3]) {
    assert.ok(mismatched.has(bad.object_key), `${bad.object_key} reported`);
    const [now] = await db.select().from(asset).where(eq(asset.asset_id, bad.asset_id));
    assert.equal(now!.location, 'fallback', 'a failing row stays where it is');
    await db.update(asset).set({ deleted_at: new Date() }).where(eq(asset.asset_id, bad.asset_id));
    await fallbackStore.delete(bad.object_key);
  }
});

test('a bucket listing past the 1,000 keys ListObjectsV2 answers at a time is paged to the limit asked, and goes on after its last key', async () => {
  const prefix = `tenants/listing-${randomUUID()}/`;
  const keys = Array.from({ length: 1_005 }, (_, i) => `${prefix}${String(i).padStart(5, '0')}`);
  for (let i = 0; i < keys.length; i += 50) {
    await Promise.all(
      keys.slice(i, i + 50).map((key) => primaryStore.put(key, Buffer.from('x'), { contentType: 'text/plain', sha256: sha(Buffer.from('x')) })),
    );
  }
  const first = await primaryStore.list(prefix, { limit: 1_003 });
  assert.deepEqual(
    first.map((o) => o.key),
    keys.slice(0, 1_003),
  );
  const rest = await primaryStore.list(prefix, { limit: 1_003, after: first.at(-1)!.key });
  assert.deepEqual(
    rest.map((o) => o.key),
    keys.slice(1_003),
  );
  for (let i = 0; i < keys.length; i += 50) await Promise.all(keys.slice(i, i + 50).map((key) => primaryStore.delete(key)));
});
