// One webhook attempt's bounds (net/webhook-send.ts, docs/security.md "Tenant webhook URLs"): an
// endless answer is read only up to the limit; a redirect is not followed; a name that resolves
// to a private address is refused at connect (the tenant is not told which address; the operator
// is), and the dev/test allowance admits loopback only; the timeout ends a hung receiver; every secret
// given signs, each exactly as the `standardwebhooks` package signs.
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes, randomInt } from 'node:crypto';
import { after, before, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { createSafeDispatcher, type Resolver } from '../../net/safe-fetch';
import { REFUSED_ADDRESS, sendWebhook, signatureHeader } from '../../net/webhook-send';
import { webhookUrlProblem } from '../../net/webhook-url';

let server: http.Server;
let base = '';
const hits: string[] = [];
const a = 'whsec_' + Buffer.from('a'.repeat(32)).toString('base64');
const b = 'whsec_' + Buffer.from('b'.repeat(32)).toString('base64');

before(async () => {
  server = http.createServer((req, res) => {
    hits.push(req.url ?? '');
    if (req.url === '/endless') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      const chunk = 'x'.repeat(64 * 1024);
      const pump = () => {
        while (res.write(chunk));
        res.once('drain', pump);
      };
      res.on('close', () => res.removeAllListeners('drain'));
      pump();
      return;
    }
    if (req.url === '/redirect') return void res.writeHead(302, { location: `${base}/target` }).end();
    if (req.url === '/hang') return; // never answers
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => res.writeHead(204).end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const request = (path: string, secrets = [a]) => ({
  url: `${base}${path}`,
  webhookId: 'msg_test',
  timestamp: new Date(),
  body: '{"type":"task.succeeded"}',
  secrets,
});
const loose = {
  dispatcher: createSafeDispatcher({ allowPrivate: false, allowLoopback: true }),
  allowLoopback: true,
  timeoutMs: 3_000,
  maxResponseBytes: 4_096,
};

test('an endless answer is read only up to WEBHOOK_RESPONSE_MAX_BYTES: the attempt ends at once, 512 characters kept', async () => {
  const started = Date.now();
  const r = await sendWebhook(request('/endless'), loose);
  assert.equal(r.ok, true);
  assert.equal(r.status, 200);
  assert.ok((r.excerpt ?? '').length <= 512);
  assert.ok(Date.now() - started < 2_000, 'not read to the timeout');
});

test('a redirect is a failed attempt and is not followed', async () => {
  hits.length = 0;
  const r = await sendWebhook(request('/redirect'), loose);
  assert.equal(r.ok, false);
  assert.equal(r.status, 302);
  assert.match(r.error ?? '', /redirects are not followed/);
  assert.deepEqual(hits, ['/redirect']);
});

test('a hung receiver ends at the attempt timeout', async () => {
  const r = await sendWebhook(request('/hang'), { ...loose, timeoutMs: 300 });
  assert.equal(r.ok, false);
  assert.equal(r.error, 'timed out');
  assert.ok(r.latencyMs >= 300 && r.latencyMs < 2_000);
});

const resolvesTo =
  (address: string): Resolver =>
  (_h, _o, cb) =>
    cb(null, [{ address, family: address.includes(':') ? 6 : 4 }]);

test('under the production rule a name resolving to loopback is refused at connect, the tenant not told the address (the operator is), and http is refused before it', async () => {
  for (const address of ['127.0.0.1', '10.20.30.40', '169.254.169.254']) {
    const dispatcher = createSafeDispatcher({ allowPrivate: false, resolve: resolvesTo(address) });
    const r = await sendWebhook({ ...request('/'), url: 'https://hooks.example.com/x' }, { ...loose, dispatcher, allowLoopback: false });
    assert.equal(r.ok, false);
    assert.equal(r.error, REFUSED_ADDRESS);
    assert.ok(!r.error.includes(address), 'the tenant-visible error names no address');
    assert.match(r.detail ?? '', new RegExp(`refused: hooks\\.example\\.com resolves to non-public address ${address.replace(/\./g, '\\.')}`));
  }
  const plain = await sendWebhook(request('/'), { ...loose, allowLoopback: false });
  assert.match(plain.error ?? '', /url must be an https URL/);
  assert.equal(plain.detail, null);
});

test('the dev/test allowance (WEBHOOK_ALLOW_PRIVATE) admits loopback only: private, link-local and metadata addresses stay refused, by URL and at connect', async () => {
  // By URL: http to loopback passes; any other non-public literal is refused, allowance or not.
  for (const url of ['http://127.0.0.1:9/x', 'http://localhost:9/x', 'http://[::1]:9/x', 'https://127.1.2.3/x'])
    assert.equal(webhookUrlProblem(url, true), null, url);
  for (const url of [
    'http://169.254.169.254/latest/meta-data',
    'http://10.0.0.1/x',
    'http://192.168.1.1/x',
    'http://[fe80::1]/x',
    'http://100.64.0.1/x',
    'http://[fd00::1]/x',
  ]) {
    assert.match(webhookUrlProblem(url, true) ?? '', /must name a public host/, url);
    assert.match(webhookUrlProblem(url, false) ?? '', /must be an https URL|must name a public host/, url);
  }
  // At connect: a name resolving to the metadata address or a private one is refused under the allowance.
  for (const address of ['169.254.169.254', '10.0.0.1', 'fe80::1']) {
    const dispatcher = createSafeDispatcher({ allowPrivate: false, allowLoopback: true, resolve: resolvesTo(address) });
    const r = await sendWebhook({ ...request('/'), url: 'http://hooks.example.com/x' }, { ...loose, dispatcher });
    assert.equal(r.ok, false, address);
    assert.equal(r.error, REFUSED_ADDRESS);
  }
  // …while a name resolving to loopback reaches the local receiver.
  const port = new URL(base).port;
  const local = createSafeDispatcher({ allowPrivate: false, allowLoopback: true, resolve: resolvesTo('127.0.0.1') });
  const ok = await sendWebhook({ ...request('/'), url: `http://receiver.test:${port}/` }, { ...loose, dispatcher: local });
  assert.equal(ok.ok, true, ok.error ?? '');
});

test('every secret signs: two signatures, each verifies alone', async () => {
  const seen: http.IncomingHttpHeaders[] = [];
  const s2 = http.createServer((req, res) => {
    seen.push(req.headers);
    req.resume().on('end', () => res.writeHead(200).end());
  });
  await new Promise<void>((r) => s2.listen(0, '127.0.0.1', () => r()));
  try {
    const req = { ...request('/', [a, b]), url: `http://127.0.0.1:${(s2.address() as AddressInfo).port}/` };
    assert.equal((await sendWebhook(req, loose)).ok, true);
    const h = seen[0]!;
    assert.equal(String(h['webhook-signature']).split(' ').length, 2);
    for (const secret of [a, b]) {
      new Webhook(secret).verify(req.body, {
        'webhook-id': String(h['webhook-id']),
        'webhook-timestamp': String(h['webhook-timestamp']),
        'webhook-signature': String(h['webhook-signature']),
      });
    }
  } finally {
    s2.closeAllConnections();
    await new Promise((r) => s2.close(r));
  }
});

test("each signature is byte for byte the standardwebhooks package's: random secrets, ids, timestamps and bodies (non-ASCII and lone surrogates too)", () => {
  const chars = ['a', 'é', '漢', '😀', '\ud800', '\udc00', '\n', '"', '.'];
  for (let i = 0; i < 300; i += 1) {
    const secrets = Array.from({ length: 1 + (i % 2) }, () => `whsec_${randomBytes(randomInt(1, 64)).toString('base64')}`);
    const id = `msg_${randomBytes(randomInt(1, 24)).toString('base64url')}`;
    const at = new Date(randomInt(0, 2 ** 40));
    const body = Array.from({ length: randomInt(0, 200) }, () => chars[randomInt(chars.length)]).join('');
    assert.equal(signatureHeader(secrets, id, at, body), secrets.map((secret) => new Webhook(secret).sign(id, at, body)).join(' '));
  }
});
