// The event hub's LISTEN connection (api/event-hub.ts) under a database that accepts and never
// answers: each attempt is given up after its timeout and the next one is made, so the hub
// listens as soon as the server answers again. Without the bound, the first stalled attempt held
// the hub unconnected for good, and streams heard nothing until a resync.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, test } from 'node:test';
import { createEventHub } from '../../api/event-hub';
import { eventually, testConfig, testLogger } from '../support/stack';

/** A TCP front for Postgres that swallows its first `stalled` connections (accepts, never answers) and forwards the rest. */
async function stallingFront(stalled: number): Promise<{ port: number; accepted: () => number; close(): Promise<void> }> {
  const target = new URL(testConfig().DATABASE_URL);
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  const server = net.createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    if (accepted <= stalled) return; // read nothing, answer nothing
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    upstream.on('error', () => socket.destroy());
    sockets.add(upstream);
    socket.pipe(upstream).pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    port: (server.address() as net.AddressInfo).port,
    accepted: () => accepted,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A hub whose LISTEN connections go through the front on `port`, each attempt given `connectTimeoutMs`. */
function hubBehind(port: number, connectTimeoutMs: number) {
  const url = new URL(testConfig().DATABASE_URL);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  // The server's own database: LISTEN needs no schema, and the suite's databases come and go.
  url.pathname = '/postgres';
  return createEventHub({ databaseUrl: url.toString(), resyncMs: 60_000, logger: testLogger, reconnectMs: 50, connectTimeoutMs });
}

const closers: (() => Promise<void>)[] = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});

test('a LISTEN attempt the server never answers is given up after its timeout and retried: the hub listens once the server answers', async () => {
  const front = await stallingFront(2);
  closers.push(() => front.close());
  // 1 s an attempt: the stalled ones wait it out; the real one (through the front) needs far less,
  // even on a loaded machine.
  const hub = hubBehind(front.port, 1_000);
  closers.push(() => hub.stop());
  const started = Date.now();
  hub.watchTask('00000000-0000-4000-8000-000000000000', () => undefined);
  await eventually(async () => (hub.listening() ? true : undefined), 15_000, 20);
  assert.ok(front.accepted() >= 3, `two stalled attempts given up, a later one listens (${front.accepted()} accepted)`);
  assert.equal(hub.connects(), 1);
  assert.ok(Date.now() - started >= 2_000, 'each stalled attempt waited its timeout');
});

test('stop() while an attempt is still opening against a server that does not answer returns at once and leaves nothing listening', async () => {
  const front = await stallingFront(1);
  closers.push(() => front.close());
  const hub = hubBehind(front.port, 5_000);
  hub.watchTask('00000000-0000-4000-8000-000000000000', () => undefined);
  await eventually(async () => (front.accepted() === 1 ? true : undefined), 5_000, 10);
  const started = Date.now();
  await hub.stop();
  assert.ok(Date.now() - started < 1_000, `stop took ${Date.now() - started} ms`);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(hub.listening(), false);
  assert.equal(front.accepted(), 1, 'no attempt after stop');
});
