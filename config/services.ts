// Builds a process's long-lived services from its Config: database, object storage,
// provider adapters, activity settings. API, worker, CLI and tests all build them here.
import type { TaskActivityDeps } from '../activities/deps';
import { systemClock } from '../activities/deps';
import { createPollDemand, pollRateFor } from '../activities/poll-demand';
import { ProviderGuard, type ProviderGuardSettings } from '../activities/provider-guard';
import { localProviderHealth, RouteStats, type RoutingSettings } from '../activities/routing';
import { createDatabase, type Database, type DatabaseHost } from '../db/client';
import { createFalAdapter } from '../providers/fal';
import { createKlingAdapter } from '../providers/kling';
import { createReplicateAdapter } from '../providers/replicate';
import { createRunwayAdapter } from '../providers/runway';
import type { ProviderAdapter } from '../providers/types';
import { createObjectStorage, type ObjectStorage } from '../storage/s3';
import type { ReconcileActivityDeps } from '../activities/reconcile';
import type { Logger } from '../observability/logger';
import type { ReconcileRunMetrics } from '../observability/metrics';
import { RECONCILERS } from '../reconcilers';
import { reconcileSettings } from '../reconcilers/settings';
import type { GenerationFacade } from '../temporal/facade';
import { databaseUrl } from './connections';
import { perProvider, type Config } from './env';

export function buildStorage(config: Config): ObjectStorage {
  return createObjectStorage({
    endpoint: config.S3_ENDPOINT,
    region: config.S3_REGION,
    accessKeyId: config.S3_ACCESS_KEY_ID,
    secretAccessKey: config.S3_SECRET_ACCESS_KEY,
    forcePathStyle: config.S3_FORCE_PATH_STYLE,
    bucket: config.S3_BUCKET_OUTPUTS,
  });
}

/** The fallback bucket's storage (docs/decisions/0029), or null when S3_FALLBACK_ENDPOINT is ''. */
export function buildFallbackStorage(config: Config): ObjectStorage | null {
  if (!config.S3_FALLBACK_ENDPOINT) return null;
  return createObjectStorage({
    endpoint: config.S3_FALLBACK_ENDPOINT,
    region: config.S3_FALLBACK_REGION,
    accessKeyId: config.S3_FALLBACK_ACCESS_KEY_ID,
    secretAccessKey: config.S3_FALLBACK_SECRET_ACCESS_KEY,
    forcePathStyle: config.S3_FORCE_PATH_STYLE,
    bucket: config.S3_FALLBACK_BUCKET,
  });
}

export function buildProviders(config: Config): Record<string, ProviderAdapter> {
  return {
    replicate: createReplicateAdapter({
      baseUrl: config.PROVIDER_REPLICATE_BASE_URL,
      apiToken: config.PROVIDER_REPLICATE_API_TOKEN,
      webhookSecret: config.PROVIDER_REPLICATE_WEBHOOK_SECRET,
      timeoutMs: config.PROVIDER_HTTP_TIMEOUT_MS,
    }),
    fal: createFalAdapter({
      baseUrl: config.PROVIDER_FAL_BASE_URL,
      apiKey: config.PROVIDER_FAL_API_KEY,
      jwksUrl: config.PROVIDER_FAL_JWKS_URL,
      expectedUserId: config.PROVIDER_FAL_USER_ID,
      timeoutMs: config.PROVIDER_HTTP_TIMEOUT_MS,
    }),
    runway: createRunwayAdapter({
      baseUrl: config.PROVIDER_RUNWAY_BASE_URL,
      apiSecret: config.PROVIDER_RUNWAY_API_SECRET,
      timeoutMs: config.PROVIDER_HTTP_TIMEOUT_MS,
    }),
    kling: createKlingAdapter({
      baseUrl: config.PROVIDER_KLING_BASE_URL,
      accessKey: config.PROVIDER_KLING_ACCESS_KEY,
      secretKey: config.PROVIDER_KLING_SECRET_KEY,
      timeoutMs: config.PROVIDER_HTTP_TIMEOUT_MS,
    }),
  };
}

