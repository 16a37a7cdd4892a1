// A broken download never kills the process that runs it: a connection reset mid-body, or the
// activity being cancelled mid-body (heartbeat timeout, worker shutdown, the fence watcher), is a
// retryable failure of the rescue activity, and the retry stores the output whole. Real
// Postgres, S3 server and simulator (MockActivityEnvironment); the simulator's
// 'reset_mid_body' output fault cuts the download (docs/providers.md).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { inspect } from 'node:util';
import { after, afterEach, before, beforeEach, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure } from '@temporalio/common';
import { eq } from 'drizzle-orm';
import { buildStorage } from '../../config/services';
import { asset, generationTask, outputDownload, taskAttempt } from '../../db/schema';
import { outputObjectKey } from '../../storage/s3';
import { providerSucceededTask, startActivityWorld, type ActivityWorld } from '../support/activities';
import { eventually } from '../support/stack';

let w: ActivityWorld;
/** Errors nobody handled while a test ran: what would have ended a worker process. */
const uncaught: unknown[] = [];
const onUncaught = (err: unknown) => void uncaught.push(err);
before(async () => {
  w = await startActivityWorld({ generationMs: 100 });
});
after(() => w?.close());
beforeEach(() => {
  uncaught.length = 0;
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
});
afterEach(() => {
  process.off('uncaughtException', onUncaught);
  process.off('unhandledRejection', onUncaught);
  w.sim.sim.clearFaults();
});

const providerSucceeded = () => providerSucceededTask(w, 'cut');

const statusOf = async (id: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!.status;
const videosOf = async (id: string) => (await w.tdb.database.db.select().from(asset).where(eq(asset.task_id, id))).filter((a) => a.kind === 'video');

/** Retryable in Temporal's terms: a plain error, or an ApplicationFailure not marked non-retryable. */
const retryable = (err: unknown) => !(err instanceof ApplicationFailure && err.nonRetryable);

test('a download reset mid-body is a retryable rescue failure, the process lives, and the retry stores the whole output', { timeout: 60_000 }, async () => {
  const id = await providerSucceeded();
  w.sim.sim.setFaults({ output: 'reset_mid_body', output_fault_count: 1 });
  const err = await w.run('rescueOutput', id).then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(err, 'the cut download failed the activity');
  assert.ok(retryable(err), `retryable: ${inspect(err)}`);
  assert.deepEqual(uncaught, [], 'no unhandled error: a worker would still be running');
  assert.equal(await statusOf(id), 'FETCHING_OUTPUT');
  assert.equal((await videosOf(id)).length, 0, 'nothing recorded from the cut body');

  const facts = await w.run('rescueOutput', id);
  assert.equal(facts.status, 'SUCCEEDED');
  const [video] = await videosOf(id);
  assert.ok(video && video.size_bytes > 0);
  assert.equal(w.sim.sim.stats().output_reads >= 2, true);
});

test('a rescue cancelled mid-body (heartbeat timeout, worker shutdown) fails without an unhandled error', { timeout: 60_000 }, async (t) => {
  // An output server that sends the headers and a first chunk, then stalls.
  const stalled: Server = createServer((_req, res) => {
    res.writeHead(200, { 'Content-Type': 'video/mp4', 'Content-Length': '1000000' });
    res.write(Buffer.alloc(64 * 1024));
  });
  await new Promise<void>((resolve) => stalled.listen(0, '127.0.0.1', () => resolve()));
  t.after(() => {
    stalled.closeAllConnections();
    stalled.close();
  });
  const id = await providerSucceeded();
  const url = `http://127.0.0.1:${(stalled.address() as AddressInfo).port}/files/x/output.mp4`;
  await w.tdb.database.db.update(taskAttempt).set({ output_url: url }).where(eq(taskAttempt.task_id, id));

  const env = new MockActivityEnvironment();
  const running = env.run(w.activities.rescueOutput, id);
  await eventually(async () => ((await statusOf(id)) === 'FETCHING_OUTPUT' ? true : undefined), 10_000, 20);
  await new Promise((r) => setTimeout(r, 300));
  env.cancel('TIMED_OUT');
  await assert.rejects(running);
  await new Promise((r) => setTimeout(r, 200));
  assert.deepEqual(uncaught, [], 'no unhandled error: a worker would still be running');
  assert.equal(await statusOf(id), 'FETCHING_OUTPUT', 'the retry will fetch again');
});

test(
  'an attempt that stored every part but stopped before publishing finishes from its stored parts: no download, the sha256 of the whole object',
  { timeout: 60_000 },
  async () => {
    const id = await providerSucceeded();
    const [attempt] = await w.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, id));
    const bytes = Buffer.from(await (await fetch(attempt!.output_url!)).arrayBuffer());
    // What the previous attempt left: an upload holding all the bytes, not completed, and its checkpoint.
    const storage = buildStorage(w.config);
    const key = outputObjectKey(w.tenantId, id, attempt!.attempt_id, 'mp4');
    const uploadId = await storage.createUpload(`${key}.partial`, { contentType: 'video/mp4' });
    const part = await storage.uploadPart(`${key}.partial`, uploadId, 1, bytes);
    await w.tdb.database.db.insert(outputDownload).values({
      attempt_id: attempt!.attempt_id,
      task_id: id,
      location: 'primary',
      partial_key: `${key}.partial`,
      upload_id: uploadId,
      parts: [part],
      bytes_stored: bytes.length,
      total_bytes: bytes.length,
      source_validator: null,
    });
    const reads = w.sim.sim.stats().output_reads;

    const facts = await w.run('rescueOutput', id);
    assert.equal(facts.status, 'SUCCEEDED');
    assert.equal(w.sim.sim.stats().output_reads, reads, 'the provider was not asked again');
    const [video] = await videosOf(id);
    assert.equal(video!.sha256, createHash('sha256').update(bytes).digest('hex'));
    assert.deepEqual(
      await w.tdb.database.db.select().from(outputDownload).where(eq(outputDownload.attempt_id, attempt!.attempt_id)),
      [],
      'the checkpoint is gone',
    );
    assert.equal(await storage.head(`${key}.partial`), null, 'the partial object is removed');
  },
);
