// Attack: the callback URL used to end in the attempt id, which is no secret (an unkeyed hash of
// the task id, returned by GET /v1/tasks/:id). Now it ends in a keyed token (HMAC-authenticated,
// the attempt id hidden; docs/decisions/0016), checked before any I/O: the attempt id URL, a
// tampered token and a token minted with another key are refused with nothing stored, and a
// valid token for an attempt we do not have stores nothing either.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { createDatabase } from '../../db/client';
import { createCallbackTokens } from '../../providers/callback-token';
import { startApi } from '../support/stack';
import { startCallbackWorld, type CallbackWorld } from './support';

let w: CallbackWorld;
before(async () => {
  w = await startCallbackWorld();
});
after(() => w?.close());

/** A correctly signed Replicate webhook (the signing secret is not what this attack is about). */
function replicateWebhook(jobId: string, callbackUrl: string) {
  const now = new Date();
  const body = JSON.stringify({
    id: jobId,
    version: 'minimax/video-01',
    input: { prompt: 'x' },
    output: 'https://replicate.delivery/attacker.mp4',
    error: null,
    logs: '',
    status: 'succeeded',
    created_at: now.toISOString(),
    started_at: now.toISOString(),
    completed_at: now.toISOString(),
    webhook: callbackUrl,
    metrics: {},
  });
  const id = `msg_${randomUUID()}`;
  const signature = new Webhook(w.config.PROVIDER_REPLICATE_WEBHOOK_SECRET).sign(id, now, body);
  return { body, headers: { 'webhook-id': id, 'webhook-timestamp': String(Math.floor(now.getTime() / 1000)), 'webhook-signature': signature } };
}

test("callbacks to the attempt id, a tampered token or another key's token are refused (404), nothing stored or bound", async () => {
  const victim = await w.attempt('replicate', { model: 'minimax/video-01' });
  const other = createCallbackTokens('another-deployment-secret-0123456789abcdef').tokenFor(victim.attemptId);
  const flipped = `${victim.token.slice(0, 10)}${victim.token[10] === 'A' ? 'B' : 'A'}${victim.token.slice(11)}`;
  for (const guess of [victim.attemptId, flipped, other]) {
    const cb = replicateWebhook('attacker-job', `${w.api.baseUrl}/v1/callbacks/replicate/${guess}`);
    const res = await w.post(`/v1/callbacks/replicate/${guess}`, cb.body, cb.headers);
    assert.equal(res.status, 404, `${guess}: ${JSON.stringify(res.body)}`);
  }
  assert.equal(await w.inboxRows(), 0);
  assert.equal((await w.attemptRow(victim.attemptId)).provider_job_id, null);
  // The token is not derived in the open from the attempt id.
  assert.ok(!victim.token.includes(victim.attemptId.replace(/-/g, '').slice(0, 8)));
  assert.notEqual(other, victim.token);
});

/** The three other spellings of a token: its last character with the padding bits (the two low ones) set. */
function otherSpellings(token: string): string[] {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const last = alphabet.indexOf(token.at(-1)!);
  return [1, 2, 3].map((pad) => `${token.slice(0, -1)}${alphabet[last | pad]}`);
}

test('a token has one spelling: the three others that decode to the same bytes are refused (404) as unknown tokens, nothing stored or bound', async () => {
  const victim = await w.attempt('replicate', { model: 'minimax/video-01' });
  const spellings = otherSpellings(victim.token);
  const tokens = createCallbackTokens(w.config.CALLBACK_TOKEN_SECRET);
  for (const spelling of spellings) {
    assert.ok(Buffer.from(spelling, 'base64url').equals(Buffer.from(victim.token, 'base64url')), 'the same bytes');
    assert.equal(tokens.attemptIdOf(spelling), null, spelling);
    const cb = replicateWebhook('respelled-job', `${w.api.baseUrl}/v1/callbacks/replicate/${spelling}`);
    const res = await w.post(`/v1/callbacks/replicate/${spelling}`, cb.body, cb.headers);
    assert.equal(res.status, 404, `${spelling}: ${JSON.stringify(res.body)}`);
  }
  assert.equal(await w.inboxRows(), 0);
  assert.equal((await w.attemptRow(victim.attemptId)).provider_job_id, null);
  // The canonical spelling is still the attempt's.
  assert.equal(tokens.attemptIdOf(victim.token), victim.attemptId);
});

