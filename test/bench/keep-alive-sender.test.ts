// bench/lib/keep-alive-sender.ts, the callbacks benchmark's webhook sender: every request reaches
// a node:http server whole (its headers and body as given), connections are kept alive and
// reused (one per lane), answers are framed by Content-Length or chunked, and a connection the
// server closes fails its request and is replaced. Loopback only; no services.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { createKeepAliveSender } from '../../bench/lib/keep-alive-sender';

let server: http.Server;
let base: string;
const seen: { url: string; headers: http.IncomingHttpHeaders; body: string; socket: unknown }[] = [];

before(async () => {
  server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      seen.push({ url: req.url ?? '', headers: req.headers, body, socket: req.socket });
      const answer = JSON.stringify({ echoed: body.length, id: req.headers['webhook-id'] ?? null });
      if (req.url === '/chunked') {
        res.write(answer.slice(0, 5));
        res.end(answer.slice(5));
        return;
      }
      if (req.url === '/close') res.setHeader('Connection', 'close');
      if (req.url === '/drop') return req.socket.destroy();
      res.setHeader('Content-Type', 'application/json');
      res.setHeader('Content-Length', Buffer.byteLength(answer));
      res.statusCode = req.url === '/missing' ? 404 : 200;
      res.end(answer);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

test('each request reaches the server whole, and each lane keeps one connection for all its requests', async () => {
  seen.length = 0;
  const sender = createKeepAliveSender(base, 4);
  try {
    const lanes = Array.from({ length: 4 }, async (_, lane) => {
      for (let i = 0; i < 25; i++) {
        const body = JSON.stringify({ lane, i, text: 'ü'.repeat(i) });
        const res = await sender.post(`/v1/callbacks/replicate/tok${lane}`, { 'content-type': 'application/json', 'webhook-id': `msg_${lane}_${i}` }, body);
        assert.equal(res.status, 200);
        assert.deepEqual(JSON.parse(res.body.toString()), { echoed: body.length, id: `msg_${lane}_${i}` });
      }
    });
    await Promise.all(lanes);
    assert.equal(seen.length, 100);
    assert.equal(sender.connectionsOpened(), 4);
    assert.equal(new Set(seen.map((s) => s.socket)).size, 4);
    const one = seen.find((s) => s.headers['webhook-id'] === 'msg_2_7')!;
    assert.equal(one.url, '/v1/callbacks/replicate/tok2');
    assert.deepEqual(JSON.parse(one.body), { lane: 2, i: 7, text: 'ü'.repeat(7) });
    assert.equal(one.headers['content-length'], String(Buffer.byteLength(one.body)));
  } finally {
    sender.close();
  }
});

test('a chunked answer and a 404 are read whole, and the connection stays in use', async () => {
  const sender = createKeepAliveSender(base, 1);
  try {
    const chunked = await sender.post('/chunked', { 'webhook-id': 'c1' }, 'abc');
    assert.deepEqual(JSON.parse(chunked.body.toString()), { echoed: 3, id: 'c1' });
    const missing = await sender.post('/missing', {}, '');
    assert.equal(missing.status, 404);
    assert.equal(sender.connectionsOpened(), 1);
  } finally {
    sender.close();
  }
});

test('a connection the server closes fails its request or ends after its answer, and the next request opens another', async () => {
  const sender = createKeepAliveSender(base, 1);
  try {
    await assert.rejects(sender.post('/drop', {}, 'x'), /ECONNRESET|closed/);
    const closing = await sender.post('/close', {}, 'y');
    assert.equal(closing.status, 200);
    const next = await sender.post('/ok', {}, 'z');
    assert.equal(next.status, 200);
    assert.equal(sender.connectionsOpened(), 3);
  } finally {
    sender.close();
  }
});

test('a header holding CR or LF is refused before anything is sent', async () => {
  const sender = createKeepAliveSender(base, 1);
  try {
    await assert.rejects(sender.post('/ok', { 'webhook-id': 'a\r\nX-Injected: 1' }, ''), /CR or LF/);
    assert.equal(sender.connectionsOpened(), 0);
  } finally {
    sender.close();
  }
});
