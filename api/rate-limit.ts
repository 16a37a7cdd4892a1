// Rate limits (docs/design.md §7): per tenant for each kind of request (creates, reads,
// cancels), and per source and callback URL for callbacks (api/callback-limits.ts). Each is
// shared in Redis, and when Redis is unavailable a conservative per-process limit (the
// "insurance" limiter) applies rather than none. Over the limit: 429 with Retry-After.
import type { ConnectionOptions } from 'node:tls';
import type { NextFunction, Request, Response } from 'express';
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { Logger } from '../observability/logger';
import { tenantOf } from './auth';
import { HttpProblem } from './problem';

export type TenantRequestKind = 'create' | 'read' | 'cancel';

const WHAT: Record<TenantRequestKind, string> = {
  create: 'writes (task creations, webhook endpoint changes)',
  read: 'task reads',
  cancel: 'cancel requests',
};

/** Where the shared limits live (config/connections.ts redisConnection builds it from REDIS_URL). */
export interface RedisConnection {
  readonly url: string;
  /** TLS (a `rediss://` URL): the CA when not the system's, the name checked. */
  readonly tls?: ConnectionOptions;
}

export interface RateLimitSettings {
  /** Requests of each kind per tenant per second across all API processes. */
  readonly perSecond: Readonly<Record<TenantRequestKind, number>>;
  /** Redis, or null to use only the in-process limiter. */
  readonly redis: RedisConnection | null;
  /** API processes sharing the limit: the insurance limiter allows perSecond / this each. */
  readonly expectedInstances: number;
}

export interface TenantRateLimiter {
  /** Express middleware limiting this kind of request per authenticated tenant. */
  middleware(kind: TenantRequestKind): (req: Request, res: Response, next: NextFunction) => Promise<void>;
  /** One request of this kind for the tenant, outside a middleware (a batch's items): null when allowed, else the 429 problem. */
  take(kind: TenantRequestKind, tenantId: string): Promise<HttpProblem | null>;
  close(): Promise<void>;
}

/** A limit shared through Redis, with the conservative per-process "insurance" limiter when Redis is unavailable. */
export interface SharedLimiter {
  /** Resolves when allowed; rejects with a RateLimiterRes (over the limit) or an Error. */
  consume(key: string): Promise<RateLimiterRes>;
}

export interface SharedLimitOptions {
  readonly keyPrefix: string;
  readonly points: number;
  readonly durationSeconds: number;
  readonly expectedInstances: number;
}

/** Limiters over one Redis connection (or none: local limits only). */
export function createLimiterSet(connection: RedisConnection | null, logger: Logger) {
  const redis = connection ? connectRedis(connection, logger) : null;
  return {
    limiter(opts: SharedLimitOptions): SharedLimiter {
      const insurance = new RateLimiterMemory({
        keyPrefix: `${opts.keyPrefix}:local`,
        points: Math.max(1, Math.floor(opts.points / Math.max(1, opts.expectedInstances))),
        duration: opts.durationSeconds,
      });
      const limiter = redis
        ? new RateLimiterRedis({
            storeClient: redis,
            keyPrefix: opts.keyPrefix,
            points: opts.points,
            duration: opts.durationSeconds,
            rejectIfRedisNotReady: true,
            insuranceLimiter: insurance,
          })
        : insurance;
      return { consume: (key) => limiter.consume(key, 1) };
    },
    close(): Promise<void> {
      if (redis) redis.disconnect();
      return Promise.resolve();
    },
  };
}

export function createTenantRateLimiter(settings: RateLimitSettings, logger: Logger): TenantRateLimiter {
  const set = createLimiterSet(settings.redis, logger);
  const limiterFor = (kind: TenantRequestKind) =>
    set.limiter({ keyPrefix: `vidorch:${kind}`, points: settings.perSecond[kind], durationSeconds: 1, expectedInstances: settings.expectedInstances });
  const limiters = { create: limiterFor('create'), read: limiterFor('read'), cancel: limiterFor('cancel') };
  const tooMany = (kind: TenantRequestKind, rejection: RateLimiterRes) =>
    new HttpProblem(429, 'rate-limited', `Too many ${WHAT[kind]}`, `limit is ${settings.perSecond[kind]}/s per tenant`, [], {
      'Retry-After': String(Math.max(1, Math.ceil(rejection.msBeforeNext / 1000))),
    });
  return {
    middleware(kind) {
      const limiter = limiters[kind];
      return async (req, res, next) => {
        const { tenantId } = tenantOf(req);
        try {
          const r = await limiter.consume(tenantId);
          res.setHeader('RateLimit-Remaining', String(r.remainingPoints));
          next();
        } catch (rejection) {
          if (!(rejection instanceof RateLimiterRes)) return next(rejection);
          next(tooMany(kind, rejection));
        }
      };
    },
    async take(kind, tenantId) {
      try {
        await limiters[kind].consume(tenantId);
        return null;
      } catch (rejection) {
        if (!(rejection instanceof RateLimiterRes)) throw rejection;
        return tooMany(kind, rejection);
      }
    },
    close: () => set.close(),
  };
}

function connectRedis(connection: RedisConnection, logger: Logger): Redis {
  const redis = new Redis(connection.url, {
    ...(connection.tls ? { tls: connection.tls } : {}),
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