/** POLL_QUEUE_RATES as provider → its query quota, requests per second (activities/poll-demand.ts pollRateFor). */
export function pollQuotas(config: Config): Record<string, number> {
  return perProvider(config.POLL_QUEUE_RATES);
}

export function buildDatabase(config: Config, applicationName: string): Database {
  return createDatabase({
    url: databaseUrl(config),
    max: config.DATABASE_POOL_MAX,
    applicationName,
    lockTimeoutMs: config.DATABASE_LOCK_TIMEOUT_MS,
    failoverHosts: failoverHosts(config),
  });
}

/** DATABASE_FAILOVER_HOSTS as host and port (the last colon splits them, so an IPv6 host keeps its own). */
export function failoverHosts(config: Config): DatabaseHost[] {
  return config.DATABASE_FAILOVER_HOSTS.map((entry) => {
    const at = entry.lastIndexOf(':');
    return { host: entry.slice(0, at).replace(/^\[(.*)\]$/, '$1'), port: Number(entry.slice(at + 1)) };
  });
}

export function activitySettings(config: Config): TaskActivityDeps['settings'] {
  return {
    publicBaseUrl: config.PUBLIC_BASE_URL.replace(/\/+$/, ''),
    callbackTokenSecret: config.CALLBACK_TOKEN_SECRET,
    pollInitialMs: config.POLL_INITIAL_MS,
    pollMaxMs: config.POLL_MAX_MS,
    pollHealthyFactor: config.POLL_HEALTHY_FACTOR,
    pollQuotas: pollQuotas(config),
    pollQuotaShare: config.POLL_QUOTA_SHARE,
    pollQueuePartitions: config.POLL_QUEUE_PARTITIONS,
    callbackHealthyWindowMs: config.CALLBACK_HEALTHY_WINDOW_MS,
    maxSubmitAttempts: config.MAX_SUBMIT_ATTEMPTS,
    maxThrottledSubmits: config.MAX_THROTTLED_SUBMITS,
    capRecheckMs: config.PROVIDER_CAP_RECHECK_MS,
    createQuotas: perProvider(config.PROVIDER_CREATE_QUOTAS),
    providerCallTimeoutMs: config.PROVIDER_HTTP_TIMEOUT_MS,
    slotQueue: {
      policy: { mode: config.SLOT_QUEUE_POLICY, agingMs: config.SLOT_QUEUE_AGING_MS },
      waitFallbackMs: config.SLOT_WAIT_FALLBACK_MS,
      grantTtlMs: config.SLOT_GRANT_TTL_MS,
      tenantDefaults: {
        perProvider: config.TENANT_MAX_IN_FLIGHT_PER_PROVIDER ?? null,
        total: config.TENANT_MAX_IN_FLIGHT ?? null,
        weight: config.TENANT_SLOT_WEIGHT,
      },
    },
    unknownProofDelayMs: config.UNKNOWN_PROOF_DELAY_MS,
    submitSendWindowMs: config.SUBMIT_SEND_WINDOW_MS,
    unknownOutcomeDeadlineMs: config.UNKNOWN_OUTCOME_DEADLINE_MS,
    unknownResendLimit: config.UNKNOWN_RESEND_LIMIT,
    reconcileLookupBudgetMs: config.RECONCILE_LOOKUP_BUDGET_MS,
    readFailureLimit: config.PROVIDER_READ_FAILURE_LIMIT,
    maxRunMs: perProvider(config.PROVIDER_MAX_RUN_MS),
    outputAllowPrivate: config.OUTPUT_FETCH_ALLOW_PRIVATE,
    outputMaxBytes: config.OUTPUT_MAX_BYTES,
    outputPartBytes: config.OUTPUT_PART_BYTES,
    outputAtRiskMarginMs: config.OUTPUT_AT_RISK_MARGIN_MS,
    outputHosts: {
      replicate: config.PROVIDER_REPLICATE_OUTPUT_HOSTS,
      fal: config.PROVIDER_FAL_OUTPUT_HOSTS,
      runway: config.PROVIDER_RUNWAY_OUTPUT_HOSTS,
      kling: config.PROVIDER_KLING_OUTPUT_HOSTS,
    },
    mediaProbeTimeoutMs: config.MEDIA_PROBE_TIMEOUT_MS,
    mediaMaxFailures: config.MEDIA_MAX_FAILURES,
  };
}

