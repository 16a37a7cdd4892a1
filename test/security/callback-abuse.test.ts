// Attack: each POST to a Kling callback URL costs an authenticated Kling read (the shared
// quota), and an oversized id used to end in a 500. Callbacks are rate-limited per callback URL
// and per source address (429 + Retry-After, before any provider read), and provider fields
// have a length cap (400 naming the field, nothing read, nothing stored).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startCallbackWorld, type CallbackWorld } from './support';

const PER_TOKEN = 5;
const PER_SOURCE = 20;
let w: CallbackWorld;
before(async () => {
  w = await startCallbackWorld({ CALLBACK_RATE_PER_TOKEN_PER_MINUTE: String(PER_TOKEN), CALLBACK_RATE_PER_SOURCE_PER_MINUTE: String(PER_SOURCE) });
});
after(() => w?.close());

const klingReads = () => w.providerReads.filter((r) => r.startsWith('GET /kling/v1/videos/text2video/')).length;

test('a flood at one Kling callback URL, then across many: 429 + Retry-After past the limits, provider reads bounded by them', async () => {
  const victim = await w.attempt('kling');
  const statuses: number[] = [];
  for (let i = 0; i < 12; i += 1) {
    const res = await w.post(`/v1/callbacks/kling/${victim.token}`, JSON.stringify({ task_id: `guess-${i}` }));
    statuses.push(res.status);
    if (res.status === 429) assert.ok(Number(res.headers.get('retry-after')) >= 1);
  }
  assert.equal(statuses.filter((s) => s === 429).length, 12 - PER_TOKEN, statuses.join(','));
  assert.ok(klingReads() <= PER_TOKEN, `${klingReads()} Kling reads`);

  // The source address has PER_SOURCE - 12 left, whichever URL it aims at.
  const spread: number[] = [];
  for (let i = 0; i < 10; i += 1) {
    const a = await w.attempt('kling');
    spread.push((await w.post(`/v1/callbacks/kling/${a.token}`, JSON.stringify({ task_id: `spread-${i}` }))).status);
  }
  assert.equal(spread.filter((s) => s === 429).length, 10 - (PER_SOURCE - 12), spread.join(','));
  assert.equal(await w.inboxRows(), 0);
});