test('a forged token is refused before any I/O: with the database unreachable it is still a 404 (not spooled)', async () => {
  const dead = createDatabase({ url: 'postgres://postgres@127.0.0.1:1/none', max: 1, applicationName: 'dead' });
  const api = await startApi({ ...w.config, CALLBACK_SPOOL_DIR: `/tmp/vidorch-dead-spool-${process.pid}` }, dead);
  try {
    const res = await fetch(`${api.baseUrl}/v1/callbacks/kling/${randomUUID()}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"task_id":"x"}',
    });
    assert.equal(res.status, 404);
  } finally {
    await api.close();
    await dead.close();
  }
});

test('a valid token of an attempt that does not exist stores nothing (no inbox row for unknown tokens)', async () => {
  const token = createCallbackTokens(w.config.CALLBACK_TOKEN_SECRET).tokenFor(randomUUID());
  const cb = replicateWebhook('some-job', `${w.api.baseUrl}/v1/callbacks/replicate/${token}`);
  const res = await w.post(`/v1/callbacks/replicate/${token}`, cb.body, cb.headers);
  assert.equal(res.status, 404, JSON.stringify(res.body));
  assert.equal(await w.inboxRows(), 0);
});

test('the callback token secret rotates: URLs minted under the retired secret are still accepted, new ones under the current; without it listed, 404', async () => {
  const oldSecret = w.config.CALLBACK_TOKEN_SECRET;
  const newSecret = 'the-next-callback-token-secret-0123456789abcdef';
  const rotated = await startApi({ ...w.config, CALLBACK_TOKEN_SECRET: newSecret, CALLBACK_TOKEN_SECRET_PREVIOUS: [oldSecret] }, w.tdb.database);
  const dropped = await startApi({ ...w.config, CALLBACK_TOKEN_SECRET: newSecret, CALLBACK_TOKEN_SECRET_PREVIOUS: [] }, w.tdb.database);
  const post = async (baseUrl: string, token: string, jobId: string) => {
    const cb = replicateWebhook(jobId, `${baseUrl}/v1/callbacks/replicate/${token}`);
    return (
      await fetch(`${baseUrl}/v1/callbacks/replicate/${token}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...cb.headers },
        body: cb.body,
      })
    ).status;
  };
  try {
    const before = await w.attempt('replicate', { model: 'minimax/video-01', jobId: 'job-minted-before' });
    const after = await w.attempt('replicate', { model: 'minimax/video-01', jobId: 'job-minted-after' });
    const afterToken = createCallbackTokens(newSecret, [oldSecret]).tokenFor(after.attemptId);
    assert.notEqual(afterToken, after.token, 'a new attempt gets a token under the current secret');
    const rows = await w.inboxRows();
    assert.equal(await post(dropped.baseUrl, before.token, 'job-minted-before'), 404, 'the retired secret not listed: its URLs are not ours');
    assert.equal(await w.inboxRows(), rows);
    assert.equal(await post(rotated.baseUrl, before.token, 'job-minted-before'), 200, 'minted before the rotation, accepted after it');
    assert.equal(await post(rotated.baseUrl, afterToken, 'job-minted-after'), 200);
    assert.equal(await w.inboxRows(), rows + 2, 'both stored');
  } finally {
    await Promise.all([rotated.close(), dropped.close()]);
  }
});

test('tokens: minted under the current secret only; opened under any listed one; isTokenOf holds a token to its attempt', () => {
  const [a, b] = [randomUUID(), randomUUID()];
  const old = createCallbackTokens('the-old-callback-token-secret-0123456789abcdef');
  const both = createCallbackTokens('the-new-callback-token-secret-0123456789abcdef', ['the-old-callback-token-secret-0123456789abcdef']);
  const fresh = createCallbackTokens('the-new-callback-token-secret-0123456789abcdef');
  assert.equal(both.tokenFor(a), fresh.tokenFor(a));
  assert.equal(both.attemptIdOf(old.tokenFor(a)), a);
  assert.equal(fresh.attemptIdOf(old.tokenFor(a)), null);
  assert.equal(both.isTokenOf(a, old.tokenFor(a)), true);
  assert.equal(both.isTokenOf(a, fresh.tokenFor(a)), true);
  assert.equal(both.isTokenOf(b, old.tokenFor(a)), false, "another attempt's token");
  assert.equal(fresh.isTokenOf(a, old.tokenFor(a)), false);
  assert.equal(both.isTokenOf(a.toUpperCase(), fresh.tokenFor(a)), true);
});

test('a token that verified once is remembered as itself only: its near misses and other keys still take the full check and are refused', () => {
  const secret = 'remembered-tokens-secret-0123456789abcdef';
  const tokens = createCallbackTokens(secret, [], { verifiedKept: 2 });
  const [a, b, c] = [randomUUID(), randomUUID(), randomUUID()];
  const ta = tokens.tokenFor(a);
  assert.equal(tokens.attemptIdOf(ta), a);
  assert.equal(tokens.attemptIdOf(ta), a);
  // Every one-character change of a remembered token (the hidden id's block and the tag alike),
  // by its character's top bit (always data; the last character's low bits are padding).
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  for (let i = 0; i < ta.length; i++) {
    const near = `${ta.slice(0, i)}${alphabet[alphabet.indexOf(ta[i]!) ^ 32]}${ta.slice(i + 1)}`;
    assert.equal(tokens.attemptIdOf(near), null, `position ${i}`);
  }
  // Another deployment's instance does not share what this one remembers.
  assert.equal(createCallbackTokens('another-deployment-secret-0123456789abcdef').attemptIdOf(ta), null);
  // Past the bound the oldest entry leaves; every token still answers its own attempt id.
  const [tb, tc] = [tokens.tokenFor(b), tokens.tokenFor(c)];
  assert.equal(tokens.attemptIdOf(tb), b);
  assert.equal(tokens.attemptIdOf(tc), c);
  assert.equal(tokens.attemptIdOf(ta), a);
  assert.equal(tokens.attemptIdOf(`${ta}x`), null);
});