/** The submit claim's bulkhead ramp and DEGRADED_PROVIDER strictness (activities/provider-guard.ts). */
export function providerGuardSettings(config: Config): ProviderGuardSettings {
  return {
    bulkheadRamp: { durationMs: config.BULKHEAD_RAMP_MS, startShare: config.BULKHEAD_RAMP_START_SHARE, minSlots: config.BULKHEAD_RAMP_MIN_SLOTS },
    degradedFailureRate: config.DEGRADED_PROVIDER_FAILURE_RATE,
  };
}

export function routingSettings(config: Config): RoutingSettings {
  return { budgetMs: config.ROUTER_BUDGET_MS, staticRoute: config.ROUTER_STATIC_ROUTE };
}

/**
 * The task activities' dependencies, with this process's own state (the provider guard, route
 * statistics, the poll-demand tracker) built here once; the worker's /metrics reads the same
 * objects (workers/main.ts).
 */
export function buildActivityDeps(
  config: Config,
  parts: { db: Database; storage: ObjectStorage; fallbackStorage?: ObjectStorage | null; providers: Record<string, ProviderAdapter>; logger: Logger },
): TaskActivityDeps {
  const clock = systemClock;
  const settings = activitySettings(config);
  const guardLogger = parts.logger.child({ component: 'provider-guard' });
  const providerGuard = new ProviderGuard({
    ...providerGuardSettings(config),
    now: () => clock.now().getTime(),
    onStateChange: (provider, from, to) => guardLogger.warn({ provider, from, to }, 'circuit breaker state change'),
  });
  const routeStats = new RouteStats();
  const pollDemand = createPollDemand({
    db: parts.db.db,
    clock,
    rateOf: (provider) => pollRateFor({ providers: parts.providers, settings }, provider),
    share: settings.pollQuotaShare,
  });
  return {
    db: parts.db.db,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    modePauseRetryMs: config.MODE_PAUSE_RETRY_MS,
    clock,
    providers: parts.providers,
    storage: parts.storage,
    fallbackStorage: parts.fallbackStorage !== undefined ? parts.fallbackStorage : buildFallbackStorage(config),
    settings,
    routing: routingSettings(config),
    providerHealth: () => localProviderHealth(providerGuard, routeStats),
    providerGuard,
    routeStats,
    pollDemand,
  };
}

/** The reconciler activity's dependencies (activities/reconcile.ts), for the worker and the tests alike. */
export function buildReconcileDeps(
  config: Config,
  parts: {
    db: Database;
    storage: ObjectStorage;
    fallbackStorage?: ObjectStorage | null;
    facade: GenerationFacade;
    logger: Logger;
    onRun?: (run: ReconcileRunMetrics) => void;
  },
): ReconcileActivityDeps {
  return {
    db: parts.db.db,
    facade: parts.facade,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    storage: parts.storage,
    fallbackStorage: parts.fallbackStorage !== undefined ? parts.fallbackStorage : buildFallbackStorage(config),
    settings: reconcileSettings(config),
    logger: parts.logger,
    reconcilers: RECONCILERS,
    limit: config.RECONCILE_BATCH_LIMIT,
    ...(parts.onRun ? { onRun: parts.onRun } : {}),
  };
}
