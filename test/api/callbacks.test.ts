// POST /v1/callbacks/:provider/:token through the API's server (api/listen.ts, the express route
// of api/app.ts): the signature is checked on the bytes as received, whatever their framing; a
// body over API_BODY_LIMIT is refused before it is read whole; a callback that cannot be stored
// is spooled; and every callback is counted under the route template, never its token.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Webhook } from 'standardwebhooks';
import { spoolDirFor, spoolStatus } from '../../storage/spool-files';
import { createDatabase } from '../../db/client';
import { startApi } from '../support/stack';
import { startCallbackWorld, type CallbackWorld } from '../security/support';

/** The API_BODY_LIMIT of this file's API, in bytes. */
const LIMIT = 16 * 1024;

let w: CallbackWorld;
before(async () => {
  w = await startCallbackWorld({ API_BODY_LIMIT: '16kb' });
});
after(() => w?.close());

/** One raw HTTP/1.1 exchange with the API at `base`; the answer's bytes without its Date header. */
function exchange(head: string, body: string | Buffer, base = w.api.baseUrl): Promise<string> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(port), hostname, () => {
      sock.write(`${head}\r\nHost: x\r\nConnection: close\r\n\r\n`);
      sock.write(body);
    });
    let got = '';
    sock.on('data', (c: Buffer) => (got += c.toString('latin1')));
    sock.on('end', () => resolve(got.replace(/\r\nDate: [^\r]*/, '')));
    sock.on('error', reject);
  });
}

type Headers = Record<string, string>;
const lines = (h: Headers) => Object.entries(h).map(([k, v]) => `${k}: ${v}`);
/** The request with a Content-Length. */
const sized = (p: string, h: Headers, body: string | Buffer, base?: string) =>
  exchange([`POST ${p} HTTP/1.1`, ...lines(h), `Content-Length: ${Buffer.byteLength(body)}`].join('\r\n'), body, base);
/** The same request chunked. */
const chunked = (p: string, h: Headers, body: string) => {
  const n = Buffer.byteLength(body);
  return exchange(
    [`POST ${p} HTTP/1.1`, ...lines(h), 'Transfer-Encoding: chunked'].join('\r\n'),
    `${n > 0 ? `${n.toString(16)}\r\n${body}\r\n` : ''}0\r\n\r\n`,
  );
};
const statusOf = (answer: string) => Number(/^HTTP\/1\.1 (\d{3}) /.exec(answer)?.[1]);
const bodyOf = (answer: string): unknown => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));

/** A Replicate webhook for `jobId`, signed over `body` as given (a fresh message id each time). */
function signed(jobId: string, opts: { body?: string; contentType?: string } = {}): { headers: Headers; body: string } {
  const id = `msg_${randomUUID()}`;
  const now = new Date();
  const body =
    opts.body ??
    JSON.stringify({
      id: jobId,
      version: 'v',
      input: {},
      output: null,
      error: null,
      logs: '',
      status: 'processing',
      created_at: now.toISOString(),
      metrics: {},
    });
  const signature = new Webhook(w.config.PROVIDER_REPLICATE_WEBHOOK_SECRET).sign(id, now, body);
  return {
    body,
    headers: {
      'Content-Type': opts.contentType ?? 'application/json',
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': signature,
    },
  };
}

