// api/callbacks.listener.ts: plain callbacks are served on node:http before express, and
// answer byte for byte as the express route answers the same callback (sent chunked, so it
// takes that route); everything that is not plain still reaches express.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { createApp } from '../../api/app';
import { bodyLimitBytes, withCallbackRoute } from '../../api/callbacks.listener';
import { buildApiContext, type ApiContext } from '../../api/context';
import { createMetrics } from '../../observability/metrics';
import { testLogger } from '../support/stack';
import { startCallbackWorld, type CallbackWorld } from '../security/support';

let w: CallbackWorld;
let ctx: ApiContext;
let server: http.Server;
let port: number;
let expressCalls = 0;

before(async () => {
  w = await startCallbackWorld();
  ctx = buildApiContext(w.config, { db: w.tdb.database.db, facade: w.api.facade, logger: testLogger, metrics: createMetrics({ service: 'listener-test' }) });
  const app = createApp(ctx);
  server = http.createServer(
    withCallbackRoute(ctx, (req, res) => {
      expressCalls += 1;
      app(req, res);
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  port = (server.address() as AddressInfo).port;
});
after(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  await ctx?.close();
  await w?.close();
});

/** One raw HTTP/1.1 exchange; the answer's bytes without its Date header. */
function exchange(head: string, body: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1', () => sock.write(`${head}\r\nHost: x\r\nConnection: close\r\n\r\n${body}`));
    let got = '';
    sock.on('data', (c: Buffer) => (got += c.toString('latin1')));
    sock.on('end', () => resolve(got.replace(/\r\nDate: [^\r]*/, '')));
    sock.on('error', reject);
  });
}

type Headers = Record<string, string>;
const lines = (h: Headers) => Object.entries(h).map(([k, v]) => `${k}: ${v}`);
/** The request with a Content-Length: the plain way. */
const plain = (path: string, h: Headers, body: string) =>
  exchange([`POST ${path} HTTP/1.1`, ...lines(h), `Content-Length: ${Buffer.byteLength(body)}`].join('\r\n'), body);
/** The same request chunked: the express route. */
const chunked = (path: string, h: Headers, body: string) => {
  const n = Buffer.byteLength(body);
  return exchange(
    [`POST ${path} HTTP/1.1`, ...lines(h), 'Transfer-Encoding: chunked'].join('\r\n'),
    `${n > 0 ? `${n.toString(16)}\r\n${body}\r\n` : ''}0\r\n\r\n`,
  );
};

function signed(jobId: string, id = `msg_${randomUUID()}`): { headers: Headers; body: string } {
  const now = new Date();
  const body = JSON.stringify({
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
      'Content-Type': 'application/json',
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': signature,
    },
  };
}

describe('the callback route before express', () => {
  test('plain callbacks never reach express; chunked, compressed, oversized and odd paths do', async () => {
    const a = await w.attempt('replicate', { jobId: 'job-listener-1' });
    const before = expressCalls;
    const s = signed('job-listener-1');
    assert.match(await plain(`/v1/callbacks/replicate/${a.token}`, s.headers, s.body), /^HTTP\/1.1 200 /);
    assert.match(await plain('/v1/callbacks/replicate/not-a-token', { 'Content-Type': 'application/json' }, '{}'), /^HTTP\/1.1 404 /);
    assert.equal(expressCalls, before, 'served before express');
    await chunked(`/v1/callbacks/replicate/${a.token}`, s.headers, s.body);
    await plain(`/v1/callbacks/replicate/${a.token}`, { ...s.headers, 'Content-Encoding': 'gzip' }, s.body);
    await plain('/v1/callbacks/fal/%ff%fe', {}, '{}');
    await plain(`/v1/callbacks/replicate/${a.token}/`, s.headers, s.body);
    await plain(`/v1/callbacks/replicate/${a.token}`, s.headers, 'x'.repeat(bodyLimitBytes(w.config.API_BODY_LIMIT) + 1));
    assert.equal(expressCalls, before + 5);
  });

  test('each answer is the same bytes both ways: stored, duplicate, bad signature, bad payload, unknown token and provider', async () => {
    const a = await w.attempt('replicate', { jobId: 'job-listener-2' });
    const path = `/v1/callbacks/replicate/${a.token}`;
    const json = { 'Content-Type': 'application/json' };
    const cases: [string, string, Headers, () => string][] = [
      ['unsigned', path, json, () => '{}'],
      ['bad signature', path, { ...signed('job-listener-2').headers, 'webhook-signature': 'v1,AAAA' }, () => '{}'],
      ['unknown token', '/v1/callbacks/replicate/not-a-token', json, () => '{}'],
      ['unknown provider', '/v1/callbacks/constructor/x', json, () => '{}'],
      ['empty body', path, {}, () => ''],
    ];
    for (const [name, p, h, body] of cases) {
      const viaListener = await plain(p, h, body());
      assert.match(viaListener, /application\/problem\+json; charset=utf-8\r\nContent-Length: \d+\r\nETag: W\/"/, name);
      assert.equal(viaListener, await chunked(p, h, body()), name);
    }
    // A signed body that is not JSON, and a stored callback and its duplicate: each needs its own signature.
    const notJson = (): { headers: Headers; body: string } => {
      const id = `msg_${randomUUID()}`;
      const now = new Date();
      const body = 'not json';
      const sig = new Webhook(w.config.PROVIDER_REPLICATE_WEBHOOK_SECRET).sign(id, now, body);
      return { body, headers: { ...json, 'webhook-id': id, 'webhook-timestamp': String(Math.floor(now.getTime() / 1000)), 'webhook-signature': sig } };
    };
    const n1 = notJson();
    const n2 = notJson();
    assert.equal(await plain(path, n1.headers, n1.body), await chunked(path, n2.headers, n2.body), 'bad payload');
    const first = signed('job-listener-2');
    const second = signed('job-listener-2');
    const stored = await plain(path, first.headers, first.body);
    assert.match(stored, /^HTTP\/1.1 200 OK\r\n/);
    assert.equal(stored, await chunked(path, second.headers, second.body), 'stored');
    const dup = await plain(path, first.headers, first.body);
    assert.match(dup, /"duplicate":true/);
    assert.equal(dup, await chunked(path, second.headers, second.body), 'duplicate');
  });

  test('API_BODY_LIMIT reads as express reads it', () => {
    assert.equal(bodyLimitBytes('256kb'), 262_144);
    assert.equal(bodyLimitBytes('1mb'), 1_048_576);
    assert.equal(bodyLimitBytes('1.5KB'), 1_536);
    assert.equal(bodyLimitBytes('100'), 100);
    assert.throws(() => bodyLimitBytes('lots'), /not a size/);
  });
});
