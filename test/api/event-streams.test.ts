// The caps on open event streams (api/event-streams.ts): per tenant → 429, per process → 503,
// both problem+json with Retry-After, and a released stream frees its place exactly once.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createEventHub } from '../../api/event-hub';
import { createEventStreams } from '../../api/event-streams';
import { HttpProblem } from '../../api/problem';
import type { Db } from '../../db/client';
import { testLogger } from '../support/stack';

function streams(maxPerTenant: number, maxStreams: number) {
  // Admission touches neither the database nor the hub (which connects only on a first watch).
  const hub = createEventHub({ databaseUrl: 'postgres://unused.invalid/none', resyncMs: 60_000, logger: testLogger });
  return createEventStreams({
    db: {} as Db,
    hub,
    logger: testLogger,
    fence: () => Promise.reject(new Error('not used')),
    settings: {
      heartbeatMs: 1_000,
      progressIntervalMs: 1_000,
      maxPerTenant,
      maxStreams,
      pollAfterMs: 1_000,
      retryMs: 1_000,
      resumeMaxAgeMs: 86_400_000,
      fenceCacheMs: 0,
    },
  });
}

const refusal = (fn: () => unknown, status: number) =>
  assert.throws(fn, (e: unknown) => e instanceof HttpProblem && e.status === status && e.headers['Retry-After'] !== undefined);

test('one stream over the tenant cap is refused 429; other tenants are not affected; a release frees the place once', () => {
  const s = streams(2, 100);
  const a1 = s.admit('a');
  s.admit('a');
  refusal(() => s.admit('a'), 429);
  const b = s.admit('b');
  assert.equal(s.open('a'), 2);
  assert.equal(s.open(), 3);
  a1();
  a1();
  assert.equal(s.open('a'), 1, 'a double release counts once');
  s.admit('a');
  refusal(() => s.admit('a'), 429);
  b();
  assert.equal(s.open('b'), 0);
});

test('one stream over the process cap is refused 503, and every stream after close()', async () => {
  const s = streams(10, 2);
  s.admit('a');
  const release = s.admit('b');
  refusal(() => s.admit('c'), 503);
  release();
  s.admit('c');
  await s.close();
  refusal(() => s.admit('d'), 503);
});

test('the degraded event: none in NORMAL; DEGRADED_NOTIFY and every mode below it say poll, with the hint', () => {
  const s = streams(1, 1);
  assert.equal(s.degraded('NORMAL'), null);
  for (const m of ['DEGRADED_NOTIFY', 'DEGRADED_PROVIDER', 'QUEUE_ONLY', 'RECONCILE_ONLY', 'READ_ONLY', 'MAINTENANCE'] as const) {
    assert.deepEqual({ ...s.degraded(m), detail: undefined }, { mode: m, poll_after_ms: 1_000, detail: undefined }, m);
  }
});
