// The media step ends (docs/design.md §5 "Bounds"). A valid WebM whose 5 MiB title tag overflowed
// ffprobe's buffer is validated now (the probe asks for no tags) and the task SUCCEEDS; before, the
// step failed with ERR_CHILD_PROCESS_STDIO_MAXBUFFER and retried for ever in PROCESSING_MEDIA with
// the reservation held. A failure that is no verdict on the video (the stored object could not be
// read, ffprobe could not read it or ran out of time) is counted in generation_task.media_failures;
// at MEDIA_MAX_FAILURES the task parks in MANUAL_REVIEW with the last error as evidence, and the
// step returns the facts instead of failing again. Bytes ffprobe refuses stay FAILED INVALID_MEDIA,
// released, uncounted. Real Postgres, S3 server and simulator (MockActivityEnvironment).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { and, asc, eq } from 'drizzle-orm';
import { asset, creditLedger, generationTask, taskAttempt, taskTransition } from '../../db/schema';
import type { ObjectStorage } from '../../storage/s3';
import { providerSucceededTask, startActivityWorld, type ActivityWorld } from '../support/activities';

const run = promisify(execFile);
const MAX_FAILURES = 3;
let w: ActivityWorld;
let dir: string;
let webm: Buffer;
let origin: Server;
let s3Busy: Server;
let hanging: Server;
/** How the media step's presigned GET of the stored video fares. */
let presign: 'normal' | 'throws' | 'busy' | 'hangs' = 'normal';
let probeTimeoutMs = 30_000;
const port = (s: Server) => (s.address() as AddressInfo).port;

before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'media-failures-'));
  // A 1 s VP9 WebM with a 5 MiB title (given to ffmpeg as an ffmetadata file: too long for argv).
  const meta = path.join(dir, 'meta.txt');
  await fs.writeFile(meta, `;FFMETADATA1\ntitle=${'t'.repeat(5 * 1024 * 1024)}\n`);
  const file = path.join(dir, 'out.webm');
  await run('ffmpeg', [
    ...['-v', 'error', '-f', 'lavfi', '-i', 'testsrc=duration=1:size=64x64:rate=10', '-i', meta, '-map_metadata', '1'],
    ...['-c:v', 'libvpx-vp9', '-deadline', 'realtime', '-cpu-used', '8', file],
  ]);
  webm = await fs.readFile(file);
  const junk = Buffer.from('these bytes are not a video\n'.repeat(64));
  // The provider's outputs: the WebM, or bytes that are no video.
  origin = createServer((req, res) => {
    const body = req.url?.endsWith('/junk.mp4') ? junk : webm;
    res.writeHead(200, { 'content-type': 'video/webm', 'content-length': String(body.length) }).end(body);
  });
  // Our S3 answering 503 SlowDown; and a server that never answers.
  s3Busy = createServer((_req, res) => res.writeHead(503, { 'content-type': 'application/xml' }).end('<Error><Code>SlowDown</Code></Error>'));
  hanging = createServer(() => undefined);
  await Promise.all([origin, s3Busy, hanging].map((s) => new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()))));
  w = await startActivityWorld({
    generationMs: 100,
    config: { MEDIA_MAX_FAILURES: String(MAX_FAILURES) },
    deps: (d) => {
      const storage: ObjectStorage = Object.create(d.storage) as ObjectStorage;
      storage.presignGet = async (key, ttl, served) => {
        if (presign === 'throws') throw new Error('storage unreachable (test)');
        if (presign === 'busy') return `http://127.0.0.1:${port(s3Busy)}/${d.storage.bucket}/${key}`;
        if (presign === 'hangs') return `http://127.0.0.1:${port(hanging)}/${d.storage.bucket}/${key}`;
        return d.storage.presignGet(key, ttl, served);
      };
      return {
        ...d,
        storage,
        settings: {
          ...d.settings,
          get mediaProbeTimeoutMs() {
            return probeTimeoutMs;
          },
        },
      };
    },
  });
});
after(async () => {
  for (const s of [origin, s3Busy, hanging]) {
    s?.closeAllConnections();
    s?.close();
  }
  await w?.close();
  await fs.rm(dir, { recursive: true, force: true });
});

/** A task whose provider succeeded, its output at `file` on the test origin. */
async function taskWithOutput(label: string, file: string): Promise<string> {
  const id = await providerSucceededTask(w, label);
  await w.tdb.database.db
    .update(taskAttempt)
    .set({ output_url: `http://127.0.0.1:${port(origin)}/files/x/${file}` })
    .where(eq(taskAttempt.task_id, id));
  return id;
}
const taskRow = async (id: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!;
const ledgerOf = async (id: string) =>
  (await w.tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, id))).map((e) => e.entry_type).sort();
