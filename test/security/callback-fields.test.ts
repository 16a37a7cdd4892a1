// Attack: an oversized provider id in a callback used to reach the database (and a provider
// read) and end in a 500. Provider fields have a length cap: 400 problem+json naming the field,
// no provider read, nothing stored.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startCallbackWorld, type CallbackWorld } from './support';

let w: CallbackWorld;
before(async () => {
  w = await startCallbackWorld();
});
after(() => w?.close());

test('an oversized job id is a 400 naming the field: no provider read, nothing stored', async () => {
  const victim = await w.attempt('kling');
  const res = await w.post(`/v1/callbacks/kling/${victim.token}`, JSON.stringify({ task_id: 'x'.repeat(100_000) }));
  assert.equal(res.status, 400, JSON.stringify(res.body).slice(0, 300));
  assert.deepEqual(
    res.body.errors.map((e: { field: string }) => e.field),
    ['job id'],
  );
  assert.equal(w.providerReads.length, 0);
  assert.equal(await w.inboxRows(), 0);
});
