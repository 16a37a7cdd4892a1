// Provider answers are read only up to a size (providers/capped-body.ts): a JSON answer over
// 1 MiB, declared or streamed without Content-Length, is an unreadable answer with a clear reason
// (a transient read failure, an unknown submit outcome), and the rest of it is never downloaded;
// a listing page may be larger (Replicate's 100 predictions) up to its own limit.
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import { after, before, beforeEach, test } from 'node:test';
import { createFalAdapter } from '../../providers/fal';
import { ProviderHttpError } from '../../providers/provider-http';
import { createReplicateAdapter } from '../../providers/replicate';
import { AnswerTooLargeError, PROVIDER_ANSWER_MAX_BYTES, PROVIDER_LISTING_MAX_BYTES, readCappedText } from '../../providers/capped-body';
import { classifyNetworkError } from '../../providers/http-errors';
import { closeServer, listenOn } from './harness';

const MiB = 1024 * 1024;
/**
 * What the fake provider answers next: a JSON text, with or without Content-Length, or (`endless`)
 * a JSON text that never ends, streamed until the reader goes away.
 */
let answer: { status: number; body: string; chunked: boolean; endless?: boolean } = { status: 200, body: '{}', chunked: false };
let sentBytes = 0;
const ENDLESS_CAP = 512 * 1024 * 1024;
const server = createServer((_req, res) => {
  sentBytes = 0;
  const { status, body, chunked, endless } = answer;
  res.writeHead(status, { 'content-type': 'application/json', ...(chunked || endless ? {} : { 'content-length': String(Buffer.byteLength(body)) }) });
  if (endless) return void streamEndless(res, Buffer.alloc(64 * 1024, 'x'));
  if (!chunked) return void res.end(body);
  res.end(body);
});
/** Writes until the reader goes away: a write that fails (the connection closed) ends it. */
function streamEndless(res: ServerResponse, chunk: Buffer): void {
  if (res.destroyed || res.writableEnded || sentBytes >= ENDLESS_CAP) return void res.end();
  sentBytes += chunk.length;
  const first = sentBytes === chunk.length;
  res.write(first ? Buffer.from(`{"status":"IN_PROGRESS","padding":"${'x'.repeat(chunk.length - 36)}`) : chunk, (err) =>
    err ? res.destroy() : streamEndless(res, chunk),
  );
}
let base = '';
before(async () => {
  base = `http://127.0.0.1:${await listenOn(server)}`;
});
after(() => closeServer(server));
beforeEach(() => {
  answer = { status: 200, body: '{}', chunked: false };
});

/** A JSON object of about `bytes` bytes: `fields` plus padding. */
const jsonOf = (bytes: number, fields: Record<string, unknown> = {}): string => JSON.stringify({ ...fields, padding: 'x'.repeat(bytes) });

const fal = () => createFalAdapter({ baseUrl: base, apiKey: 'k:s', jwksUrl: `${base}/jwks`, timeoutMs: 5_000, expectedUserId: 'u' });
const replicate = () =>
  createReplicateAdapter({ baseUrl: base, apiToken: 'r8_token', webhookSecret: 'whsec_ZGV2LXNpbXVsYXRvci13ZWJob29rLXNlY3JldC0zMmI=', timeoutMs: 5_000 });

