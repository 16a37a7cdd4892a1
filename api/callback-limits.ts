// Rate limits on POST /v1/callbacks (issue: an unsigned Kling callback costs an authenticated
// provider read, so a flood burns the shared quota): per source address over every callback,
// and per attempt (the token's, after it verified) so one known URL cannot be hammered. Shared
// through Redis, with local limits when Redis is down (api/rate-limit.ts).
import { RateLimiterRes } from 'rate-limiter-flexible';
import type { Logger } from '../observability/logger';
import { HttpProblem } from './problem';
import { createLimiterSet, type RedisConnection, type SharedLimiter } from './rate-limit';

export interface CallbackLimitSettings {
  readonly perTokenPerMinute: number;
  readonly perSourcePerMinute: number;
  readonly redis: RedisConnection | null;
  readonly expectedInstances: number;
}

export interface CallbackLimiter {
  /** Throws a 429 HttpProblem (with Retry-After) when the source or the attempt is over its limit. */
  admit(source: string, attemptId: string): Promise<void>;
  close(): Promise<void>;
}

export function createCallbackLimiter(settings: CallbackLimitSettings, logger: Logger): CallbackLimiter {
  const set = createLimiterSet(settings.redis, logger);
  const shared = { durationSeconds: 60, expectedInstances: settings.expectedInstances };
  const bySource = set.limiter({ ...shared, keyPrefix: 'vidorch:callback:source', points: settings.perSourcePerMinute });
  const byToken = set.limiter({ ...shared, keyPrefix: 'vidorch:callback:token', points: settings.perTokenPerMinute });

  async function take(limiter: SharedLimiter, key: string, what: string): Promise<void> {
    try {
      await limiter.consume(key);
    } catch (rejection) {
      if (!(rejection instanceof RateLimiterRes)) throw rejection;
      const seconds = Math.max(1, Math.ceil(rejection.msBeforeNext / 1000));
      throw new HttpProblem(429, 'rate-limited', 'Too many callbacks', `over the callback limit per ${what}`, [], { 'Retry-After': String(seconds) });
    }
  }

  return {
    async admit(source, attemptId) {
      await take(bySource, source, 'source address');
      await take(byToken, attemptId, 'callback URL');
    },
    close: () => set.close(),
  };
}
