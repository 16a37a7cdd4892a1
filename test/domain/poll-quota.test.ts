// domain/poll-quota.ts: the poll queue's rate keeps a provider's status reads within its query
// quota over any 10 s, against Temporal's limiter (a token bucket per task-queue partition).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { pollQueueRate, pollQueueWorstCase, QUOTA_WINDOW_S } from '../../domain/poll-quota';

/**
 * Temporal's per-partition limiter, simulated: each partition a token bucket of rate / n with a
 * burst of ceil(rate / n) (at least 1), full after a lull; a backlog on every partition takes a
 * token the moment one is there. Returns the dispatch times (s) in [0, windowS).
 */
function dispatches(rate: number, partitions: number, windowS: number): number[] {
  const perPartition = rate / partitions;
  const burst = Math.max(1, Math.ceil(perPartition));
  const out: number[] = [];
  for (let p = 0; p < partitions; p++) {
    // `burst` at once, then one every 1 / perPartition seconds.
    for (let i = 0; i < burst; i++) out.push(0);
    for (let t = 1 / perPartition; t < windowS; t += 1 / perPartition) out.push(t);
  }
  return out.sort((a, b) => a - b);
}

/** The new matcher's limiter (GCRA, a 1 s burst), its most starts in a closed window of W seconds. */
const newMatcherMost = (rate: number, partitions: number, windowS: number) => partitions * (Math.floor(((windowS + 1) * rate) / partitions) + 1);

describe('pollQueueRate', () => {
  test("the quota as the queue's rate lets a burst over the quota through (why the rate is lower)", () => {
    assert.ok(dispatches(10, 4, QUOTA_WINDOW_S).length > 10 * QUOTA_WINDOW_S);
    assert.equal(pollQueueWorstCase(10, 4), 114, 'the bound: 10 × 11 + 4');
  });

  test('a backlog after a lull never starts more than quota × 10 s within 10 s, on any partition count', () => {
    for (const quota of [0.5, 1, 2, 4.5, 5, 9, 10, 13.3, 25, 100]) {
      for (const partitions of [1, 2, 4, 8]) {
        if (quota * QUOTA_WINDOW_S < partitions + 0.01 * (QUOTA_WINDOW_S + 1)) continue; // no rate fits: refused below
        const rate = pollQueueRate(quota, partitions);
        const n = dispatches(rate, partitions, QUOTA_WINDOW_S).length;
        assert.ok(n <= quota * QUOTA_WINDOW_S, `quota ${quota}/s, ${partitions} partitions: rate ${rate}, ${n} starts in ${QUOTA_WINDOW_S} s`);
        const m = newMatcherMost(rate, partitions, QUOTA_WINDOW_S);
        assert.ok(m <= quota * QUOTA_WINDOW_S, `new matcher: quota ${quota}/s, ${partitions} partitions: rate ${rate}, ${m} starts`);
        assert.ok(rate > 0 && rate <= quota, `rate ${rate} for quota ${quota}`);
      }
    }
  });

  test('it is the highest such rate on a 0.01 grid', () => {
    for (const [quota, partitions] of [
      [10, 4],
      [5, 4],
      [10, 1],
      [2, 4],
    ] as const) {
      const rate = pollQueueRate(quota, partitions);
      assert.ok(pollQueueWorstCase(rate, partitions) <= quota * QUOTA_WINDOW_S);
      assert.ok(pollQueueWorstCase(rate + 0.01, partitions) > quota * QUOTA_WINDOW_S, `${rate} + 0.01 for ${quota}/s on ${partitions}`);
    }
    assert.equal(pollQueueRate(10, 4), 8.72);
    assert.equal(pollQueueRate(10, 1), 9);
    // The rates the classic matcher's bound alone gave, which the new matcher exceeds.
    assert.ok(newMatcherMost(8, 4, QUOTA_WINDOW_S) > 9 * QUOTA_WINDOW_S, 'a quota of 9/s at rate 8 (the classic bound) is exceeded');
    assert.ok(pollQueueRate(9, 4) < 8);
  });

  test('a quota no rate can hold on that many partitions is refused, not silently exceeded', () => {
    assert.throws(() => pollQueueRate(0.3, 4), RangeError);
    assert.throws(() => pollQueueRate(0, 1), RangeError);
    assert.throws(() => pollQueueRate(10, 0), RangeError);
  });
});
