// The Standard Webhooks check on node:crypto (providers/standard-webhooks.ts) beside the
// `standardwebhooks` package's own: what the package signs verifies, and for every tampered,
// expired, early, multi-signature or malformed delivery both give the same answer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { createStandardWebhookVerifier, STANDARD_WEBHOOK_TOLERANCE_SECONDS, type StandardWebhookHeaders } from '../../providers/standard-webhooks';

const SECRET = `whsec_${Buffer.from('test-webhook-secret-0123456789ab').toString('base64')}`;
const BODY = JSON.stringify({ id: 'p_1', status: 'processing', logs: 'step 1 — ünïcödé ✓', output: null });

/** The package's answer for the same delivery: true when it verifies. */
function packageAccepts(secret: string, h: StandardWebhookHeaders, body: string): boolean {
  try {
    const headers: Record<string, string> = {};
    if (h.id !== undefined) headers['webhook-id'] = h.id;
    if (h.timestamp !== undefined) headers['webhook-timestamp'] = h.timestamp;
    if (h.signature !== undefined) headers['webhook-signature'] = h.signature;
    new Webhook(secret).verify(body, headers, { jsonParse: false });
    return true;
  } catch {
    return false;
  }
}

function signed(secret: string, id: string, at: Date, body: string): StandardWebhookHeaders {
  return { id, timestamp: String(Math.floor(at.getTime() / 1000)), signature: new Webhook(secret).sign(id, at, body) };
}

