// What the HTTP layer is built from. One object, passed to createApp().
import type { Db } from '../db/client';
import type { Logger } from '../observability/logger';
import type { Metrics } from '../observability/metrics';
import type { ProviderAdapter } from '../providers/types';
import type { ObjectStorage } from '../storage/s3';
import type { GenerationFacade } from '../temporal/facade';
import type { Config } from '../config/env';
import { buildFallbackStorage, buildProviders, buildStorage, failoverHosts } from '../config/services';
import { databaseUrl, redisConnection } from '../config/connections';
import { createAdmission, type Admission } from './admission';
import { createFastPath, type FastPath } from './fast-path';
import { isDatabaseUnavailable } from './problem';
import { createCallbackSpool, type CallbackSpool } from './spool';
import { spoolDirFor } from '../storage/spool-files';
import { createTenantRateLimiter, type TenantRateLimiter } from './rate-limit';
import { createTaskWaker, type TaskWaker } from '../temporal/wakes';
import { createCallbackLimiter, type CallbackLimiter } from './callback-limits';
import { createCallbackTokens, type CallbackTokens } from '../providers/callback-token';
import { registerEventMetrics, registerWakeMetrics } from '../observability/metrics';
import { createSecretBox, type SecretBox } from '../db/webhook-secrets';
import type { WebhookRules } from './webhooks.service';
import { createEventHub } from './event-hub';
import { createEventStreams, type EventStreams } from './event-streams';
import { createApiKeyAuth, type ApiKeyAuth } from './api-keys';
import { createBrowserTokens, type BrowserTokens } from './browser-tokens';

export interface ApiContext {
  readonly db: Db;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly facade: GenerationFacade;
  readonly admission: Admission;
  readonly fastPath: FastPath;
  readonly rateLimiter: TenantRateLimiter;
  /** API keys: cached lookups, the per-source limit before them, revocation (api/api-keys.ts). */
  readonly keys: ApiKeyAuth;
  /** Signs and verifies browser tokens (api/browser-tokens.ts). */
  readonly browserTokens: BrowserTokens;
  /** Callback limits per source address and per attempt (api/callback-limits.ts). */
  readonly callbackLimiter: CallbackLimiter;
  /** The keyed callback URL tokens (providers/callback-token.ts). */
  readonly callbackTokens: CallbackTokens;
  readonly providers: Readonly<Record<string, ProviderAdapter>>;
  readonly storage: ObjectStorage;
  /** The fallback bucket's storage (docs/decisions/0029), null when none is configured. */
  readonly fallbackStorage: ObjectStorage | null;
  /** Wake signals after callbacks, at most one in flight per task (temporal/wakes.ts). */
  readonly waker: TaskWaker;
  /** Where callbacks go when the inbox cannot be written (api/spool.ts). */
  readonly spool: CallbackSpool;
  /** Seals and opens webhook signing secrets (db/webhook-secrets.ts). */
  readonly webhookSecrets: SecretBox;
  /** The open live event streams and the one LISTEN connection behind them (api/event-streams.ts). */
  readonly events: EventStreams;
  readonly settings: {
    readonly region: string;
    readonly fenceScope: string;
    readonly bodyLimit: string;
    /** POST /v1/tasks/batch: its body limit and the items admitted per transaction. */
    readonly batch: { readonly bodyLimit: string; readonly chunkSize: number };
    /** Browser tokens' longest life, and the origins whose pages may call the routes they may (CORS). */
    readonly browserTokens: { readonly maxTtlSeconds: number; readonly corsOrigins: ReadonlySet<string> };
    readonly presignTtlSeconds: number;
    /** A task's deadline when its request names none. */
    readonly defaultDeadlineSeconds: number;
    /** How long a quote may be cited by a create (QUOTE_TTL_SECONDS). */
    readonly quoteTtlSeconds: number;
    /** This deployment's public base URL (the OpenAPI document's server). */
    readonly publicBaseUrl: string;
    /** Slow-client guards of the HTTP server (api/listen.ts). */
    readonly http: { readonly headersTimeoutMs: number; readonly requestTimeoutMs: number; readonly keepAliveTimeoutMs: number };
    /** Tenant webhook endpoints (api/webhooks.service.ts), and the cap on task-URL origins in use per tenant (api/tasks.service.ts). */
    readonly webhooks: WebhookRules & { readonly maxTaskUrlOrigins: number };
  };
  /**
   * Closes everything the context built: the event streams and their LISTEN connection, the
   * rate limiters' Redis clients, the spool's lease timer. Not what it was given (db, facade,
   * storage, logger). Idempotent: a second call returns the first one's promise.
   */
  close(): Promise<void>;
}

