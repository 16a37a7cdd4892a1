// The media step reads a non-MP4 output (WebM; also an MP4 whose boxes the in-process parser is
// unsure of) with ffprobe on a presigned GET of the stored object. When that GET fails for a
// reason of our own storage (an S3 503 SlowDown, a refused connection during an outage, a copy
// moved away by copy-back while the step ran), ffprobe's transport error is a retryable failure
// and the task stays in PROCESSING_MEDIA: only bytes ffprobe read and could not parse make it
// INVALID_MEDIA. (Before, any ffprobe stderr failed a valid, paid output for good.) A validated
// WebM is recorded as video/webm and its download URL serves it as one (it was labelled MP4).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { presentTask } from '../../api/tasks.present';
import { getTaskDetail } from '../../api/tasks.service';
import { asset, generationTask, taskAttempt, webhookEvent } from '../../db/schema';
import type { ObjectStorage } from '../../storage/s3';
import { providerSucceededTask, startActivityWorld, type ActivityWorld } from '../support/activities';

const run = promisify(execFile);
let w: ActivityWorld;
let dir: string;
let webm: Buffer;
let output: Server;
let s3Busy: Server;
const media = { failing: false };

before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'media-storage-errors-'));
  const file = path.join(dir, 'out.webm');
  await run('ffmpeg', [
    '-v',
    'error',
    '-f',
    'lavfi',
    '-i',
    'testsrc=size=320x240:rate=24',
    '-t',
    '1.5',
    '-c:v',
    'libvpx-vp9',
    '-deadline',
    'realtime',
    '-cpu-used',
    '8',
    file,
  ]);
  webm = await fs.readFile(file);
  // The provider's output: a valid WebM (VP9).
  output = createServer((_req, res) => res.writeHead(200, { 'content-type': 'video/webm', 'content-length': String(webm.length) }).end(webm));
  // Our S3 answering one GET with 503 SlowDown (what S3 does under load).
  s3Busy = createServer((_req, res) => res.writeHead(503, { 'content-type': 'application/xml' }).end('<Error><Code>SlowDown</Code></Error>'));
  await Promise.all([output, s3Busy].map((s) => new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()))));
  w = await startActivityWorld({
    generationMs: 100,
    deps: (d) => {
      const storage: ObjectStorage = Object.create(d.storage) as ObjectStorage;
      storage.presignGet = async (key, ttl, served) =>
        media.failing ? `http://127.0.0.1:${(s3Busy.address() as AddressInfo).port}/${d.storage.bucket}/${key}` : d.storage.presignGet(key, ttl, served);
      return { ...d, storage };
    },
  });
});
after(async () => {
  for (const s of [output, s3Busy]) {
    s?.closeAllConnections();
    s?.close();
  }
  await w?.close();
  await fs.rm(dir, { recursive: true, force: true });
});

/** A task whose provider succeeded, its output the WebM origin's. */
async function webmTask(label: string): Promise<string> {
  const id = await providerSucceededTask(w, label);
  await w.tdb.database.db
    .update(taskAttempt)
    .set({ output_url: `http://127.0.0.1:${(output.address() as AddressInfo).port}/files/x/output.webm` })
    .where(eq(taskAttempt.task_id, id));
  return id;
}

test('a 503 from our own bucket while ffprobe reads a stored WebM is not INVALID_MEDIA', { timeout: 60_000 }, async () => {
  const id = await webmTask('media-webm');
  const db = w.tdb.database.db;
  media.failing = true;
  const err = await w.run('rescueOutput', id).then(
    () => null,
    (e: unknown) => e as Error,
  );
  media.failing = false;
  const [task] = await db.select().from(generationTask).where(eq(generationTask.task_id, id));
  assert.notEqual(
    task!.status,
    'FAILED',
    `the stored WebM is valid; the bucket answered 503 once, and the task was failed ${task!.failure_code}: ${task!.failure_message}`,
  );
  assert.ok(err, 'the media step failed (retryably)');
  assert.equal(task!.status, 'PROCESSING_MEDIA');
  // And the retry, with the bucket answering, finishes it.
  assert.equal((await w.run('rescueOutput', id)).status, 'SUCCEEDED');
});

test('a validated WebM is recorded as video/webm, and its download URL serves it as one', { timeout: 60_000 }, async () => {
  const id = await webmTask('media-webm-served');
  const db = w.tdb.database.db;
  assert.equal((await w.run('rescueOutput', id)).status, 'SUCCEEDED');
  const [video] = await db
    .select()
    .from(asset)
    .where(and(eq(asset.task_id, id), eq(asset.kind, 'video')));
  assert.equal(video!.content_type, 'video/webm', 'the probe said WebM; the rescue had stored it as MP4');
  // The task.succeeded event is written in the same transaction and says so too.
  const [succeeded] = await db
    .select()
    .from(webhookEvent)
    .where(and(eq(webhookEvent.task_id, id), eq(webhookEvent.event_type, 'task.succeeded')));
  assert.equal((succeeded?.data as { output?: { content_type?: string } } | undefined)?.output?.content_type, 'video/webm');
  const detail = await getTaskDetail(db, w.tenantId, id);
  assert.ok(detail);
  const shown = await presentTask(detail, { storage: w.deps.storage }, 60);
  assert.equal(shown.output?.content_type, 'video/webm');
  const res = await fetch(shown.output.download_url!);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'video/webm');
  assert.equal(res.headers.get('content-disposition'), `inline; filename="${id}.webm"`);
  assert.deepEqual(Buffer.from(await res.arrayBuffer()), webm);
});
