// The rescue must not declare an output lost (FAILED, OUTPUT_LOST, reservation
// released) when the provider URL has expired although the published object is in the primary
// bucket, because the primary's HEAD failed (an outage) and "unknown" was read as "absent".
// Scenario: an earlier rescue run published the object to the primary, then its step-3
// transaction never committed (crash / 503); the retry runs during a primary outage after the
// provider's URL expired. Expected: the activity fails retryably (or marks OUTPUT_AT_RISK) and the
// task is not FAILED. Real Postgres, S3 server and simulator.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { generationTask, taskAttempt } from '../../db/schema';
import { outputObjectKey, type ObjectStorage } from '../../storage/s3';
import { providerSucceededTask, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
let realStorage: ObjectStorage;
const primary = { down: false };
let gone: Server;

before(async () => {
  w = await startActivityWorld({
    generationMs: 100,
    deps: (d) => {
      realStorage = d.storage;
      // The primary: HEAD fails while it is "down" (connect timeout / 503 during an outage).
      const primaryStore: ObjectStorage = Object.create(d.storage) as ObjectStorage;
      primaryStore.head = async (key: string) => {
        if (primary.down) throw new Error('primary storage unreachable (test)');
        return d.storage.head(key);
      };
      // The fallback: reachable, and it does not hold the object.
      const fallbackStore: ObjectStorage = Object.create(d.storage) as ObjectStorage;
      fallbackStore.head = async () => null;
      return { ...d, storage: primaryStore, fallbackStorage: fallbackStore };
    },
  });
  // The provider's output URL, expired: 404.
  gone = createServer((_req, res) => {
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => gone.listen(0, '127.0.0.1', () => resolve()));
});
after(async () => {
  gone?.closeAllConnections();
  gone?.close();
  await w?.close();
});

test('a primary outage plus an expired provider URL does not turn a stored output into OUTPUT_LOST', { timeout: 60_000 }, async () => {
  const id = await providerSucceededTask(w, 'review-unknown');
  const db = w.tdb.database.db;
  const [task] = await db.select().from(generationTask).where(eq(generationTask.task_id, id));
  const key = outputObjectKey(task!.tenant_id, id, task!.active_attempt_id!, 'mp4');
  // What an earlier run published before its step-3 transaction was lost.
  const body = Buffer.from('a published video the earlier rescue stored');
  await realStorage.put(key, body, { contentType: 'video/mp4', sha256: createHash('sha256').update(body).digest('hex') });
  assert.ok(await realStorage.head(key), 'the output is stored in the primary bucket');
  await db
    .update(taskAttempt)
    .set({ output_url: `http://127.0.0.1:${(gone.address() as AddressInfo).port}/files/x/output.mp4` })
    .where(eq(taskAttempt.attempt_id, task!.active_attempt_id!));

  primary.down = true;
  await w.run('rescueOutput', id).catch(() => undefined);
  const [after] = await db.select().from(generationTask).where(eq(generationTask.task_id, id));
  assert.notEqual(
    after!.status,
    'FAILED',
    `the output is in the primary bucket, but the task was failed with ${after!.failure_code}: ${after!.failure_message}`,
  );
});
