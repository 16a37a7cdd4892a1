// Classification of transport failures into "provably not sent" vs "may have been sent".
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { classifyNetworkError, parseRetryAfter } from '../../providers/http-errors';

const fetchFailed = (cause: unknown): TypeError => new TypeError('fetch failed', { cause });
const withCode = (code: string): Error => Object.assign(new Error(code), { code });

test('connect-phase failures (refused, DNS, TLS certificate) are classified as not sent', () => {
  for (const code of ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'CERT_HAS_EXPIRED', 'ERR_TLS_CERT_ALTNAME_INVALID', 'DEPTH_ZERO_SELF_SIGNED_CERT']) {
    const c = classifyNetworkError(fetchFailed(withCode(code)));
    assert.equal(c.sent, false, code);
    assert.equal(c.fatal, false, code);
  }
});

test('failures after the connection was open (reset, socket closed, header timeout, unknown) may have been sent', () => {
  for (const code of ['ECONNRESET', 'UND_ERR_SOCKET', 'EPIPE', 'UND_ERR_HEADERS_TIMEOUT', 'SOMETHING_NEW']) {
    assert.equal(classifyNetworkError(fetchFailed(withCode(code))).sent, true, code);
  }
  assert.equal(classifyNetworkError(fetchFailed(new Error('no code'))).sent, true);
  assert.equal(classifyNetworkError(new Error('weird')).sent, true);
});

test('our timeout and a caller abort in flight both leave the outcome unknown', () => {
  assert.equal(classifyNetworkError(new DOMException('timeout', 'TimeoutError')).sent, true);
  assert.equal(classifyNetworkError(new DOMException('aborted', 'AbortError')).sent, true);
});

test('an AggregateError counts as not sent only when every address failed to connect', () => {
  const allRefused = new AggregateError([withCode('ECONNREFUSED'), withCode('ENETUNREACH')]);
  assert.equal(classifyNetworkError(fetchFailed(allRefused)).sent, false);
  const mixed = new AggregateError([withCode('ECONNREFUSED'), withCode('ECONNRESET')]);
  assert.equal(classifyNetworkError(fetchFailed(mixed)).sent, true);
});

test('a forbidden port is not sent and not retryable', () => {
  const c = classifyNetworkError(fetchFailed(new Error('bad port')));
  assert.deepEqual([c.sent, c.fatal], [false, true]);
});

test('Retry-After parses delta-seconds and HTTP dates; garbage is null', () => {
  const now = Date.parse('2025-01-01T00:00:00Z');
  assert.equal(parseRetryAfter('30', now), 30_000);
  assert.equal(parseRetryAfter('Wed, 01 Jan 2025 00:00:12 GMT', now), 12_000);
  assert.equal(parseRetryAfter('Tue, 31 Dec 2024 23:00:00 GMT', now), 0);
  assert.equal(parseRetryAfter('soon', now), null);
  assert.equal(parseRetryAfter(null, now), null);
});
