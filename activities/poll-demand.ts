// Polls paced by demand. A provider's status reads run on its poll queue, whose worker holds
// them to the provider's query quota (`rate` per second, globally). When more attempts wait on
// a provider than polls at that rate can visit within their own interval (10,000 jobs polled
// every 60 s want 167 reads/s against a quota of 10), the surplus does not make anyone's poll
// sooner: it only queues on the poll queue, while every wait loop still wakes, schedules and
// replays at the short interval. So each attempt's next poll is put at least
// waiting / (rate × share) seconds away: the wait loops then wake about as often as the
// provider can be asked, the poll queue stays near empty, and every job is still read in turn.
// The count comes from the attempt facts (all regions' workers agree on it) and is read at most
// once per `cacheMs` per provider and process.
import { and, count, eq, inArray } from 'drizzle-orm';
import type { Db } from '../db/client';
import { taskAttempt } from '../db/schema';
import type { AttemptState } from '../domain/states';
import { pollQueueRate } from '../domain/poll-quota';
import { cachedPerKey } from './cached';
import type { Clock, TaskActivityDeps } from './deps';

/** Attempt states whose jobs the wait loop polls (the partial index idx_attempt_provider_in_flight covers them). */
const POLLED_STATES: readonly AttemptState[] = ['SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN'];

export interface PollDemand {
  /** The shortest interval (ms) that keeps this provider's polls within its quota share; 0 when it declares no quota. */
  floorMs(provider: string): Promise<number>;
  /** The last floor computed per provider, for the metrics (vidorch_poll_demand_floor_seconds). */
  floors(): ReadonlyMap<string, number>;
}

export interface PollDemandOptions {
  readonly db: Db;
  readonly clock: Clock;
  /** The provider's poll rate, requests per second (its poll queue's limit); undefined: no quota. */
  readonly rateOf: (provider: string) => number | undefined;
  /** The share of the quota the wait loops aim for (0 < share ≤ 1); the rest absorbs jitter and bursts. */
  readonly share: number;
  readonly cacheMs?: number;
}

/** A provider's query quota: the configured override, else the adapter's declared one; undefined: none. */
export function pollQuotaFor(deps: Pick<TaskActivityDeps, 'providers' | 'settings'>, provider: string): number | undefined {
  return deps.settings.pollQuotas[provider] ?? deps.providers[provider]?.capabilities.requestsPerSecond;
}

/**
 * The rate a provider's poll queue gets: below its quota by what the limiter's bursts can add,
 * so its reads stay within the quota over any 10 s (domain/poll-quota.ts).
 */
export function pollRateFor(deps: Pick<TaskActivityDeps, 'providers' | 'settings'>, provider: string): number | undefined {
  const quota = pollQuotaFor(deps, provider);
  return quota === undefined ? undefined : pollQueueRate(quota, deps.settings.pollQueuePartitions);
}

/** The demand floor itself: `waiting` jobs read in turn at `rate × share` per second. */
export function demandFloorMs(waiting: number, rate: number | undefined, share: number): number {
  if (!rate || rate <= 0 || waiting <= 0) return 0;
  return Math.ceil((waiting / (rate * Math.min(1, Math.max(0.01, share)))) * 1000);
}

/** One per worker process, built in its composition root (config/services.ts buildActivityDeps). */
export function createPollDemand(opts: PollDemandOptions): PollDemand {
  const pollFloors = new Map<string, number>();
  const read = cachedPerKey(opts.clock, opts.cacheMs ?? 10_000, async (provider) => {
    const [row] = await opts.db
      .select({ waiting: count() })
      .from(taskAttempt)
      .where(and(eq(taskAttempt.provider, provider), inArray(taskAttempt.submit_state, POLLED_STATES)));
    const floorMs = demandFloorMs(row?.waiting ?? 0, opts.rateOf(provider), opts.share);
    pollFloors.set(provider, floorMs);
    return floorMs;
  });
  return {
    floorMs: (provider) => (opts.rateOf(provider) ? read(provider) : Promise.resolve(0)),
    floors: () => pollFloors,
  };
}