/** Builds the API's context from config and its parts (the API process and the tests). */
export function buildApiContext(
  config: Config,
  parts: {
    db: Db;
    facade: GenerationFacade;
    logger: Logger;
    metrics: Metrics;
    storage?: ObjectStorage;
    fallbackStorage?: ObjectStorage | null;
    fenceCacheMs?: number;
    /** The database `db` reaches, for the event LISTEN connection (default DATABASE_URL with its TLS files). */
    databaseUrl?: string;
  },
): ApiContext {
  const waker = createTaskWaker((taskId) => parts.facade.wakeTask(taskId), { maxInFlight: config.WAKE_SIGNALS_MAX_IN_FLIGHT });
  registerWakeMetrics(parts.metrics.registry, waker.stats);
  const fenceCacheMs = parts.fenceCacheMs ?? 1_000;
  const admission = createAdmission(parts.db, { scope: config.FENCE_SCOPE, region: config.REGION }, fenceCacheMs, {
    watermark: { count: config.OUTBOX_WATERMARK_COUNT, ageMs: config.OUTBOX_WATERMARK_AGE_MS },
  });
  const hub = createEventHub({
    databaseUrl: parts.databaseUrl ?? databaseUrl(config),
    failoverHosts: failoverHosts(config),
    resyncMs: config.EVENTS_RESYNC_MS,
    logger: parts.logger,
  });
  const sent = registerEventMetrics(parts.metrics.registry, () => ({ open: events.open(), listening: hub.listening(), connects: hub.connects() }));
  const events = createEventStreams({
    db: parts.db,
    hub,
    logger: parts.logger,
    fence: () => admission.state(),
    onSent: (event) => sent.inc({ event }),
    settings: {
      heartbeatMs: config.EVENTS_HEARTBEAT_MS,
      progressIntervalMs: config.EVENTS_PROGRESS_INTERVAL_MS,
      maxPerTenant: config.EVENTS_MAX_STREAMS_PER_TENANT,
      maxStreams: config.EVENTS_MAX_STREAMS,
      pollAfterMs: config.EVENTS_POLL_AFTER_MS,
      retryMs: config.EVENTS_RETRY_MS,
      resumeMaxAgeMs: config.EVENTS_RESUME_MAX_AGE_MS,
      fenceCacheMs,
    },
  });
  const keys = createApiKeyAuth({
    db: parts.db,
    hub,
    logger: parts.logger,
    settings: {
      cacheTtlMs: config.AUTH_CACHE_TTL_MS,
      cacheMaxKeys: config.AUTH_CACHE_MAX_KEYS,
      lookupsPerSourcePerSecond: config.AUTH_LOOKUPS_PER_SOURCE_PER_SECOND,
    },
  });
  const redis = redisConnection(config);
  const rateLimiter = createTenantRateLimiter(
    {
      perSecond: { create: config.TENANT_CREATE_RATE_PER_SECOND, read: config.TENANT_READ_RATE_PER_SECOND, cancel: config.TENANT_CANCEL_RATE_PER_SECOND },
      redis,
      expectedInstances: config.API_INSTANCES,
    },
    parts.logger,
  );
  const callbackLimiter = createCallbackLimiter(
    {
      perTokenPerMinute: config.CALLBACK_RATE_PER_TOKEN_PER_MINUTE,
      perSourcePerMinute: config.CALLBACK_RATE_PER_SOURCE_PER_MINUTE,
      redis,
      expectedInstances: config.API_INSTANCES,
    },
    parts.logger,
  );
  const spool = createCallbackSpool({
    dir: spoolDirFor(config.CALLBACK_SPOOL_DIR, config.DATABASE_URL),
    logger: parts.logger,
    leaseMs: config.CALLBACK_SPOOL_LEASE_MS,
    maxBytes: config.CALLBACK_SPOOL_MAX_BYTES,
    // Postgres unreachable: the line waits for the next pass. Anything else is the line's own fault: set aside.
    isTransient: isDatabaseUnavailable,
    onDeadLetter: (provider) => parts.metrics.callbacksReceived.inc({ provider, outcome: 'spool_dead_lettered' }),
  });
  let closed: Promise<void> | null = null;
  const close = async () => {
    spool.close();
    const results = await Promise.allSettled([events.close(), rateLimiter.close(), callbackLimiter.close()]);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  };
  return {
    events,
    db: parts.db,
    logger: parts.logger,
    metrics: parts.metrics,
    facade: parts.facade,
    admission,
    fastPath: createFastPath({
      db: parts.db,
      facade: parts.facade,
      logger: parts.logger,
      metrics: parts.metrics,
      timeoutMs: config.API_FAST_PATH_TIMEOUT_MS,
      cooldownMs: config.API_FAST_PATH_COOLDOWN_MS,
      mode: config.API_FAST_PATH_MODE,
      maxInFlight: config.API_FAST_PATH_MAX_IN_FLIGHT,
    }),
    waker,
    rateLimiter,
    keys,
    browserTokens: createBrowserTokens(config.BROWSER_TOKEN_SECRET),
    callbackLimiter,
    callbackTokens: createCallbackTokens(config.CALLBACK_TOKEN_SECRET, config.CALLBACK_TOKEN_SECRET_PREVIOUS),
    webhookSecrets: createSecretBox(config.WEBHOOK_SECRET_KEY, config.WEBHOOK_SECRET_KEY_PREVIOUS),
    providers: buildProviders(config),
    storage: parts.storage ?? buildStorage(config),
    fallbackStorage: parts.fallbackStorage !== undefined ? parts.fallbackStorage : buildFallbackStorage(config),
    spool,
    settings: {
      region: config.REGION,
      fenceScope: config.FENCE_SCOPE,
      bodyLimit: config.API_BODY_LIMIT,
      batch: { bodyLimit: config.TASK_BATCH_BODY_LIMIT, chunkSize: config.TASK_BATCH_CHUNK_SIZE },
      browserTokens: {
        maxTtlSeconds: config.BROWSER_TOKEN_MAX_TTL_SECONDS,
        corsOrigins: new Set(
          config.CORS_ALLOWED_ORIGINS.split(',')
            .map((o) => o.trim())
            .filter(Boolean),
        ),
      },
      presignTtlSeconds: config.S3_PRESIGN_TTL_SECONDS,
      defaultDeadlineSeconds: config.TASK_DEADLINE_SECONDS,
      quoteTtlSeconds: config.QUOTE_TTL_SECONDS,
      publicBaseUrl: config.PUBLIC_BASE_URL.replace(/\/+$/, ''),
      http: {
        headersTimeoutMs: config.API_HEADERS_TIMEOUT_MS,
        requestTimeoutMs: config.API_REQUEST_TIMEOUT_MS,
        keepAliveTimeoutMs: config.API_KEEP_ALIVE_TIMEOUT_MS,
      },
      webhooks: {
        allowPrivate: config.WEBHOOK_ALLOW_PRIVATE,
        maxEndpoints: config.WEBHOOK_MAX_ENDPOINTS_PER_TENANT,
        maxTaskUrlOrigins: config.WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT,
        secretOverlapMs: config.WEBHOOK_SECRET_OVERLAP_MS,
      },
    },
    close: () => (closed ??= close()),
  };
}
