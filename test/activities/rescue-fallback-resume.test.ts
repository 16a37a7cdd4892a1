// A rescue that stored every byte of the output in the fallback bucket (the primary was down)
// and stopped before it published (the worker died after its last part's checkpoint, or after
// CompleteMultipartUpload) is retried once the primary answers again. The retry resumes in the
// bucket that holds the bytes — it does not go back to the primary, discard them and ask the
// provider again — so an output URL that expired meanwhile loses nothing: the stored parts are
// finished and published (docs/decisions/0029). Before, the task failed OUTPUT_LOST.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { generationTask, outputDownload, taskAttempt } from '../../db/schema';
import { outputObjectKey, type ObjectStorage } from '../../storage/s3';
import { providerSucceededTask, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
let gone: Server;
let fallbackDown = false;
before(async () => {
  w = await startActivityWorld({
    generationMs: 100,
    deps: (d) => {
      // The fallback bucket's answers fail while `fallbackDown` is set (an outage of its endpoint).
      const fallback = Object.create(d.fallbackStorage!) as ObjectStorage;
      fallback.head = async (key) => {
        if (fallbackDown) throw new Error('fallback unreachable (test)');
        return d.fallbackStorage!.head(key);
      };
      return { ...d, fallbackStorage: fallback };
    },
  });
  gone = createServer((_req, res) => res.writeHead(404).end());
  await new Promise<void>((resolve) => gone.listen(0, '127.0.0.1', () => resolve()));
});
after(async () => {
  gone?.closeAllConnections();
  gone?.close();
  await w?.close();
});

for (const [completed, downFirst] of [
  [false, false],
  [true, false],
  [false, true],
] as const) {
  test(
    `every byte stored in the fallback (${completed ? 'upload completed' : 'parts only'}), primary back${downFirst ? ', the fallback not answering at the first retry' : ''}, URL expired: not OUTPUT_LOST`,
    { timeout: 60_000 },
    async () => {
      const fallback = w.deps.fallbackStorage;
      assert.ok(fallback, 'the test stack has a fallback bucket');
      const id = await providerSucceededTask(w, `fallback-resume-${completed}`);
      const db = w.tdb.database.db;
      const [attempt] = await db.select().from(taskAttempt).where(eq(taskAttempt.task_id, id));
      const bytes = Buffer.from(await (await fetch(attempt!.output_url!)).arrayBuffer());
      const key = outputObjectKey(w.tenantId, id, attempt!.attempt_id, 'mp4');
      // What the earlier run left in the fallback: all the bytes in its upload, and its checkpoint.
      const uploadId = await fallback.createUpload(`${key}.partial`, { contentType: 'video/mp4' });
      const part = await fallback.uploadPart(`${key}.partial`, uploadId, 1, bytes);
      if (completed) await fallback.completeUpload(`${key}.partial`, uploadId, [part]);
      await db.insert(outputDownload).values({
        attempt_id: attempt!.attempt_id,
        task_id: id,
        location: 'fallback',
        partial_key: `${key}.partial`,
        upload_id: uploadId,
        parts: [part],
        bytes_stored: bytes.length,
        total_bytes: bytes.length,
        source_validator: '"etag-1"',
      });
      // The provider's URL has expired by the time of the retry.
      await db
        .update(taskAttempt)
        .set({ output_url: `http://127.0.0.1:${(gone.address() as AddressInfo).port}/files/x/output.mp4` })
        .where(eq(taskAttempt.attempt_id, attempt!.attempt_id));

      if (downFirst) {
        // The bucket holding every byte does not answer: the rescue waits for it (a storage
        // failure, retried), the stored upload and its checkpoint kept, the primary not used.
        fallbackDown = true;
        try {
          await assert.rejects(w.run('rescueOutput', id), /fallback storage/);
        } finally {
          fallbackDown = false;
        }
        assert.equal((await db.select().from(outputDownload).where(eq(outputDownload.attempt_id, attempt!.attempt_id))).length, 1, 'the checkpoint is kept');
        assert.equal(await w.deps.storage.head(key), null, 'nothing went to the primary');
      }
      await w.run('rescueOutput', id).catch(() => undefined);
      const [task] = await db.select().from(generationTask).where(eq(generationTask.task_id, id));
      assert.notEqual(
        task!.status,
        'FAILED',
        `every byte was stored in the fallback bucket, yet the task was failed ${task!.failure_code}: ${task!.failure_message}`,
      );
      assert.equal(task!.status, 'SUCCEEDED');
      const stored = (await fallback.head(key)) ?? (await w.deps.storage.head(key));
      assert.equal(stored?.sha256, createHash('sha256').update(bytes).digest('hex'));
    },
  );
}
