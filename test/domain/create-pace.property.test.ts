// domain/create-pace.ts: the create pace every worker's submit claims share. Examples of each
// rule, then its laws under fast-check over simulated claims (arrivals, sleeps until the reserved
// moment, late returns): every claim is sent, the window bound holds, on-time claims go in the
// order they came, and Replicate's documented account limits (the simulator's buckets) never throttle.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { CREATE_PACE_SHARE, DUE_SLACK_MS, RESERVATION_GRACE_MS, createPaceFor, decidePace, type CreatePace } from '../../domain/create-pace';
import { REPLICATE_DOCUMENTED_LIMITS, ReplicateRateLimiter } from '../../providers/simulator/rate-limits';
import { attemptsLeft, isThrottle } from '../../activities/create-pace';

const T0 = 1_000_000;

test('a quota of 10/s paces at 9/s with a burst of 9 and 5 s of grace', () => {
  assert.deepEqual(createPaceFor(10), { ratePerSecond: 10 * CREATE_PACE_SHARE, burst: 9, graceMs: RESERVATION_GRACE_MS });
  assert.equal(createPaceFor(0.5).burst, 1, 'never below one');
  assert.throws(() => createPaceFor(0), RangeError);
});

test('after a lull a burst goes at once; the next claim reserves the moment it conforms and the TAT moves past it', () => {
  const pace: CreatePace = { ratePerSecond: 10, burst: 3, graceMs: 5_000 };
  let tat: number | null = null;
  for (let i = 0; i < 3; i++) {
    const d = decidePace(pace, { nowMs: T0, tatMs: tat, reservedAtMs: null });
    assert.equal(d.kind, 'go', `claim ${i}`);
    tat = d.tatMs;
  }
  assert.equal(tat, T0 + 300);
  const fourth = decidePace(pace, { nowMs: T0, tatMs: tat, reservedAtMs: null });
  assert.deepEqual(fourth, { kind: 'wait', untilMs: T0 + 100, reserveAtMs: T0 + 100, tatMs: T0 + 400 });
});

test('a claim back before its reserved moment waits for it again and moves nothing; on time or within the grace it goes without a new place', () => {
  const pace: CreatePace = { ratePerSecond: 10, burst: 1, graceMs: 5_000 };
  assert.deepEqual(decidePace(pace, { nowMs: T0, tatMs: T0 + 9_000, reservedAtMs: T0 + 2_000 }), {
    kind: 'wait',
    untilMs: T0 + 2_000,
    reserveAtMs: null,
    tatMs: null,
  });
  assert.deepEqual(decidePace(pace, { nowMs: T0 + 2_000, tatMs: T0 + 9_000, reservedAtMs: T0 + 2_000 }), { kind: 'go', tatMs: null });
  assert.deepEqual(decidePace(pace, { nowMs: T0 + 7_000, tatMs: T0 + 9_000, reservedAtMs: T0 + 2_000 }), { kind: 'go', tatMs: null });
});

test('a reservation lapsed past the grace takes a new place at the end of the pace', () => {
  const pace: CreatePace = { ratePerSecond: 10, burst: 1, graceMs: 5_000 };
  const d = decidePace(pace, { nowMs: T0 + 7_001, tatMs: T0 + 9_000, reservedAtMs: T0 + 2_000 });
  assert.deepEqual(d, { kind: 'wait', untilMs: T0 + 9_000, reserveAtMs: T0 + 9_000, tatMs: T0 + 9_100 });
});

interface Claim {
  readonly arrival: number;
  /** How late each return after a wait comes, ms, in turn (then 0). */
  readonly lateness: readonly number[];
}

/** Runs the claims against one pace (the row's TAT, each claim's reservation) in time order; the send times by claim. */
function simulate(pace: CreatePace, claims: readonly Claim[]): { sends: number[]; claimsMade: number } {
  let tat: number | null = null;
  const reserved: (number | null)[] = claims.map(() => null);
  const returns: number[] = claims.map(() => 0);
  const sends: number[] = claims.map(() => NaN);
  // Events: [time, claim index]; processed earliest first, ties by index (a lock serialises them).
  const events: [number, number][] = claims.map((c, i) => [c.arrival, i]);
  let claimsMade = 0;
  while (events.length > 0) {
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const [now, i] = events.shift()!;
    claimsMade += 1;
    assert.ok(claimsMade < claims.length * 20, 'claims keep coming back: the pace never lets some go');
    const d = decidePace(pace, { nowMs: now, tatMs: tat, reservedAtMs: reserved[i]! });
    if (d.tatMs !== null) tat = d.tatMs;
    if (d.kind === 'go') {
      sends[i] = now;
      reserved[i] = null;
      continue;
    }
    if (d.reserveAtMs !== null) reserved[i] = d.reserveAtMs;
    const late = claims[i]!.lateness[returns[i]!] ?? 0;
    returns[i]! += 1;
    events.push([d.untilMs + late, i]);
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

test('law: every claim is sent, and any window of W s holds at most burst + rate × (W + grace + slack) creates', () => {
  fc.assert(
    fc.property(fc.constantFrom(1, 2.5, 10, 20), claimsArb(12_000), (quota, claims) => {
      const pace = createPaceFor(quota);
      const { sends } = simulate(pace, claims);
      assert.ok(sends.every((t) => Number.isFinite(t)));
      for (const w of [1, 10, 60]) {
        const bound = pace.burst + pace.ratePerSecond * (w + (pace.graceMs + DUE_SLACK_MS) / 1_000);
        assert.ok(mostInWindow(sends, w * 1_000) <= bound + 1e-9, `quota ${quota}/s: more than ${bound} creates in ${w} s`);
      }
    }),
    { numRuns: 200 },
  );
});

test('law: claims that come back on time are paced exactly (burst + ⌊(W + slack) / interval⌋ in any window) and go in the order they came', () => {
  fc.assert(
    fc.property(fc.constantFrom(1, 5, 10), claimsArb(0), (quota, claims) => {
      const pace = createPaceFor(quota);
      const { sends } = simulate(pace, claims);
      // GCRA's exact bound: the burst at once, then one each interval, each send up to the slack
      // before its conform time (the last of a window may be that early, the first on time).
      const interval = 1_000 / pace.ratePerSecond;
      for (const windowMs of [1_000, 10_000]) {
        const bound = pace.burst + Math.floor((windowMs + DUE_SLACK_MS) / interval + 1e-9);
        const most = mostInWindow(sends, windowMs);
        assert.ok(most <= bound, `quota ${quota}/s: ${most} creates in ${windowMs} ms, bound ${bound}`);
      }
      // First come, first sent: by arrival (ties in the order the row lock took them), sends never go back in time.
      const byArrival = claims.map((c, i) => i).sort((a, b) => claims[a]!.arrival - claims[b]!.arrival || a - b);
      for (let k = 1; k < byArrival.length; k++) assert.ok(sends[byArrival[k - 1]!]! <= sends[byArrival[k]!]!);
    }),
    { numRuns: 200 },
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