describe('the callback route', () => {
  test('every answer is the same bytes whether the body comes with a Content-Length or chunked: stored, duplicate and each refusal', async () => {
    const a = await w.attempt('replicate', { jobId: 'job-callbacks-1' });
    const route = `/v1/callbacks/replicate/${a.token}`;
    const json = { 'Content-Type': 'application/json' };
    const refusals: [string, number, string, Headers, string][] = [
      ['unsigned', 401, route, json, '{}'],
      ['bad signature', 401, route, { ...signed('job-callbacks-1').headers, 'webhook-signature': 'v1,AAAA' }, '{}'],
      ['unknown token', 404, '/v1/callbacks/replicate/not-a-token', json, '{}'],
      ['unknown provider', 404, '/v1/callbacks/constructor/x', json, '{}'],
      ['empty body', 401, route, {}, ''],
    ];
    for (const [name, status, p, h, body] of refusals) {
      const answer = await sized(p, h, body);
      assert.equal(statusOf(answer), status, `${name}: ${answer}`);
      assert.match(answer, /application\/problem\+json; charset=utf-8\r\nContent-Length: \d+\r\nETag: W\/"/, name);
      assert.equal(answer, await chunked(p, h, body), name);
    }
    // A signed body that is not a prediction (refused as unverifiable), a stored callback and its
    // duplicate: each way needs its own signature.
    const notJson = [signed('job-callbacks-1', { body: 'not json' }), signed('job-callbacks-1', { body: 'not json' })] as const;
    const badPayload = await sized(route, notJson[0].headers, notJson[0].body);
    assert.equal(statusOf(badPayload), 401, badPayload);
    assert.match(badPayload, /"detail":"bad-payload"/);
    assert.equal(badPayload, await chunked(route, notJson[1].headers, notJson[1].body), 'bad payload');
    const [first, second] = [signed('job-callbacks-1'), signed('job-callbacks-1')];
    const stored = await sized(route, first.headers, first.body);
    assert.match(stored, /^HTTP\/1.1 200 OK\r\n/);
    assert.deepEqual(bodyOf(stored), { received: true, duplicate: false });
    assert.equal(stored, await chunked(route, second.headers, second.body), 'stored');
    const duplicate = await sized(route, first.headers, first.body);
    assert.deepEqual(bodyOf(duplicate), { received: true, duplicate: true });
    assert.equal(duplicate, await chunked(route, second.headers, second.body), 'duplicate');
    assert.equal(await w.inboxRows(), 2, 'one row per provider event, each stored once');
  });

  test('the signature is checked on the bytes as received: any media type is accepted, the same JSON re-spaced is refused', async () => {
    const a = await w.attempt('replicate', { jobId: 'job-callbacks-2' });
    const route = `/v1/callbacks/replicate/${a.token}`;
    const plainText = signed('job-callbacks-2', { contentType: 'text/plain' });
    assert.equal(statusOf(await sized(route, plainText.headers, plainText.body)), 200);
    const s = signed('job-callbacks-2');
    const respaced = JSON.stringify(JSON.parse(s.body) as unknown, null, 1);
    assert.equal(statusOf(await sized(route, s.headers, respaced)), 401);
  });

  test('a body over API_BODY_LIMIT is refused (413), sized or chunked; one at the limit is read and checked', async () => {
    const a = await w.attempt('replicate', { jobId: 'job-callbacks-3' });
    const route = `/v1/callbacks/replicate/${a.token}`;
    const json = { 'Content-Type': 'application/json' };
    assert.equal(statusOf(await sized(route, json, 'x'.repeat(LIMIT + 1))), 413);
    assert.equal(statusOf(await chunked(route, json, 'x'.repeat(LIMIT + 1))), 413);
    assert.equal(statusOf(await sized(route, json, 'x'.repeat(LIMIT))), 401, 'read whole, then refused for its signature');
  });

  test('a path that does not decode is a 400, a compressed body that does not inflate a 400: neither reaches the handler', async () => {
    const a = await w.attempt('replicate', { jobId: 'job-callbacks-4' });
    const rows = await w.inboxRows();
    assert.equal(statusOf(await sized('/v1/callbacks/fal/%ff%fe', {}, '{}')), 400);
    const s = signed('job-callbacks-4');
    assert.equal(statusOf(await sized(`/v1/callbacks/replicate/${a.token}`, { ...s.headers, 'Content-Encoding': 'gzip' }, s.body)), 400);
    assert.equal(await w.inboxRows(), rows);
  });

  test('each callback is counted under the route template, with its status; the token is in no metric', async () => {
    const a = await w.attempt('replicate', { jobId: 'job-callbacks-5' });
    /** The route's request counts by status, as the operator listener serves them. */
    const counts = async (): Promise<Map<string, number>> => {
      await sleep(1_100); // the operator listener renders its metrics at most once a second
      const text = await (await fetch(`${w.api.opsUrl}/metrics`)).text();
      assert.ok(!text.includes(a.token), 'the token is not in the metrics');
      const byStatus = new Map<string, number>();
      for (const l of text.split('\n')) {
        const m = /^vidorch_http_requests_total\{(.*)\} (\d+)$/.exec(l);
        if (m?.[1]?.includes('route="/v1/callbacks/:provider/:token"')) byStatus.set(/status="(\d+)"/.exec(m[1])?.[1] ?? '', Number(m[2]));
      }
      return byStatus;
    };
    const was = await counts();
    const s = signed('job-callbacks-5');
    assert.equal(statusOf(await sized(`/v1/callbacks/replicate/${a.token}`, s.headers, s.body)), 200);
    assert.equal(statusOf(await sized(`/v1/callbacks/replicate/${a.token}`, {}, '{}')), 401);
    const now = await counts();
    assert.equal(now.get('200'), (was.get('200') ?? 0) + 1);
    assert.equal(now.get('401'), (was.get('401') ?? 0) + 1);
  });

  test('with Postgres unreachable a verified callback is spooled and acknowledged (202)', async () => {
    const a = await w.attempt('replicate', { jobId: 'job-callbacks-6' });
    const spoolDir = fs.mkdtempSync(path.join(os.tmpdir(), 'vidorch-callbacks-spool-'));
    const dead = createDatabase({ url: 'postgres://postgres@127.0.0.1:1/none', max: 1, applicationName: 'dead' });
    const api = await startApi({ ...w.config, CALLBACK_SPOOL_DIR: spoolDir }, dead);
    try {
      const s = signed('job-callbacks-6');
      const answer = await sized(`/v1/callbacks/replicate/${a.token}`, s.headers, s.body, api.baseUrl);
      assert.equal(statusOf(answer), 202, answer);
      assert.deepEqual(bodyOf(answer), { received: true, spooled: true });
      assert.equal((await spoolStatus(spoolDirFor(spoolDir, w.config.DATABASE_URL))).pending, 1);
    } finally {
      await api.close();
      await dead.close();
      fs.rmSync(spoolDir, { recursive: true, force: true });
    }
  });
});
