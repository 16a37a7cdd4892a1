// domain/create-pace.ts: the create pace every worker's submit claims share. Examples of each
// rule, then its laws under fast-check over simulated claims (arrivals, waits, late or stalled
// returns): every claim is sent, the window bound holds whatever the returns, a backlog asks again
// spread out (a few claims per create, not a herd), late returns leave nothing unsent, and
// Replicate's documented account limits (the simulator's buckets) never throttle.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { CREATE_PACE_SHARE, DUE_SLACK_MS, createPaceFor, decidePace, paceWaitMs, type CreatePace } from '../../domain/create-pace';
import { REPLICATE_DOCUMENTED_LIMITS, ReplicateRateLimiter } from '../../providers/simulator/rate-limits';
import { attemptsLeft, isThrottle } from '../../activities/create-pace';

const T0 = 1_000_000;

test('a quota of 10/s paces at 9/s with a burst of 18 (two seconds of it)', () => {
  assert.deepEqual(createPaceFor(10), { ratePerSecond: 10 * CREATE_PACE_SHARE, burst: 18 });
  assert.equal(createPaceFor(0.5).burst, 1, 'never below one');
  assert.throws(() => createPaceFor(0), RangeError);
});

test('after a lull a burst goes at once, each create moving the TAT an interval; the next claim is told when the pace conforms and moves nothing', () => {
  const pace: CreatePace = { ratePerSecond: 10, burst: 3 };
  let tat: number | null = null;
  for (let i = 0; i < 3; i++) {
    const d = decidePace(pace, { nowMs: T0, tatMs: tat });
    assert.equal(d.kind, 'go', `claim ${i}`);
    tat = d.kind === 'go' ? d.tatMs : tat;
  }
  assert.equal(tat, T0 + 300);
  assert.deepEqual(decidePace(pace, { nowMs: T0, tatMs: tat }), { kind: 'wait', conformsInMs: 100 });
  assert.deepEqual(decidePace(pace, { nowMs: T0 + 95, tatMs: tat }), { kind: 'go', tatMs: T0 + 400 }, 'within the slack of its moment it goes');
  assert.deepEqual(decidePace(pace, { nowMs: T0 + 60_000, tatMs: tat }), { kind: 'go', tatMs: T0 + 60_100 }, 'a TAT long past counts from now');
});

test('a waiting claim sleeps until the pace conforms, plus an interval for each unsent claim before it', () => {
  const pace: CreatePace = { ratePerSecond: 10, burst: 3 };
  assert.equal(paceWaitMs(pace, 100, 0), 100);
  assert.equal(paceWaitMs(pace, 100, 25), 2_600);
  assert.equal(paceWaitMs(pace, -5, 1), 100, 'a moment already due counts as now');
});

interface Claim {
  readonly arrival: number;
  /** How late each return after a wait comes, ms, in turn (then 0); or by the moment it was told to come back. */
  readonly lateness: readonly number[] | ((atMs: number) => number);
}

/**
 * Runs the claims against one pace (the row's TAT) in time order, as claimLocked does: a claim that
 * must wait is told paceWaitMs with the unsent claims that arrived before it. The send times by claim.
 */
function simulate(pace: CreatePace, claims: readonly Claim[]): { sends: number[]; claimsMade: number } {
  let tat: number | null = null;
  const returns: number[] = claims.map(() => 0);
  const sends: number[] = claims.map(() => NaN);
  // Events: [time, claim index]; processed earliest first, ties by index (a lock serialises them).
  const events: [number, number][] = claims.map((c, i) => [c.arrival, i]);
  let claimsMade = 0;
  while (events.length > 0) {
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const [now, i] = events.shift()!;
    claimsMade += 1;
    assert.ok(claimsMade < claims.length * 50, 'claims keep coming back: the pace never lets some go');
    const d = decidePace(pace, { nowMs: now, tatMs: tat });
    if (d.kind === 'go') {
      tat = d.tatMs;
      sends[i] = now;
      continue;
    }
    // Before it: the unsent claims that arrived earlier, ties in index order (the attempt id's, in Postgres).
    const came = (j: number) => claims[j]!.arrival < claims[i]!.arrival || (claims[j]!.arrival === claims[i]!.arrival && j < i);
    const before = claims.filter((_, j) => came(j) && Number.isNaN(sends[j])).length;
    const at = now + paceWaitMs(pace, d.conformsInMs, before);
    const { lateness } = claims[i]!;
    const late = typeof lateness === 'function' ? lateness(at) : (lateness[returns[i]!] ?? 0);
    returns[i]! += 1;
    events.push([at + late, i]);
  }
  return { sends, claimsMade };
}

