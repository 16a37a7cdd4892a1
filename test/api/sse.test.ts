// A Server-Sent Events stream whose client stops reading is cut once its unsent bytes pass the
// cap, instead of buffering in the API process without bound (api/sse.ts). Nothing is lost by
// it: a reconnect with Last-Event-ID replays every transition from Postgres (docs/events.md).
import assert from 'node:assert/strict';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import express from 'express';
import { openSse, type SseWriter } from '../../api/sse';

test('a client that stops reading is cut once the unsent bytes pass the cap; a reading client is not', async () => {
  const writers: SseWriter[] = [];
  const app = express();
  app.get('/stream', (req, res) => {
    writers.push(openSse(req, res, undefined, 256 * 1024));
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as AddressInfo;
  try {
    // A client that sends its request and never reads the answer.
    const stalled = net.connect(port, '127.0.0.1', () => stalled.write('GET /stream HTTP/1.1\r\nHost: x\r\n\r\n'));
    stalled.pause();
    // A client that reads everything.
    let received = 0;
    const reading = net.connect(port, '127.0.0.1', () => reading.write('GET /stream HTTP/1.1\r\nHost: x\r\n\r\n'));
    reading.on('data', (b) => (received += b.length));
    const deadline = Date.now() + 10_000;
    while (writers.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.equal(writers.length, 2, 'both streams opened');
    const payload = { blob: 'x'.repeat(8 * 1024) };
    for (let i = 0; i < 2_000 && !writers.every((w) => w.closed); i += 1) {
      for (const w of writers) w.send({ event: 'progress', data: payload });
      await new Promise((r) => setImmediate(r));
    }
    const [first, second] = writers as [SseWriter, SseWriter];
    // Which writer belongs to which socket: the reading one got its bytes.
    const cut = [first, second].filter((w) => w.closed);
    assert.equal(cut.length, 1, 'exactly the stalled stream was cut');
    assert.ok(received > 1024 * 1024, `the reading client kept receiving (${received} bytes)`);
    stalled.destroy();
    reading.destroy();
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});
