// Tenant rate limits on task creation (seed 000 §19.3.4): a shared limit in Redis, and when
// Redis is unavailable a conservative per-process limit (the "insurance" limiter) rather
// than none. Over the limit: 429 with Retry-After.
import type { NextFunction, Request, Response } from 'express';
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { Logger } from '../observability/logger';
import { tenantOf } from './auth';
import { HttpProblem } from './problem';

export interface RateLimitSettings {
  /** Creates per tenant per second across all API processes. */
  readonly pointsPerSecond: number;
  /** Redis URL, or null to use only the in-process limiter. */
  readonly redisUrl: string | null;
  /** API processes sharing the limit: the insurance limiter allows pointsPerSecond / this each. */
  readonly expectedInstances: number;
}

export interface TenantRateLimiter {
  middleware(): (req: Request, res: Response, next: NextFunction) => Promise<void>;
  close(): Promise<void>;
}

/** A limit shared through Redis, with the conservative per-process "insurance" limiter when Redis is unavailable. */
export interface SharedLimiter {
  /** Resolves when allowed; rejects with a RateLimiterRes (over the limit) or an Error. */
  consume(key: string): Promise<RateLimiterRes>;
  close(): Promise<void>;
}

export function createSharedLimiter(
  opts: { readonly keyPrefix: string; readonly points: number; readonly durationSeconds: number; readonly redisUrl: string | null; readonly expectedInstances: number },
  logger: Logger,
): SharedLimiter {
  const insurance = new RateLimiterMemory({
    keyPrefix: `${opts.keyPrefix}:local`,
    points: Math.max(1, Math.floor(opts.points / Math.max(1, opts.expectedInstances))),
    duration: opts.durationSeconds,
  });
  let redis: Redis | null = null;
  let limiter: RateLimiterRedis | RateLimiterMemory = insurance;
  if (opts.redisUrl) {
    redis = new Redis(opts.redisUrl, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      connectTimeout: 1_000,
      lazyConnect: false,
    });
    let warned = false;
    redis.on('error', (err: Error) => {
      if (!warned) logger.warn({ err: err.message, limiter: opts.keyPrefix }, 'rate limiter: Redis unavailable, using the local insurance limiter');
      warned = true;
    });
    redis.on('ready', () => {
      warned = false;
    });
    limiter = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: opts.keyPrefix,
      points: opts.points,
      duration: opts.durationSeconds,
      rejectIfRedisNotReady: true,
      insuranceLimiter: insurance,
    });
  }
  return {
    consume: (key) => limiter.consume(key, 1),
    async close() {
      if (redis) redis.disconnect();
    },
  };
}

export function createTenantRateLimiter(settings: RateLimitSettings, logger: Logger): TenantRateLimiter {
  const limiter = createSharedLimiter(
    { keyPrefix: 'vidorch:create', points: settings.pointsPerSecond, durationSeconds: 1, redisUrl: settings.redisUrl, expectedInstances: settings.expectedInstances },
    logger,
  );
  return {
    middleware() {
      return async (req, res, next) => {
        const { tenantId } = tenantOf(req);
        try {
          const r = await limiter.consume(tenantId);
          res.setHeader('RateLimit-Remaining', String(r.remainingPoints));
          next();
        } catch (rejection) {
          if (!(rejection instanceof RateLimiterRes)) return next(rejection);
          const seconds = Math.max(1, Math.ceil(rejection.msBeforeNext / 1000));
          next(new HttpProblem(429, 'rate-limited', 'Too many task creations', `limit is ${settings.pointsPerSecond}/s per tenant`, [], { 'Retry-After': String(seconds) }));
        }
      };
    },
    close: () => limiter.close(),
  };
}
