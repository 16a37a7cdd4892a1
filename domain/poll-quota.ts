// A provider's query quota is a contract (docs/providers.md "Poll queues and pacing"): its
// status reads, averaged over any QUOTA_WINDOW_S seconds, stay within `requestsPerSecond`. The
// poll queue's limiter is Temporal's, per task-queue partition, each at rate / partitions:
//   - the classic matcher's token bucket has a burst of ceil(rate / partitions) (at least one),
//     so after a lull the queue can start rate × W + partitions × burst activities in W seconds
//     (112 in 10 s for a rate of 10 on Temporal's default 4 partitions);
//   - the new matcher (matching.useNewMatcher) paces with a 1 s burst: up to
//     partitions × (floor((W + 1) × rate / partitions) + 1) in a closed window of W seconds.
// Both stay within rate × (W + 1) + partitions, the bound used here, and the queue's rate is set
// below the quota by what it adds.

/** The window a quota is held over: reads in any 10 s stay within quota × 10. */
export const QUOTA_WINDOW_S = 10;

/** At most this many activities a poll queue of `rate` can start in `windowS` seconds, under either matcher's limiter, its bursts included. */
export function pollQueueWorstCase(rate: number, partitions: number, windowS = QUOTA_WINDOW_S): number {
  return rate * (windowS + 1) + partitions;
}

/**
 * The poll queue's rate (maxTaskQueueActivitiesPerSecond, to 0.01) for a provider quota of
 * `quota` reads per second: the highest whose worst case over the window stays within
 * quota × window. Throws when no rate fits (a quota too small for that many partitions).
 */
export function pollQueueRate(quota: number, partitions: number, windowS = QUOTA_WINDOW_S): number {
  if (!(quota > 0) || !Number.isInteger(partitions) || partitions < 1)
    throw new RangeError(`no poll queue rate for a quota of ${quota}/s on ${partitions} partitions`);
  const budget = quota * windowS;
  // The worst case grows with the rate: the highest fitting rate is found by bisection on a 0.01 grid.
  let lo = 0;
  let hi = Math.round(quota * 100);
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (pollQueueWorstCase(mid / 100, partitions, windowS) <= budget + 1e-9) lo = mid;
    else hi = mid - 1;
  }
  if (lo === 0)
    throw new RangeError(
      `a quota of ${quota}/s cannot be held over ${windowS} s on ${partitions} task-queue partitions (it takes more than ${partitions / windowS}/s): raise the quota or lower POLL_QUEUE_PARTITIONS`,
    );
  return lo / 100;
}
