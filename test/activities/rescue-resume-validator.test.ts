// A resumed download sends the stored bytes' validator as If-Range; an origin that ignores it
// answers 206 with the range of whatever it holds now. The rescue compares the validator the 206
// carries with the stored one and, when they differ, discards the stored parts and starts over
// instead of splicing two files into one object (activities/output-download.ts).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { outputDownload } from '../../db/schema';
import { outputMovedTo, providerSucceededTask, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
let origin: Server;
let now = Buffer.alloc(0);
const ranges: string[] = [];
before(async () => {
  w = await startActivityWorld({ generationMs: 100 });
  // Holds a newer file under the same URL and answers any range of it, If-Range or not.
  origin = createServer((req, res) => {
    const range = /^bytes=(\d+)-$/.exec(String(req.headers['range'] ?? ''));
    ranges.push(String(req.headers['range'] ?? '') + (req.headers['if-range'] ? ` if-range ${String(req.headers['if-range'])}` : ''));
    if (!range) return res.writeHead(200, { 'content-type': 'video/mp4', 'content-length': String(now.length), etag: '"v2"' }).end(now);
    const from = Number(range[1]);
    res
      .writeHead(206, {
        'content-type': 'video/mp4',
        'content-range': `bytes ${from}-${now.length - 1}/${now.length}`,
        'content-length': String(now.length - from),
        etag: '"v2"',
      })
      .end(now.subarray(from));
  });
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', () => resolve()));
});
after(async () => {
  origin?.closeAllConnections();
  origin?.close();
  await w?.close();
});

test(
  'a 206 of a changed source (another ETag) is not spliced onto the stored bytes: they are discarded and the output downloaded whole',
  { timeout: 60_000 },
  async () => {
    const id = await providerSucceededTask(w, 'resume-validator');
    const db = w.tdb.database.db;
    const { bytes: original, attemptId, key } = await outputMovedTo(w, id, origin);
    now = Buffer.concat([original, Buffer.from('a newer file, longer than the first')]);
    // What an earlier run left: the first half of the original stored, its validator "v1".
    const half = Math.floor(original.length / 2);
    const uploadId = await w.deps.storage.createUpload(`${key}.partial`, { contentType: 'video/mp4' });
    const part = await w.deps.storage.uploadPart(`${key}.partial`, uploadId, 1, original.subarray(0, half));
    await db.insert(outputDownload).values({
      attempt_id: attemptId,
      task_id: id,
      location: 'primary',
      partial_key: `${key}.partial`,
      upload_id: uploadId,
      parts: [part],
      bytes_stored: half,
      total_bytes: original.length,
      source_validator: '"v1"',
    });

    await assert.rejects(w.run('rescueOutput', id), /changed source/);
    assert.deepEqual(ranges, [`bytes=${half}- if-range "v1"`]);
    assert.deepEqual(await db.select().from(outputDownload).where(eq(outputDownload.attempt_id, attemptId)), [], 'the stored parts are discarded');
    assert.equal(await w.deps.storage.head(key), null, 'nothing spliced was published');

    // The retry downloads the source as it is now, whole.
    await w.run('rescueOutput', id).catch(() => undefined);
    const stored = await w.deps.storage.head(key);
    assert.equal(stored?.sha256, createHash('sha256').update(now).digest('hex'));
  },
);
