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

export function createTenantRateLimiter(settings: RateLimitSettings, logger: Logger): TenantRateLimiter {
  const insurance = new RateLimiterMemory({
    keyPrefix: 'vidorch:create:local',
    points: Math.max(1, Math.floor(settings.pointsPerSecond / Math.max(1, settings.expectedInstances))),
    duration: 1,
  });
  let redis: Redis | null = null;
  let limiter: RateLimiterRedis | RateLimiterMemory = insurance;
  if (settings.redisUrl) {
    redis = new Redis(settings.redisUrl, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      connectTimeout: 1_000,
      lazyConnect: false,
    });
    let warned = false;
    redis.on('error', (err: Error) => {
      if (!warned) logger.warn({ err: err.message }, 'rate limiter: Redis unavailable, using the local insurance limiter');
      warned = true;
    });
    redis.on('ready', () => {
      warned = false;
    });
    limiter = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: 'vidorch:create',
      points: settings.pointsPerSecond,
      duration: 1,
      rejectIfRedisNotReady: true,
      insuranceLimiter: insurance,
    });
  }
  return {
    middleware() {
      return async (req, res, next) => {
        const { tenantId } = tenantOf(req);
        try {
          const r = await limiter.consume(tenantId, 1);
          res.setHeader('RateLimit-Remaining', String(r.remainingPoints));
          next();
        } catch (rejection) {
          if (!(rejection instanceof RateLimiterRes)) return next(rejection);
          const seconds = Math.max(1, Math.ceil(rejection.msBeforeNext / 1000));
          next(new HttpProblem(429, 'rate-limited', 'Too many task creations', `limit is ${settings.pointsPerSecond}/s per tenant`, [], { 'Retry-After': String(seconds) }));
        }
      };
    },
    async close() {
      if (redis) redis.disconnect();
    },
  };
}
