// The rescue goes on into the media step in the same activity (docs/decisions/0009): a stored
// output becomes SUCCEEDED without a second dispatch. When the media part fails, the task stays
// in PROCESSING_MEDIA with its video stored once; the retry of the same activity skips the bytes
// and finishes, and a run that stopped in PROCESSING_MEDIA can still finish with processMedia.
// The thumbnail follows SUCCEEDED (docs/decisions/0036-thumbnail-off-the-path.md): made by the
// worker's follow-up once the task succeeded, announced once (task.thumbnail_ready), and when the
// follow-up fails, made by the thumbnails reconciler; SUCCEEDED never waits for it.
// Real Postgres, S3 server and simulator (MockActivityEnvironment).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { makeThumbnail } from '../../activities/thumbnail';
import { acquireFence } from '../../db/fence';
import { ModePausedError, setMode } from '../../db/modes';
import { asset, creditLedger, generationTask, taskTransition, webhookDelivery, webhookEvent } from '../../db/schema';
import { insertEndpoint } from '../../db/webhooks';
import { reconcileSettings } from '../../reconcilers/settings';
import { thumbnailsReconciler } from '../../reconcilers/thumbnails';
import type { ReconcileDeps } from '../../reconcilers/types';
import { deleteTaskOutput, expireOutputs } from '../../storage/output-lifecycle';
import { thumbnailObjectKey, type ObjectStorage } from '../../storage/s3';
import { createGenerationFacade } from '../../temporal/facade';
import { providerSucceededTask, startActivityWorld, withPresignFailures, type ActivityWorld } from '../support/activities';
import { eventually, testLogger } from '../support/stack';

let w: ActivityWorld;
let storage: ObjectStorage;
/** While above 0, the media step's presigned GET fails (the storage is unreachable for it). */
const presignFailures = { left: 0 };
/** While true, storing a thumbnail fails (the follow-up cannot make it). */
const thumbnailPuts = { fail: false };
before(async () => {
  w = await startActivityWorld({
    generationMs: 100,
    deps: (d) => {
      storage = withThumbnailPutFailures(withPresignFailures(d.storage, presignFailures), thumbnailPuts);
      return { ...d, storage };
    },
  });
  await insertEndpoint(w.tdb.database.db, {
    tenantId: w.tenantId,
    url: 'https://hooks.example.com/thumbnails',
    description: null,
    events: ['task.thumbnail_ready'],
  });
});
after(() => w?.close());

const providerSucceeded = () => providerSucceededTask(w, 'media');