const failureOf = async (p: Promise<unknown>): Promise<Error> => {
  const err = await p.then(
    () => null,
    (e: unknown) => e as Error,
  );
  assert.ok(err, 'the media step failed');
  assert.ok(err.message.length < 2_200, `a bounded message (${err.message.length} characters)`);
  return err;
};

test('a valid 1 s VP9 WebM with a 5 MiB title tag is validated and the task SUCCEEDS', { timeout: 120_000 }, async () => {
  const id = await taskWithOutput('media-big-title', 'output.webm');
  assert.equal((await w.run('rescueOutput', id)).status, 'SUCCEEDED');
  const task = await taskRow(id);
  assert.equal(task.media_failures, 0);
  const [video] = await w.tdb.database.db
    .select()
    .from(asset)
    .where(and(eq(asset.task_id, id), eq(asset.kind, 'video')));
  assert.equal(video!.content_type, 'video/webm');
  assert.equal(Number(video!.size_bytes), webm.length);
  assert.ok((await ledgerOf(id)).includes('SETTLE'), 'charged');
});

test(
  `a media step failing without a verdict parks the task in MANUAL_REVIEW at the ${MAX_FAILURES}th failure, counted in Postgres, and then stops failing`,
  {
    timeout: 120_000,
  },
  async () => {
    const id = await taskWithOutput('media-bounded', 'output.webm');
    try {
      // 1: the stored video cannot be presigned (storage unreachable), inside the rescue's activity.
      presign = 'throws';
      const first = await failureOf(w.run('rescueOutput', id));
      assert.match(first.message, /media step failed \(1 of 3 before MANUAL_REVIEW\): storage unreachable/);
      assert.equal((await taskRow(id)).status, 'PROCESSING_MEDIA');
      assert.equal((await taskRow(id)).media_failures, 1);
      // 2: ffprobe cannot read it (our bucket answers 503).
      presign = 'busy';
      const second = await failureOf(w.run('processMedia', id));
      assert.match(second.message, /\(2 of 3 before MANUAL_REVIEW\): ffprobe could not read the stored video/);
      assert.equal((await taskRow(id)).media_failures, 2);
      // 3: ffprobe runs out of time: the limit, so the task parks and the step returns its facts.
      presign = 'hangs';
      probeTimeoutMs = 500;
      const parked = await w.run('processMedia', id);
      assert.equal(parked.status, 'MANUAL_REVIEW');
      assert.equal(parked.needsAttention, true);
    } finally {
      presign = 'normal';
      probeTimeoutMs = 30_000;
    }
    const task = await taskRow(id);
    assert.equal(task.status, 'MANUAL_REVIEW');
    assert.equal(task.media_failures, MAX_FAILURES);
    const [escalation] = await w.tdb.database.db
      .select()
      .from(taskTransition)
      .where(and(eq(taskTransition.task_id, id), eq(taskTransition.to_status, 'MANUAL_REVIEW')))
      .orderBy(asc(taskTransition.to_version));
    assert.equal(escalation?.from_status, 'PROCESSING_MEDIA');
    assert.equal(escalation?.source_event, 'workflow.media-failures');
    const detail = escalation?.detail as { reason?: string; media_failures?: number; limit?: number; last_error?: string };
    assert.equal(detail.media_failures, MAX_FAILURES);
    assert.equal(detail.limit, MAX_FAILURES);
    assert.match(detail.reason ?? '', /failed 3 times without a verdict/);
    assert.match(detail.last_error ?? '', /ffprobe timed out after 500 ms/);
    // Parked, not failed: the reservation stays open for the operator's decision.
    assert.deepEqual(await ledgerOf(id), ['RESERVE']);

    // Every later run of either step (a retry already scheduled, a reset) returns the facts: no
    // probe, no count, no failure, even with the storage back.
    assert.equal((await w.run('processMedia', id)).status, 'MANUAL_REVIEW');
    assert.equal((await w.run('rescueOutput', id)).status, 'MANUAL_REVIEW');
    assert.equal((await taskRow(id)).media_failures, MAX_FAILURES);
  },
);

test('bytes ffprobe refuses stay FAILED INVALID_MEDIA, released, and are not counted as failures', { timeout: 120_000 }, async () => {
  const id = await taskWithOutput('media-junk', 'junk.mp4');
  assert.equal((await w.run('rescueOutput', id)).status, 'FAILED');
  const task = await taskRow(id);
  assert.equal(task.failure_code, 'INVALID_MEDIA');
  assert.match(task.failure_message ?? '', /ffprobe rejected the file/);
  assert.equal(task.media_failures, 0);
  // Uncharged: its settlement is zero and the reservation is released.
  const entries = await w.tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, id));
  assert.ok(entries.some((e) => e.entry_type === 'RELEASE'));
  assert.ok(entries.filter((e) => e.entry_type === 'SETTLE').every((e) => Number(e.amount) === 0));
});
