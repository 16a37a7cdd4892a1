// Call-side resilience primitives (docs/design.md §6): breaker transitions, retry-budget amplification,
// backoff with Retry-After and deadlines, and the bulkhead under overload and after a rebuild.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { allowedSlots, Bulkhead, CircuitBreaker, RetryBudget, type BreakerState } from '../../providers/resilience';

function clock(start = 1_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

/** A seeded PRNG (mulberry32) so ramp tests are deterministic. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

function breaker(c: ReturnType<typeof clock>, changes: string[] = []) {
  return new CircuitBreaker({
    now: c.now,
    minimumRequests: 10,
    failureRateThreshold: 0.5,
    openMs: 5_000,
    halfOpenMaxProbes: 2,
    halfOpenSuccesses: 3,
    recoveryMs: 10_000,
    recoveryStartShare: 0.2,
    random: seeded(7),
    onStateChange: (from: BreakerState, to: BreakerState) => changes.push(`${from}->${to}`),
  });
}

function call(b: CircuitBreaker, ok: boolean): boolean {
  const d = b.tryAcquire();
  if (!d.allowed) return false;
  if (ok) b.onSuccess(d.ticket);
  else b.onFailure(d.ticket);
  return true;
}

test('breaker stays closed below the minimum of requests, opens at the failure-rate threshold, and rejects while open', () => {
  const c = clock();
  const b = breaker(c);
  for (let i = 0; i < 9; i++) call(b, false);
  assert.equal(b.state, 'closed', '9 failures < minimum of 10');
  for (let i = 0; i < 1; i++) call(b, false);
  assert.equal(b.state, 'open');
  const d = b.tryAcquire();
  assert.deepEqual(d.allowed ? d : [d.reason, d.retryAfterMs], ['open', 5_000]);
  assert.equal(b.snapshot().admittedShare, 0);
});

test('breaker: a failure rate under the threshold keeps it closed; old failures leave the sliding window', () => {
  const c = clock();
  const b = breaker(c);
  for (let i = 0; i < 30; i++) call(b, i % 3 !== 0); // one in three fails
  assert.equal(b.state, 'closed');
  for (let i = 0; i < 9; i++) call(b, false);
  c.advance(31_000); // the window (30 s) has passed
  call(b, false);
  assert.equal(b.state, 'closed');
});

test('breaker: open → half-open after the cool-down with at most N probes at once; a probe failure re-opens it', () => {
  const c = clock();
  const changes: string[] = [];
  const b = breaker(c, changes);
  for (let i = 0; i < 10; i++) call(b, false);
  c.advance(5_000);
  assert.equal(b.state, 'half-open');
  const p1 = b.tryAcquire();
  const p2 = b.tryAcquire();
  const p3 = b.tryAcquire();
  assert.ok(p1.allowed && p2.allowed && p1.ticket.probe);
  assert.deepEqual(p3.allowed ? 'allowed' : p3.reason, 'probes-busy');
  if (p1.allowed) b.onFailure(p1.ticket);
  assert.equal(b.state, 'open');
  // The other probe's late answer belongs to an older generation: it changes nothing.
  if (p2.allowed) b.onSuccess(p2.ticket);
  assert.equal(b.state, 'open');
  assert.deepEqual(changes, ['closed->open', 'open->half-open', 'half-open->open']);
});

test('breaker: enough probe successes close it, then it recovers gradually (admitted share ramps to 1)', () => {
  const c = clock();
  const b = breaker(c);
  for (let i = 0; i < 10; i++) call(b, false);
  c.advance(5_000);
  for (let i = 0; i < 3; i++) assert.ok(call(b, true));
  assert.equal(b.state, 'closed');
  const admitted = (n: number): number => {
    let k = 0;
    for (let i = 0; i < n; i++) {
      const d = b.tryAcquire();
      if (d.allowed) {
        k++;
        b.onSuccess(d.ticket);
      }
    }
    return k;
  };
  const atStart = admitted(1000);
  assert.ok(atStart > 120 && atStart < 280, `~20 % admitted right after closing, got ${atStart}`);
  c.advance(5_000);
  const half = admitted(1000);
  assert.ok(half > 520 && half < 680, `~60 % admitted half-way, got ${half}`);
  c.advance(5_000);
  assert.equal(admitted(1000), 1000);
});

test('breaker: the operator switch forces it open or closed, and clearing it resumes automatic control', () => {
  const c = clock();
  const b = breaker(c);
  b.setForced('open');
  const d = b.tryAcquire();
  assert.deepEqual(d.allowed ? 'allowed' : d.reason, 'forced-open');
  assert.equal(b.snapshot().state, 'open');
  b.setForced('closed');
  for (let i = 0; i < 50; i++) assert.ok(call(b, false), 'force-closed admits everything');
  assert.equal(b.state, 'closed');
  b.setForced(null);
  assert.equal(b.state, 'closed');
  call(b, false); // automatic control trips on the window it kept
  assert.equal(b.state, 'open');
});

test('breaker in strict mode (DEGRADED_PROVIDER): trips at the lower failure rate, sends no half-open probes, and probes again once lifted', () => {
  const c = clock();
  const changes: string[] = [];
  const b = breaker(c, changes);
  for (let i = 0; i < 7; i++) call(b, true);
  for (let i = 0; i < 3; i++) call(b, false);
  assert.equal(b.state, 'closed', '30 % failures stay under the usual 50 %');
  b.setStrict(0.25);
  assert.equal(b.state, 'open', 'the strict threshold trips it as soon as it is set');
  c.advance(5_000);
  const refused = b.tryAcquire();
  assert.deepEqual(refused.allowed ? refused : refused.reason, 'strict', 'no probe after the cool-down while strict');
  b.setStrict(null);
  const probe = b.tryAcquire();
  assert.ok(probe.allowed && probe.ticket.probe, 'lifted: a half-open probe goes');
  assert.deepEqual(changes, ['closed->open', 'open->half-open']);
  b.setForced('closed');
  b.setStrict(0.25);
  assert.ok(b.tryAcquire().allowed, "an operator's force-close wins over strictness");
});

test('breaker in strict mode stays closed for a healthy provider', () => {
  const c = clock();
  const b = breaker(c);
  b.setStrict(0.2);
  for (let i = 0; i < 19; i++) call(b, true);
  call(b, false);
  assert.equal(b.state, 'closed', '5 % failures');
  assert.ok(b.tryAcquire().allowed);
});

test('retry budget bounds amplification: 100 % failures for 1,000 tasks cost ≤ 1 + share calls per task (a fixed 3 retries would cost 4)', () => {
  const c = clock();
  const ratio = 0.1;
  const budget = new RetryBudget({ ratio, minRetriesPerSecond: 0.1, windowMs: 10_000, now: c.now });
  let calls = 0;
  const tasks = 1_000;
  for (let i = 0; i < tasks; i++) {
    c.advance(20); // 50 tasks per second
    budget.recordRequest();
    calls++;
    for (let retry = 0; retry < 3; retry++) {
      if (!budget.tryRetry()) break;
      calls++;
    }
  }
  const perTask = calls / tasks;
  assert.ok(perTask <= 1 + ratio + 0.01, `calls per task ${perTask}`);
  assert.ok(perTask > 1.05, `the budget does allow some retries (${perTask})`);
});

test('retry budget: a quiet provider still gets its minimum, and the budget refills as the window slides', () => {
  const c = clock();
  const budget = new RetryBudget({ ratio: 0.1, minRetriesPerSecond: 0.2, windowMs: 10_000, now: c.now });
  assert.equal(budget.tryRetry(), true);
  assert.equal(budget.tryRetry(), true);
  assert.equal(budget.tryRetry(), false, 'minimum = 0.2/s × 10 s = 2');
  c.advance(10_001);
  assert.equal(budget.tryRetry(), true);
});

test('bulkhead holds under 10× overload: never more in flight than the limit, counted from the facts', async () => {
  const c = clock();
  let facts = 0; // attempts in SUBMITTING/SUBMITTED/RUNNING, as Postgres would count them
  let maxSeen = 0;
  const bh = new Bulkhead({
    limit: 10,
    now: c.now,
    inFlight: async () => {
      await new Promise((r) => setTimeout(r, Math.random() * 3)); // a query's latency
      return facts;
    },
  });
  let admitted = 0;
  const run = async (): Promise<void> => {
    const d = await bh.acquire();
    if (!d.admitted) return;
    admitted++;
    await new Promise((r) => setTimeout(r, 1));
    facts++; // the attempt's SUBMITTING is committed: the facts count it now
    d.release();
    maxSeen = Math.max(maxSeen, facts);
    await new Promise((r) => setTimeout(r, 5 + Math.random() * 5)); // the provider works
    facts--;
  };
  await Promise.all(Array.from({ length: 100 }, run));
  assert.ok(maxSeen <= 10, `max in flight ${maxSeen}`);
  assert.ok(admitted >= 10, `admitted ${admitted}`);
  assert.equal(bh.rejected, 100 - admitted);
});

test('bulkhead after a rebuild ramps up slowly instead of refilling at once (docs/design.md §6)', async () => {
  assert.equal(allowedSlots(10, null, 0), 10);
  assert.equal(allowedSlots(10, 0, 0, { startShare: 0.2, durationMs: 60_000 }), 2);
  assert.equal(allowedSlots(10, 0, 30_000, { startShare: 0.2, durationMs: 60_000 }), 6);
  assert.equal(allowedSlots(10, 0, 60_000, { startShare: 0.2, durationMs: 60_000 }), 10);
  assert.equal(allowedSlots(3, 0, 0, { startShare: 0.1 }), 1, 'at least one slot');
  assert.equal(allowedSlots(10, 0, 0, { startShare: 0.1, minSlots: 3 }), 3, 'never below the floor');
  assert.equal(allowedSlots(2, 0, 0, { startShare: 0.2, minSlots: 5 }), 2, 'the floor never lifts the ceiling over the limit');
  assert.equal(allowedSlots(10, 0, 0, { durationMs: 0 }), 10, 'a zero-length ramp is no ramp');
  const c = clock();
  let facts = 0;
  const bh = new Bulkhead({ limit: 10, now: c.now, inFlight: () => facts, ramp: { startShare: 0.2, durationMs: 60_000 } });
  bh.markRebuilt();
  const take = async (n: number): Promise<number> => {
    let k = 0;
    for (let i = 0; i < n; i++) {
      const d = await bh.acquire();
      if (d.admitted) {
        facts++;
        d.release();
        k++;
      }
    }
    return k;
  };
  assert.equal(await take(10), 2);
  c.advance(30_000);
  assert.equal(await take(10), 4);
  c.advance(30_000);
  assert.equal(await take(10), 4);
  assert.equal(facts, 10);
});