const statusOf = async (id: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!.status;
const assetsOf = async (id: string) => (await w.tdb.database.db.select().from(asset).where(eq(asset.task_id, id))).map((a) => a.kind).sort();
const settlesOf = async (id: string) =>
  (
    await w.tdb.database.db
      .select()
      .from(creditLedger)
      .where(and(eq(creditLedger.task_id, id), eq(creditLedger.entry_type, 'SETTLE')))
  ).length;

function withThumbnailPutFailures(inner: ObjectStorage, flag: { fail: boolean }): ObjectStorage {
  const wrapped: ObjectStorage = Object.create(inner) as ObjectStorage;
  wrapped.put = async (key, body, opts) => {
    if (flag.fail && key.endsWith('/thumbnail.jpg')) throw new Error('thumbnail put failed (test)');
    return inner.put(key, body, opts);
  };
  return wrapped;
}

/** The thumbnail exists: its one row (and its one task.thumbnail_ready event). */
const thumbnailMade = (id: string) => eventually(async () => ((await assetsOf(id)).includes('thumbnail') ? true : undefined), 20_000, 100);
const thumbnailEventsOf = (id: string) =>
  w.tdb.database.db
    .select()
    .from(webhookEvent)
    .where(and(eq(webhookEvent.task_id, id), eq(webhookEvent.event_type, 'task.thumbnail_ready')));

const reconcileDeps = (): ReconcileDeps => ({
  db: w.tdb.database.db,
  // The thumbnails reconciler makes fenced writes only; it never starts or wakes a workflow.
  facade: createGenerationFacade(() => Promise.reject(new Error('no Temporal in this test')), 'unused'),
  fence: { scope: w.config.FENCE_SCOPE, region: w.config.REGION },
  storage,
  fallbackStorage: null,
  settings: { ...reconcileSettings(w.config), graceSeconds: 0 },
  logger: testLogger,
});

describe('rescueOutput goes on into the media step', () => {
  test('one activity takes a succeeded job to SUCCEEDED, settled once; the thumbnail follows, announced once', async () => {
    const id = await providerSucceeded();
    const facts = await w.run('rescueOutput', id);
    assert.equal(facts.status, 'SUCCEEDED');
    assert.equal(await settlesOf(id), 1);
    await thumbnailMade(id);
    assert.deepEqual(await assetsOf(id), ['thumbnail', 'video']);

    const db = w.tdb.database.db;
    const [succeeded] = await db
      .select()
      .from(taskTransition)
      .where(and(eq(taskTransition.task_id, id), eq(taskTransition.to_status, 'SUCCEEDED')));
    const [thumb] = await db
      .select()
      .from(asset)
      .where(and(eq(asset.task_id, id), eq(asset.kind, 'thumbnail')));
    assert.ok(thumb!.created_at.getTime() >= succeeded!.created_at.getTime(), 'the thumbnail is recorded after SUCCEEDED, not before');
    const events = await thumbnailEventsOf(id);
    assert.equal(events.length, 1, 'one task.thumbnail_ready');
    assert.equal(events[0]!.status, 'SUCCEEDED');
    assert.equal(events[0]!.status_version, succeeded!.to_version, "at the version of the task's task.succeeded");
    assert.deepEqual(events[0]!.data['thumbnail'], { sha256: thumb!.sha256, size_bytes: thumb!.size_bytes, content_type: 'image/jpeg' });
    const deliveries = await db.select().from(webhookDelivery).where(eq(webhookDelivery.event_id, events[0]!.event_id));
    assert.equal(deliveries.length, 1, 'one delivery, to the endpoint subscribed to task.thumbnail_ready');

    assert.equal(await makeThumbnail(reconcileDeps(), id), 'present', 'made once: a second call finds the row');
    assert.equal((await thumbnailEventsOf(id)).length, 1, 'and announces nothing again');
  });

  test('SUCCEEDED does not wait for the thumbnail: its store failing, the task succeeds, and the reconciler makes it', async () => {
    const id = await providerSucceeded();
    thumbnailPuts.fail = true;
    try {
      assert.equal((await w.run('rescueOutput', id)).status, 'SUCCEEDED');
      assert.equal(await settlesOf(id), 1);
      // The follow-up tries and fails in the background; the task stays SUCCEEDED without one.
      await new Promise((r) => setTimeout(r, 1_500));
      assert.deepEqual(await assetsOf(id), ['video']);
      assert.equal((await thumbnailEventsOf(id)).length, 0);
    } finally {
      thumbnailPuts.fail = false;
    }
    const dry = await thumbnailsReconciler.run(reconcileDeps(), { dryRun: true, limit: 100 });
    assert.ok(
      dry.findings.some((f) => f.taskId === id && f.kind === 'missing-thumbnail'),
      'the reconciler finds it',
    );
    assert.equal(dry.changed, 0);
    assert.deepEqual(await assetsOf(id), ['video'], 'a dry run makes nothing');

    const run = await thumbnailsReconciler.run(reconcileDeps(), { dryRun: false, limit: 100 });
    assert.ok(
      run.findings.some((f) => f.taskId === id && /made/.test(f.detail)),
      JSON.stringify(run.findings),
    );
    assert.deepEqual(await assetsOf(id), ['thumbnail', 'video']);
    assert.equal((await thumbnailEventsOf(id)).length, 1);
    const again = await thumbnailsReconciler.run(reconcileDeps(), { dryRun: false, limit: 100 });
    assert.ok(!again.findings.some((f) => f.taskId === id), 'nothing left to make for it');
  });

  test('a thumbnail is not made for a deleted output', async () => {
    const id = await providerSucceeded();
    thumbnailPuts.fail = true;
    try {
      assert.equal((await w.run('rescueOutput', id)).status, 'SUCCEEDED');
      await new Promise((r) => setTimeout(r, 1_500));
    } finally {
      thumbnailPuts.fail = false;
    }
    const token = (await acquireFence(w.tdb.database.db, w.config.FENCE_SCOPE, w.config.REGION)).token;
    const deleted = await deleteTaskOutput(w.tdb.database.db, { storage }, token, {
      taskId: id,
      tenantId: w.tenantId,
      actor: 'test',
      reason: 'test',
      now: new Date(),
    });
    assert.equal(deleted.kind, 'deleted');
    assert.equal(await makeThumbnail(reconcileDeps(), id), 'not-applicable');
    assert.deepEqual(await assetsOf(id), ['video']);
    const [video] = await w.tdb.database.db
      .select()
      .from(asset)
      .where(and(eq(asset.task_id, id), eq(asset.kind, 'video')));
    assert.equal(await storage.head(thumbnailObjectKey(video!.tenant_id, id, video!.attempt_id)), null, 'no thumbnail object either');
    const run = await thumbnailsReconciler.run(reconcileDeps(), { dryRun: true, limit: 100 });
    assert.ok(!run.findings.some((f) => f.taskId === id), 'the reconciler does not look for it');
  });

  test('a mode that pauses changes, read fresh, stops an output delete before its objects go; retention reports it and waits', async () => {
    const id = await providerSucceeded();
    assert.equal((await w.run('rescueOutput', id)).status, 'SUCCEEDED');
    await thumbnailMade(id);
    const db = w.tdb.database.db;
    const [video] = await db
      .select()
      .from(asset)
      .where(and(eq(asset.task_id, id), eq(asset.kind, 'video')));
    // Ended long ago, past any retention, so the retention job picks it first.
    await db
      .update(generationTask)
      .set({ terminal_at: new Date('2020-01-01T00:00:00Z') })
      .where(eq(generationTask.task_id, id));
    // The token was read before the operator's `mode set` (the API's admission caches the mode).
    const token = (await acquireFence(db, w.config.FENCE_SCOPE, w.config.REGION)).token;
    const scope = { scope: w.config.FENCE_SCOPE, actor: 'operator:test', reason: 'write freeze' };
    await setMode(db, { ...scope, mode: 'READ_ONLY' });
    try {
      await assert.rejects(
        deleteTaskOutput(db, { storage }, token, { taskId: id, tenantId: w.tenantId, actor: 'test', reason: 'test', now: new Date() }),
        (err: unknown) => err instanceof ModePausedError && err.mode === 'READ_ONLY',
      );
      assert.ok(await storage.head(video!.object_key), 'the video object is still there');
      const report = await expireOutputs(
        { db, stores: { storage }, token: async () => token, now: () => new Date(), defaultDays: 1 },
        { dryRun: false, limit: 10 },
      );
      assert.equal(report.changed, 0);
      assert.match(report.findings.find((f) => f.taskId === id)?.detail ?? '', /not deleted: system mode is READ_ONLY/);
      assert.ok(await storage.head(video!.object_key), 'still there after the retention run');
      const rows = await db.select().from(asset).where(eq(asset.task_id, id));
      assert.deepEqual(
        rows.map((r) => r.deleted_at),
        [null, null],
        'no row marked deleted',
      );
    } finally {
      await setMode(db, { ...scope, mode: 'NORMAL' });
    }
    const deleted = await deleteTaskOutput(db, { storage }, token, { taskId: id, tenantId: w.tenantId, actor: 'test', reason: 'test', now: new Date() });
    assert.equal(deleted.kind, 'deleted', 'once reopened the same request deletes it');
    assert.equal(await storage.head(video!.object_key), null);
  });

  test('a delete already past its mode check when `mode set READ_ONLY` commits finishes and records what storage did', async () => {
    const id = await providerSucceeded();
    assert.equal((await w.run('rescueOutput', id)).status, 'SUCCEEDED');
    await thumbnailMade(id);
    const db = w.tdb.database.db;
    const scope = { scope: w.config.FENCE_SCOPE, actor: 'operator:test', reason: 'write freeze' };
    // The operator narrows the mode while the first object is being deleted.
    const narrowing: ObjectStorage = Object.create(storage) as ObjectStorage;
    let narrowed = false;
    narrowing.delete = async (key) => {
      if (!narrowed) {
        narrowed = true;
        await setMode(db, { ...scope, mode: 'READ_ONLY' });
      }
      return storage.delete(key);
    };
    const token = (await acquireFence(db, w.config.FENCE_SCOPE, w.config.REGION)).token;
    try {
      const deleted = await deleteTaskOutput(db, { storage: narrowing }, token, {
        taskId: id,
        tenantId: w.tenantId,
        actor: 'test',
        reason: 'test',
        now: new Date(),
      });
      assert.ok(narrowed);
      assert.equal(deleted.kind, 'deleted');
      const rows = await db.select().from(asset).where(eq(asset.task_id, id));
      assert.equal(rows.length, 2);
      for (const row of rows) {
        assert.ok(row.deleted_at, `${row.kind} row marked deleted`);
        assert.equal(await storage.head(row.object_key), null, `${row.kind} object gone`);
      }
    } finally {
      await setMode(db, { ...scope, mode: 'NORMAL' });
    }
  });

  test('the media part fails: PROCESSING_MEDIA with the video stored; the retry skips the bytes and finishes', async () => {
    const id = await providerSucceeded();
    presignFailures.left = 1;
    await assert.rejects(w.run('rescueOutput', id), /storage unreachable/);
    assert.equal(await statusOf(id), 'PROCESSING_MEDIA');
    assert.deepEqual(await assetsOf(id), ['video']);
    const downloadsBefore = w.sim.sim.stats().output_reads;

    const facts = await w.run('rescueOutput', id);
    assert.equal(facts.status, 'SUCCEEDED');
    assert.equal(w.sim.sim.stats().output_reads, downloadsBefore, 'the stored output was not fetched again');
    await thumbnailMade(id);
    assert.deepEqual(await assetsOf(id), ['thumbnail', 'video']);
    assert.equal(await settlesOf(id), 1);
  });

  test('a run left in PROCESSING_MEDIA finishes with its own processMedia step, once', async () => {
    const id = await providerSucceeded();
    presignFailures.left = 1;
    await assert.rejects(w.run('rescueOutput', id));
    assert.equal((await w.run('processMedia', id)).status, 'SUCCEEDED');
    assert.equal((await w.run('processMedia', id)).status, 'SUCCEEDED', 'again: nothing changes');
    await thumbnailMade(id);
    assert.deepEqual(await assetsOf(id), ['thumbnail', 'video']);
    assert.equal((await thumbnailEventsOf(id)).length, 1, 'one thumbnail, announced once');
    assert.equal(await settlesOf(id), 1);
  });
});