/** The most sends in any window [t, t + windowMs) that starts at a send. */
function mostInWindow(sends: readonly number[], windowMs: number): number {
  const s = [...sends].sort((a, b) => a - b);
  let most = 0;
  let j = 0;
  for (let i = 0; i < s.length; i++) {
    while (s[j]! < s[i]! - windowMs + 1e-9) j++;
    most = Math.max(most, i - j + 1);
  }
  return most;
}

/** Claims arriving over a short span (a burst that saturates the pace) or a long one, each late by up to `maxLate` ms on its returns. */
const claimsArb = (maxLate: number) =>
  fc.constantFrom(2_000, 30_000).chain((span) =>
    fc.array(
      fc.record({
        arrival: fc.integer({ min: 0, max: span }),
        lateness: fc.array(fc.integer({ min: 0, max: maxLate }), { maxLength: 3, size: 'max' }),
      }),
      { minLength: 1, maxLength: 200, size: 'max' },
    ),
  );

/** GCRA's bound: the burst at once, then one each interval, each send up to the slack before its conform time. */
const windowBound = (pace: CreatePace, windowMs: number) => pace.burst + Math.floor((windowMs + DUE_SLACK_MS) / (1_000 / pace.ratePerSecond) + 1e-9);

test('law: every claim is sent, and any window of W s holds at most burst + ⌊(W + slack) / interval⌋ creates, however late claims come back', () => {
  fc.assert(
    fc.property(fc.constantFrom(0.5, 1, 2.5, 10, 20), claimsArb(12_000), (quota, claims) => {
      const pace = createPaceFor(quota);
      const { sends } = simulate(pace, claims);
      assert.ok(sends.every((t) => Number.isFinite(t)));
      for (const windowMs of [1_000, 10_000, 60_000]) {
        const most = mostInWindow(sends, windowMs);
        assert.ok(most <= windowBound(pace, windowMs), `quota ${quota}/s: ${most} creates in ${windowMs} ms`);
      }
    }),
    { numRuns: 200 },
  );
});

test('law: the window bound holds when whole stretches of claims come back late together (a stalled worker) and the others on time', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(0.5, 1, 2.5, 10, 20),
      fc.integer({ min: 50, max: 400 }),
      fc.integer({ min: 0, max: 10_000 }),
      fc.integer({ min: 1_000, max: 20_000 }),
      fc.integer({ min: 1, max: 30_000 }),
      (quota, n, from, span, late) => {
        const pace = createPaceFor(quota);
        const stalled = (at: number) => (at >= from && at < from + span ? late : 0);
        const { sends } = simulate(
          pace,
          Array.from({ length: n }, () => ({ arrival: 0, lateness: stalled })),
        );
        assert.ok(sends.every((t) => Number.isFinite(t)));
        for (const windowMs of [1_000, 10_000, 60_000]) assert.ok(mostInWindow(sends, windowMs) <= windowBound(pace, windowMs));
      },
    ),
    { numRuns: 200 },
  );
});

