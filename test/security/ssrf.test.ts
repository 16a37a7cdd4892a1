// Attack: a provider (or, later, a tenant) hands us a URL that points inside our network. The
// output guard (activities/output-url.ts over net/safe-fetch.ts) refuses every non-public
// address in any spelling — IPv4-mapped and -compatible IPv6, NAT64, 6to4, site-local, CGNAT,
// benchmarking, multicast, 0.0.0.0 — and checks names at connect time, so a name that resolves
// to a private address when fetched (DNS rebinding) never gets a connection.
import assert from 'node:assert/strict';
import http, { type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { UnsafeUrlError, validateOutputUrl } from '../../activities/output-url';
import { createSafeDispatcher, publicAddress, unsafeAddressIn, type Resolver } from '../../net/safe-fetch';

const REFUSED = [
  '127.0.0.1',
  '10.1.2.3',
  '172.16.0.1',
  '192.168.1.1',
  '169.254.169.254',
  '0.0.0.0',
  '100.64.0.1',
  '198.18.0.1',
  '192.0.0.1',
  '224.0.0.1',
  '240.0.0.1',
  '255.255.255.255',
  '::1',
  '::',
  '::ffff:7f00:1',
  '::ffff:127.0.0.1',
  '::7f00:1',
  '::127.0.0.1',
  '64:ff9b::7f00:1',
  '64:ff9b:1::a9fe:a9fe',
  '2002:7f00:1::1',
  '2002:a00:1::1',
  '2001:0:4136:e378:8000:63bf:3fff:fdd2',
  'fe80::1',
  'fec0::1',
  'fc00::1',
  'fd12:3456::1',
  'ff02::1',
  '2001:db8::1',
  '100::1',
];
const ALLOWED = ['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '2a00:1450:4001:80b::200e'];

test('every special-purpose address, in every spelling, is refused; public ones pass', () => {
  for (const address of REFUSED) {
    assert.equal(publicAddress(address), false, address);
    const host = address.includes(':') ? `[${address}]` : address;
    const url = `https://${host}/out.mp4`;
    assert.throws(() => validateOutputUrl(url, { allowedHosts: [new URL(url).hostname], allowPrivate: false }), UnsafeUrlError, address);
  }
  for (const address of ALLOWED) {
    const host = address.includes(':') ? `[${address}]` : address;
    const url = `https://${host}/out.mp4`;
    assert.doesNotThrow(() => validateOutputUrl(url, { allowedHosts: [new URL(url).hostname], allowPrivate: false }), address);
  }
});

let target: Server;
let hits = 0;
before(async () => {
  target = http.createServer((_req, res) => {
    hits += 1;
    res.end('internal');
  });
  await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', () => resolve()));
});
after(() => target?.close());

test('a name that resolves to a private address at connect time (DNS rebinding) gets no connection', async () => {
  const port = (target.address() as AddressInfo).port;
  // The name looked public when validated; at connect time it answers loopback.
  const rebinding: Resolver = (_host, _opts, cb) => cb(null, [{ address: '127.0.0.1', family: 4 }]);
  const mixed: Resolver = (_host, _opts, cb) =>
    cb(null, [
      { address: '8.8.8.8', family: 4 },
      { address: '::ffff:10.0.0.1', family: 6 },
    ]);
  for (const resolve of [rebinding, mixed]) {
    const err = await fetch(`http://outputs.provider.example:${port}/out.mp4`, { dispatcher: createSafeDispatcher({ allowPrivate: false, resolve }) }).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(unsafeAddressIn(err), `refused at connect: ${String(err)}`);
  }
  assert.equal(hits, 0, 'the internal server saw no request');
  // With the dev switch (the local simulator) the same dispatcher shape connects: the refusal is the guard's.
  const ok = await fetch(`http://127.0.0.1:${port}/`, { dispatcher: createSafeDispatcher({ allowPrivate: true }) });
  assert.equal(await ok.text(), 'internal');
});
