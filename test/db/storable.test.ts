// Strings Postgres cannot store (db/storable.ts): U+0000 and a lone surrogate make text and jsonb
// refuse the whole statement. A provider's payload carrying one (a model's log line) is stored
// with U+FFFD in their place, so the callback or the poll that brought it cannot fail for ever;
// the plain JSON of the same value is what Postgres refuses, so the test would catch a regression.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { recordProviderEvent } from '../../db/inbox';
import { callbackInbox } from '../../db/schema';
import { storableJson, storableJsonText, storableText, unstorableTextAt } from '../../db/storable';
import { createTestDatabase, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
before(async () => {
  tdb = await createTestDatabase(config);
});
after(async () => tdb?.drop());

const hostile = { logs: 'step 1\u0000step 2', note: 'half a pair \ud800 here', fine: 'a whole pair \ud83c\udfac' };

describe('storable text', () => {
  test('NULs and lone surrogates become U+FFFD; whole pairs and everything else stay', () => {
    assert.equal(storableText('a\u0000b\udc00c\ud83c\udfac'), 'a\ufffdb\ufffdc\ud83c\udfac');
    assert.deepEqual(storableJson(hostile), { logs: 'step 1\ufffdstep 2', note: 'half a pair \ufffd here', fine: 'a whole pair \ud83c\udfac' });
  });

  test('a value with nothing to replace is passed through as is, and a written-out backslash-u only costs a copy', () => {
    const clean = { a: ['x', 1, null, { b: 'plain' }] };
    assert.equal(storableJson(clean), clean);
    assert.equal(storableJsonText(clean), JSON.stringify(clean));
    const lookalike = { b: 'a backslash-u written out: \\u0000' };
    assert.deepEqual(storableJson(lookalike), lookalike);
    assert.equal(storableJsonText(lookalike), JSON.stringify(lookalike));
  });

  test('Postgres refuses the plain JSON and takes the storable one', async () => {
    const pool = tdb.database.pool;
    await assert.rejects(pool.query('SELECT $1::jsonb AS v', [JSON.stringify(hostile)]), /Unicode|unsupported|invalid input syntax/i);
    const { rows } = await pool.query<{ v: typeof hostile }>('SELECT $1::jsonb AS v', [storableJsonText(hostile)]);
    assert.equal(rows[0]!.v.logs, 'step 1\ufffdstep 2');
  });

  test('a provider event whose raw payload holds both is stored', async () => {
    const id = await recordProviderEvent(tdb.database.db, {
      provider: 'replicate',
      job: {
        jobId: 'job-nul',
        state: 'running',
        rawStatus: 'processing',
        updatedAt: new Date(),
        outputUrl: null,
        error: 'boom\u0000',
        correlationToken: null,
        metrics: null,
      },
      providerEventId: 'nul-1',
      source: 'poll',
      attemptId: null,
      taskId: null,
      receivedRegion: config.REGION,
      signatureValid: true,
      raw: hostile,
      processError: 'test row',
    });
    assert.ok(id);
    const [row] = await tdb.database.db.select().from(callbackInbox).where(eq(callbackInbox.inbox_id, id));
    const payload = row!.payload as { raw: typeof hostile; job: { error: string } };
    assert.equal(payload.raw.note, 'half a pair \ufffd here');
    assert.equal(payload.job.error, 'boom\ufffd');
  });

  test('keys are made storable too, and Postgres takes them', async () => {
    const keyed = { output: { 'frame\u0000': 1, ['half \ud800']: 'x' } };
    assert.deepEqual(storableJson(keyed), { output: { 'frame\ufffd': 1, 'half \ufffd': 'x' } });
    const { rows } = await tdb.database.pool.query<{ v: unknown }>('SELECT $1::jsonb AS v', [storableJsonText(keyed)]);
    assert.deepEqual(rows[0]!.v, { output: { 'frame\ufffd': 1, 'half \ufffd': 'x' } });
  });

  test('a body nested as deep as a request allows is walked without overflowing the stack', () => {
    const deep = JSON.parse(`${'['.repeat(50_000)}"x\\u0000"${']'.repeat(50_000)}`) as unknown;
    assert.equal(unstorableTextAt(deep), Array.from({ length: 50_000 }, () => '0').join('.'));
  });

  test('where a tenant body holds one: the path, keys included, itself printable', () => {
    assert.equal(unstorableTextAt({ a: [1, { b: 'x' }] }), null);
    assert.equal(unstorableTextAt({ a: [1, { b: 'x\u0000' }] }), 'a.1.b');
    assert.equal(unstorableTextAt({ m: { 'k\u0000': 1 } }), 'm.k\ufffd');
    assert.equal(unstorableTextAt('\ud800'), '');
  });
});