test("the spec's example delivery verifies (secret, id, timestamp, body and signature as documented)", () => {
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
  const h = { id: 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp: '1614265330', signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=' };
  const body = '{"test": 2432232314}';
  const v = createStandardWebhookVerifier(secret);
  assert.equal(v.verify(h, body, 1614265330_000), 'ok');
  assert.equal(v.verify({ ...h, signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE' }, body, 1614265330_000), 'no-match');
});

test("the package's sign output verifies, over random secrets, ids and bodies (the key is the package's)", () => {
  for (let i = 0; i < 200; i++) {
    const raw = randomBytes(1 + (i % 64));
    // With and without the prefix; base64 with and without its padding, as the package takes it.
    const b64 = raw.toString('base64');
    const secret = i % 3 === 0 ? b64 : i % 3 === 1 ? `whsec_${b64}` : `whsec_${b64.replace(/=+$/, '')}`;
    let packageKeyOk = true;
    try {
      new Webhook(secret);
    } catch {
      packageKeyOk = false;
    }
    if (!packageKeyOk) {
      assert.throws(() => createStandardWebhookVerifier(secret), `the package refuses ${secret}: so must we`);
      continue;
    }
    const body = i % 5 === 0 ? '' : `${BODY}${randomBytes(i).toString('hex')}`;
    const id = `msg_${randomBytes(8).toString('hex')}`;
    const at = new Date(Date.now() - (i % 7) * 30_000);
    const h = signed(secret, id, at, body);
    assert.equal(createStandardWebhookVerifier(secret).verify(h, body), 'ok', `secret ${secret}`);
    assert.equal(packageAccepts(secret, h, body), true);
  }
});

test('the secrets the package refuses are refused (not base64, empty, bad padding)', () => {
  for (const secret of ['', 'whsec_', 'whsec_abc', 'YW Jj', 'YW-j', 'whsec_YWJ', 'whsec_YWJj===']) {
    assert.throws(() => new Webhook(secret));
    assert.throws(() => createStandardWebhookVerifier(secret), `refuses ${JSON.stringify(secret)}`);
  }
});

test('a tampered body, id or timestamp, or another key, is no-match; the package agrees', () => {
  const v = createStandardWebhookVerifier(SECRET);
  const h = signed(SECRET, 'msg_1', new Date(), BODY);
  const other = `whsec_${Buffer.from('another-secret-0123456789abcdef!').toString('base64')}`;
  const cases: [StandardWebhookHeaders, string, string][] = [
    [h, `${BODY} `, 'a byte added'],
    [h, BODY.replace('processing', 'succeeded'), 'a field changed'],
    [h, BODY.replace('✓', '✗'), 'a multi-byte character changed'],
    [{ ...h, id: 'msg_2' }, BODY, 'another id'],
    [{ ...h, timestamp: String(Number(h.timestamp) - 1) }, BODY, 'another timestamp'],
    [signed(other, 'msg_1', new Date(), BODY), BODY, 'signed with another key'],
    [{ ...h, signature: h.signature!.replace('v1,', 'v2,') }, BODY, 'the right HMAC under another version'],
    [{ ...h, signature: h.signature!.slice(0, -2) }, BODY, 'truncated'],
    [{ ...h, signature: `${h.signature!.slice(0, 10)}${h.signature![10] === 'A' ? 'B' : 'A'}${h.signature!.slice(11)}` }, BODY, 'one character changed'],
    [{ ...h, signature: h.signature!.slice(3) }, BODY, 'no version'],
    [{ ...h, signature: 'v1,' }, BODY, 'an empty signature'],
    [{ ...h, signature: 'v1' }, BODY, 'a version alone'],
  ];
  for (const [hh, body, what] of cases) {
    assert.equal(v.verify(hh, body), 'no-match', what);
    assert.equal(packageAccepts(SECRET, hh, body), false, `the package: ${what}`);
  }
});

test('several signatures: one matching v1 entry is enough, in any place; other versions are skipped', () => {
  const v = createStandardWebhookVerifier(SECRET);
  const h = signed(SECRET, 'msg_multi', new Date(), BODY);
  const good = h.signature!;
  const bad = `v1,${createHmac('sha256', 'x').update('y').digest('base64')}`;
  const accepted = [`${bad} ${good}`, `${good} ${bad}`, `v1a,zzz ${good}`, `v2,${good.slice(3)} ${good}`, `${good},trailing`, `${bad} ${bad} ${good}`];
  for (const signature of accepted) {
    assert.equal(v.verify({ ...h, signature }, BODY), 'ok', signature);
    assert.equal(packageAccepts(SECRET, { ...h, signature }, BODY), true, `the package: ${signature}`);
  }
  // The header is split on single spaces, as the package splits it: a tab or a double space
  // makes an entry that is not the signature.
  for (const signature of [`${bad} ${bad}`, `${bad}\t${good}`, `v2,${good.slice(3)}`]) {
    assert.equal(v.verify({ ...h, signature }, BODY), 'no-match', signature);
    assert.equal(packageAccepts(SECRET, { ...h, signature }, BODY), false, `the package: ${signature}`);
  }
  assert.equal(v.verify({ ...h, signature: `${bad}  ${good}` }, BODY), 'ok', 'an empty entry between is skipped');
  assert.equal(packageAccepts(SECRET, { ...h, signature: `${bad}  ${good}` }, BODY), true);
});

test('the timestamp: within five minutes either way verifies; past it is too-old or too-new, as the package says', () => {
  const v = createStandardWebhookVerifier(SECRET);
  const nowMs = Date.now();
  const nowS = Math.floor(nowMs / 1000);
  const at = (s: number) => new Date(s * 1000);
  const tol = STANDARD_WEBHOOK_TOLERANCE_SECONDS;
  assert.equal(tol, 300);
  const expect: [number, string][] = [
    [nowS, 'ok'],
    [nowS - tol, 'ok'],
    [nowS + tol, 'ok'],
    [nowS - tol - 1, 'too-old'],
    [nowS + tol + 1, 'too-new'],
    [nowS - 86_400, 'too-old'],
  ];
  for (const [ts, want] of expect) {
    const h = signed(SECRET, `msg_${ts}`, at(ts), BODY);
    assert.equal(v.verify(h, BODY, nowMs), want, `timestamp now ${ts - nowS} s`);
    // The package reads its own clock: compare where a second's tick cannot change the answer.
    if (Math.abs(ts - nowS) !== tol) assert.equal(packageAccepts(SECRET, h, BODY), want === 'ok', `the package at ${ts - nowS} s`);
  }
  // A stale delivery with a valid signature is still stale, not a match.
  assert.equal(v.verify(signed(SECRET, 'msg_old', at(nowS - 3600), BODY), BODY, nowMs), 'too-old');
});

test('missing headers or a timestamp that is not a number are missing-headers; the package refuses them too', () => {
  const v = createStandardWebhookVerifier(SECRET);
  const h = signed(SECRET, 'msg_m', new Date(), BODY);
  const cases: StandardWebhookHeaders[] = [
    { ...h, id: undefined },
    { ...h, timestamp: undefined },
    { ...h, signature: undefined },
    { ...h, id: '' },
    { ...h, signature: '' },
    { ...h, timestamp: 'soon' },
  ];
  for (const hh of cases) {
    assert.equal(v.verify(hh, BODY), 'missing-headers', JSON.stringify(hh));
    assert.equal(packageAccepts(SECRET, hh, BODY), false);
  }
});

test('random mutations of a signed delivery: the two checks give the same answer every time', () => {
  const v = createStandardWebhookVerifier(SECRET);
  const chars = 'v1,2 ABCDEFabcdef0123+/=';
  let accepted = 0;
  for (let i = 0; i < 2000; i++) {
    const h = signed(SECRET, `msg_${i}`, new Date(), BODY);
    const sig = h.signature!.split('');
    const edits = i % 4;
    for (let e = 0; e < edits; e++) {
      const at = (i * 31 + e * 17) % (sig.length + 1);
      const op = (i + e) % 3;
      const ch = chars[(i * 7 + e) % chars.length]!;
      if (op === 0) sig.splice(at, 0, ch);
      else if (op === 1) sig.splice(at, 1);
      else sig.splice(at, 1, ch);
    }
    const hh = { ...h, signature: i % 9 === 0 ? `${sig.join('')} ${h.signature}` : sig.join('') };
    const ours = v.verify(hh, BODY) === 'ok';
    assert.equal(ours, packageAccepts(SECRET, hh, BODY), `mutation ${i}: ${hh.signature}`);
    if (ours) accepted++;
  }
  assert.ok(accepted > 400 && accepted < 1800, `both accepted and refused cases were drawn (${accepted} accepted)`);
});