test('law: a backlog that comes back on time asks again spread out, not as a herd (at most 4 claims per create), and drains at the pace', () => {
  fc.assert(
    fc.property(fc.constantFrom(1, 5, 10), claimsArb(0), (quota, claims) => {
      const pace = createPaceFor(quota);
      const { sends, claimsMade } = simulate(pace, claims);
      assert.ok(claimsMade <= 4 * claims.length, `quota ${quota}/s: ${claimsMade} claims for ${claims.length} creates`);
      // The last create goes no later than a queue served one each interval would send it (from
      // any arrival, the claims that arrive from then on, one interval each), an interval more and a slack.
      const interval = 1_000 / pace.ratePerSecond;
      const served = Math.max(...claims.map((c) => c.arrival + claims.filter((d) => d.arrival >= c.arrival).length * interval));
      const drained = served + interval + DUE_SLACK_MS;
      assert.ok(Math.max(...sends) <= drained, `quota ${quota}/s: last create at ${Math.max(...sends)} ms, drained by ${drained} ms`);
    }),
    { numRuns: 300 },
  );
});

test('law: claims that all come back late by the same L, up to the burst, cost no throughput: the backlog drains as if on time, L later', () => {
  fc.assert(
    // Quotas whose burst is a credit of over 1.5 s (at 1/s the burst is one: a late return loses its lateness).
    fc.property(fc.constantFrom(5, 10, 20), fc.integer({ min: 1, max: 1_500 }), claimsArb(0), (quota, late, onTime) => {
      const pace = createPaceFor(quota);
      const claims = onTime.map((c) => ({ ...c, lateness: Array.from({ length: 200 }, () => late) }));
      const { sends, claimsMade } = simulate(pace, claims);
      assert.ok(claimsMade <= 4 * claims.length, `quota ${quota}/s, late ${late} ms: ${claimsMade} claims for ${claims.length} creates`);
      const interval = 1_000 / pace.ratePerSecond;
      const served = Math.max(...claims.map((c) => c.arrival + claims.filter((d) => d.arrival >= c.arrival).length * interval));
      const drained = served + interval + DUE_SLACK_MS + late;
      assert.ok(Math.max(...sends) <= drained, `quota ${quota}/s, late ${late} ms: last create at ${Math.max(...sends)} ms, drained by ${drained} ms`);
    }),
    { numRuns: 300 },
  );
});

test("law: Replicate's documented account limits (the simulator's create bucket) never throttle a paced run at the documented quota", () => {
  fc.assert(
    fc.property(claimsArb(12_000), (claims) => {
      const quota = REPLICATE_DOCUMENTED_LIMITS.createPerMinute / 60;
      const { sends } = simulate(createPaceFor(quota), claims);
      let clock = 0;
      const limiter = new ReplicateRateLimiter(REPLICATE_DOCUMENTED_LIMITS, () => clock);
      for (const t of [...sends].sort((a, b) => a - b)) {
        clock = t;
        assert.equal(limiter.check('create'), null, `throttled at ${t} ms`);
      }
    }),
    { numRuns: 200 },
  );
});

test("the laws' runs, shrinking included, are bounded in time by the runner's setup (a failing law once shrank for half an hour)", () => {
  const limits = fc.readConfigureGlobal();
  // Set by test/support/property-limits.ts, which scripts/test.ts loads into every test file (not imported here, so this fails without it).
  assert.equal(limits.interruptAfterTimeLimit, 60_000);
  assert.equal(limits.markInterruptAsFailure, true);
});

test('a throttle is a retryable 429 only; each kind of attempt is bounded by its own limit', () => {
  const rejected = (status: number | null, retryable: boolean) => ({ kind: 'rejected' as const, retryable, status, retryAfterMs: null, reason: 'x' });
  assert.equal(isThrottle(rejected(429, true)), true);
  assert.equal(isThrottle(rejected(429, false)), false, 'a 429 an adapter calls final (Kling 1101: the account) is a rejection');
  assert.equal(isThrottle(rejected(null, true)), false, 'a request that never left is not a throttle');
  assert.equal(isThrottle({ kind: 'unknown', reason: 'timeout' }), false);
  const limits = { maxSubmitAttempts: 3, maxThrottledSubmits: 20 };
  assert.equal(attemptsLeft({ counted: 2, throttled: 20 }, limits), true);
  assert.equal(attemptsLeft({ counted: 3, throttled: 0 }, limits), false);
  assert.equal(attemptsLeft({ counted: 0, throttled: 21 }, limits), false);
});
