// Tenant rate limits (seed 000 §19.3.4), one per kind of request (creates, reads, cancels): a
// shared limit in Redis, and when Redis is unavailable a conservative per-process limit (the
// "insurance" limiter) rather than none. Over the limit: 429 with Retry-After.
import type { NextFunction, Request, Response } from 'express';
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { Logger } from '../observability/logger';
import { tenantOf } from './auth';
import { HttpProblem } from './problem';

export type TenantRequestKind = 'create' | 'read' | 'cancel';

const WHAT: Record<TenantRequestKind, string> = { create: 'task creations', read: 'task reads', cancel: 'cancel requests' };

export interface RateLimitSettings {
  /** Requests of each kind per tenant per second across all API processes. */
  readonly perSecond: Readonly<Record<TenantRequestKind, number>>;
  /** Redis URL, or null to use only the in-process limiter. */
  readonly redisUrl: string | null;
  /** API processes sharing the limit: the insurance limiter allows perSecond / this each. */
  readonly expectedInstances: number;
}

export interface TenantRateLimiter {
  /** Express middleware limiting this kind of request per authenticated tenant. */
  middleware(kind: TenantRequestKind): (req: Request, res: Response, next: NextFunction) => Promise<void>;
  close(): Promise<void>;
}

export function createTenantRateLimiter(settings: RateLimitSettings, logger: Logger): TenantRateLimiter {
  const redis = settings.redisUrl ? connectRedis(settings.redisUrl, logger) : null;
  const limiterFor = (kind: TenantRequestKind) => {
    const points = settings.perSecond[kind];
    const insurance = new RateLimiterMemory({
      keyPrefix: `vidorch:${kind}:local`,
      points: Math.max(1, Math.floor(points / Math.max(1, settings.expectedInstances))),
      duration: 1,
    });
    if (!redis) return insurance;
    return new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: `vidorch:${kind}`,
      points,
      duration: 1,
      rejectIfRedisNotReady: true,
      insuranceLimiter: insurance,
    });
  };
  const limiters = { create: limiterFor('create'), read: limiterFor('read'), cancel: limiterFor('cancel') };
  return {
    middleware(kind) {
      const limiter = limiters[kind];
      return async (req, res, next) => {
        const { tenantId } = tenantOf(req);
        try {
          const r = await limiter.consume(tenantId, 1);
          res.setHeader('RateLimit-Remaining', String(r.remainingPoints));
          next();
        } catch (rejection) {
          if (!(rejection instanceof RateLimiterRes)) return next(rejection);
          const seconds = Math.max(1, Math.ceil(rejection.msBeforeNext / 1000));
          next(new HttpProblem(429, 'rate-limited', `Too many ${WHAT[kind]}`, `limit is ${settings.perSecond[kind]}/s per tenant`, [], { 'Retry-After': String(seconds) }));
        }
      };
    },
    async close() {
      if (redis) redis.disconnect();
    },
  };
}

function connectRedis(url: string, logger: Logger): Redis {
  const redis = new Redis(url, {
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
  return redis;
}