test('a status answer over 1 MiB is an unreadable read, transient, with the reason named (declared, streamed, or endless)', async () => {
  for (const shape of ['declared', 'chunked', 'endless'] as const) {
    answer = { status: 200, body: jsonOf(2 * MiB, { status: 'IN_PROGRESS' }), chunked: shape === 'chunked', endless: shape === 'endless' };
    const err = await fal()
      .getJob('r1', undefined, { model: 'fal-ai/kling-video/v2/master/text-to-video' })
      .then(
        () => assert.fail('read an answer over the limit'),
        (e: unknown) => e,
      );
    assert.ok(err instanceof ProviderHttpError, String(err));
    assert.equal(err.transient, true);
    assert.match(err.message, /larger than 1 MiB/);
    if (shape === 'endless') {
      await new Promise((r) => setTimeout(r, 200));
      assert.ok(sentBytes < 64 * MiB, `the rest was not downloaded (${sentBytes} bytes sent)`);
    }
  }
  // Just under the limit is read.
  answer = { status: 200, body: jsonOf(PROVIDER_ANSWER_MAX_BYTES - 200, { status: 'IN_PROGRESS' }), chunked: true };
  assert.equal((await fal().getJob('r1', undefined, { model: 'fal-ai/kling-video/v2/master/text-to-video' })).state, 'running');
});

test('a submit accepted with an answer over 1 MiB is an unknown outcome (the job may exist), never a rejection', async () => {
  answer = { status: 200, body: jsonOf(2 * MiB, { request_id: 'r1', status: 'IN_QUEUE' }), chunked: true };
  const out = await fal().submit({
    attemptId: 'a1',
    model: 'fal-ai/kling-video/v2/master/text-to-video',
    input: { prompt: 'x', duration: 5 },
    webhookUrl: 'https://api.example/v1/callbacks/fal/t',
  });
  assert.equal(out.kind, 'unknown');
  if (out.kind === 'unknown') assert.match(out.reason, /larger than 1 MiB/);
  answer = { status: 201, body: jsonOf(2 * MiB, { id: 'p1', status: 'starting' }), chunked: false };
  const r = await replicate().submit({
    attemptId: 'a2',
    model: 'minimax/video-01',
    input: { prompt: 'x' },
    webhookUrl: 'https://api.example/v1/callbacks/replicate/t',
  });
  assert.equal(r.kind, 'unknown');
  if (r.kind === 'unknown') assert.match(r.reason, /larger than 1 MiB/);
});

test('Replicate: a prediction over 1 MiB is refused; a listing page is read up to its own, larger limit', async () => {
  answer = { status: 200, body: jsonOf(2 * MiB, { id: 'p1', status: 'processing' }), chunked: true };
  await assert.rejects(replicate().getJob('p1'), (e: unknown) => e instanceof ProviderHttpError && e.transient && /larger than 1 MiB/.test(e.message));
  // 100 predictions of about 20 KB each (their inputs): 2 MB, over one answer's limit, under a page's.
  const now = new Date();
  const results = Array.from({ length: 100 }, (_, i) => ({
    id: `p${i}`,
    status: 'succeeded',
    model: 'minimax/video-01',
    input: { prompt: `someone else's ${i} ${'y'.repeat(20_000)}` },
    created_at: now.toISOString(),
    source: 'api',
  }));
  answer = { status: 200, body: JSON.stringify({ next: null, previous: null, results }), chunked: true };
  assert.ok(answer.body.length > PROVIDER_ANSWER_MAX_BYTES && answer.body.length < PROVIDER_LISTING_MAX_BYTES);
  const found = await replicate().findByCorrelationToken({
    token: 'a1',
    model: 'minimax/video-01',
    input: { prompt: 'ours' },
    since: new Date(now.getTime() - 60_000),
    until: new Date(now.getTime() + 60_000),
  });
  assert.equal(found.kind, 'not-found-unproven');
});

test('readCappedText reads text as Response.text() does; the too-large error classifies as sent, not fatal, with its reason', async () => {
  assert.equal(await readCappedText(new Response('\uFEFF{"ü":1}'), 100), await new Response('\uFEFF{"ü":1}').text());
  await assert.rejects(readCappedText(new Response('x'.repeat(101)), 100), AnswerTooLargeError);
  const c = classifyNetworkError(new AnswerTooLargeError(MiB, 5 * MiB));
  assert.deepEqual([c.sent, c.fatal, c.code], [true, false, 'answer-too-large']);
  assert.match(c.reason, /larger than 1 MiB \(Content-Length 5242880\)/);
});
