// The rescue goes on into the media step in the same activity (docs/decisions/0009): a stored
// output becomes SUCCEEDED without a second dispatch. When the media part fails, the task stays
// in PROCESSING_MEDIA with its video stored once; the retry of the same activity skips the bytes
// and finishes, and a run that stopped in PROCESSING_MEDIA can still finish with processMedia.
// Real Postgres, S3 server and simulator (MockActivityEnvironment).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { asset, creditLedger, generationTask } from '../../db/schema';
import { providerSucceededTask, startActivityWorld, withPresignFailures, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
/** While above 0, the media step's presigned GET fails (the storage is unreachable for it). */
const presignFailures = { left: 0 };
before(async () => {
  w = await startActivityWorld({
    generationMs: 100,
    deps: (d) => {
      const storage = withPresignFailures(d.storage, presignFailures);
      return { ...d, storage };
    },
  });
});
after(() => w?.close());

const providerSucceeded = () => providerSucceededTask(w, 'media');

const statusOf = async (id: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!.status;
const assetsOf = async (id: string) =>
  (await w.tdb.database.db.select().from(asset).where(eq(asset.task_id, id))).map((a) => a.kind).sort();
const settlesOf = async (id: string) =>
  (await w.tdb.database.db.select().from(creditLedger).where(and(eq(creditLedger.task_id, id), eq(creditLedger.entry_type, 'SETTLE')))).length;

describe('rescueOutput goes on into the media step', () => {
  test('one activity takes a succeeded job to SUCCEEDED: video and thumbnail stored, settled once', async () => {
    const id = await providerSucceeded();
    const facts = await w.run('rescueOutput', id);
    assert.equal(facts.status, 'SUCCEEDED');
    assert.deepEqual(await assetsOf(id), ['thumbnail', 'video']);
    assert.equal(await settlesOf(id), 1);
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
    assert.deepEqual(await assetsOf(id), ['thumbnail', 'video']);
    assert.equal(await settlesOf(id), 1);
  });

  test('a run left in PROCESSING_MEDIA finishes with its own processMedia step, once', async () => {
    const id = await providerSucceeded();
    presignFailures.left = 1;
    await assert.rejects(w.run('rescueOutput', id));
    assert.equal((await w.run('processMedia', id)).status, 'SUCCEEDED');
    assert.equal((await w.run('processMedia', id)).status, 'SUCCEEDED', 'again: nothing changes');
    assert.deepEqual(await assetsOf(id), ['thumbnail', 'video']);
    assert.equal(await settlesOf(id), 1);
  });
});
