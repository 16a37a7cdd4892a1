// An output served without a Content-Length (chunked) is stored through a multipart upload whose
// length is known only when the body ends. The last part's checkpoint records it, so a run that
// stops after it (here: CompleteMultipartUpload fails once) finishes on the retry from the stored
// parts without asking the provider again, even once the provider's URL has expired. (Before, the
// checkpoint never said the body had ended and the retry asked the provider: OUTPUT_LOST.)
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { outputDownload } from '../../db/schema';
import type { ObjectStorage } from '../../storage/s3';
import { outputMovedTo, providerSucceededTask, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
let origin: Server;
let body: Buffer = Buffer.alloc(0);
const state = { gone: false, completeFailures: 0 };
before(async () => {
  w = await startActivityWorld({
    generationMs: 100,
    deps: (d) => {
      const storage: ObjectStorage = Object.create(d.storage) as ObjectStorage;
      storage.completeUpload = async (...args) => {
        if (state.completeFailures > 0) {
          state.completeFailures -= 1;
          throw new Error('storage unreachable (test)');
        }
        return d.storage.completeUpload(...args);
      };
      // No fallback bucket: the failed completion fails the run rather than moving it elsewhere.
      return { ...d, storage, fallbackStorage: null };
    },
  });
  origin = createServer((_req, res) => {
    if (state.gone) return res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'video/mp4', 'transfer-encoding': 'chunked' });
    res.write(body.subarray(0, 1000));
    res.end(body.subarray(1000));
  });
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', () => resolve()));
});
after(async () => {
  origin?.closeAllConnections();
  origin?.close();
  await w?.close();
});

test(
  'every byte of a chunked output stored, the run stopped before completing: the retry finishes from the parts though the URL is gone',
  { timeout: 60_000 },
  async () => {
    const id = await providerSucceededTask(w, 'chunked-resume');
    const db = w.tdb.database.db;
    const moved = await outputMovedTo(w, id, origin);
    body = moved.bytes;

    state.completeFailures = 1;
    await assert.rejects(w.run('rescueOutput', id), /storage unreachable/);
    const [cp] = await db.select().from(outputDownload).where(eq(outputDownload.attempt_id, moved.attemptId));
    assert.equal(cp?.total_bytes, body.length, 'the checkpoint knows the body ended');
    assert.equal(cp?.bytes_stored, body.length);

    state.gone = true;
    const facts = await w.run('rescueOutput', id);
    assert.equal(facts.status, 'SUCCEEDED', `${facts.status}`);
    const stored = await w.deps.storage.head(moved.key);
    assert.equal(stored?.sha256, createHash('sha256').update(body).digest('hex'));
  },
);
