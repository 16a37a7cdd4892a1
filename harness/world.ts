// The world builder shared by the tests (test/support), the drills (bench/drills/harness.ts) and
// the benchmarks (bench/lib/world.ts): a fresh migrated database, the provider simulator in this
// process, the API in this process, the generation workers in this process or as processes,
// a tenant, a Temporal client. Each piece is a function that takes the Config it runs under, so
// a test and a drill build the same thing the same way and differ only in their settings.
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Runtime, type WorkflowBundle } from '@temporalio/worker';
import { startCallbackReplayer } from '../api/callbacks.handlers';
import { buildApiContext, type ApiContext } from '../api/context';
import { serveApi } from '../api/listen';
import { configToEnv, type Config } from '../config/env';
import { buildActivityDeps, buildProviders, buildStorage, failoverHosts } from '../config/services';
import type { TaskActivityDeps } from '../activities/deps';
import type { TaskActivities } from '../activities';
import { createDatabase, type Database } from '../db/client';
import { dropDatabase, migrateDatabase } from '../db/migrate';
import type { Logger } from '../observability/logger';
import type { Metrics } from '../observability/metrics';
import { temporalLogger } from '../observability/temporal-logger';
import type { Tracing } from '../observability/tracing';
import { createTenant } from '../ops/tenants';
import { createCallbackTokens } from '../providers/callback-token';
import { replicateLimitsFromSetting } from '../providers/simulator/rate-limits';
import { createSimulator, type Simulator } from '../providers/simulator/server';
import type { ObjectStorage } from '../storage/s3';
import { createGenerationFacade, type GenerationFacade } from '../temporal/facade';
import { createGenerationWorkers, type GenerationWorkerOptions, type GenerationWorkers } from '../workers/generation-worker';
import { freePort } from './ports';
import { fileLogger, startWorkerProcess, type ManagedProcess } from './processes';

/** `<prefix>_<pid>_<8 hex>`: a name no other run of this machine uses (databases, queues, tenants). */
export const uniqueName = (prefix: string) => `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;

// ------------------------------------------------------------------------------------------
// simulator

/** Settings pointing every provider adapter at the simulator listening on `baseUrl`. */
export function simulatorProviderSettings(baseUrl: string): Record<string, string> {
  return {
    PROVIDER_REPLICATE_BASE_URL: `${baseUrl}/replicate`,
    PROVIDER_FAL_BASE_URL: `${baseUrl}/fal`,
    PROVIDER_FAL_JWKS_URL: `${baseUrl}/fal/.well-known/jwks.json`,
    PROVIDER_FAL_OPENAPI_URL: `${baseUrl}/fal/api/openapi/queue/openapi.json`,
    PROVIDER_RUNWAY_BASE_URL: `${baseUrl}/runway`,
    PROVIDER_KLING_BASE_URL: `${baseUrl}/kling`,
  };
}

export interface RunningSimulator {
  readonly sim: Simulator;
  readonly baseUrl: string;
  /**
   * Jobs the simulator holds for an attempt: by the attempt id (Kling's external_task_id) or by
   * the keyed token of its callback URL (Replicate and fal carry only the URL).
   */
  jobsFor(attemptId: string): number;
  /** The ids of those jobs (what an operator finds in the provider's console). */
  jobIdsFor(attemptId: string): string[];
  close(): Promise<void>;
}

/** The provider simulator on a free loopback port, speaking all four protocols with `config`'s credentials. */
export async function startSimulator(
  config: Config,
  opts: { logger: Logger; generationMs: number; dataDir: string; webhookRetry?: { attempts: number; baseDelayMs: number } },
): Promise<RunningSimulator> {
  const sim = createSimulator({
    apiToken: config.PROVIDER_REPLICATE_API_TOKEN,
    webhookSecret: config.PROVIDER_REPLICATE_WEBHOOK_SECRET,
    fal: { userId: config.PROVIDER_FAL_USER_ID },
    kling: { visibleAfterMs: config.SIMULATOR_KLING_VISIBLE_AFTER_MS, notFound: config.SIMULATOR_KLING_NOT_FOUND },
    generationMs: opts.generationMs,
    outputTtlMs: config.SIMULATOR_OUTPUT_TTL_MS,
    dataDir: opts.dataDir,
    replicateRateLimits: replicateLimitsFromSetting(config.SIMULATOR_REPLICATE_RATE_LIMITS),
    logger: opts.logger,
    ...(opts.webhookRetry ? { webhookRetry: opts.webhookRetry } : {}),
  });
  const server = await sim.listen(0);
  // The simulator knows a job by what the submit carried: the attempt id, or its callback URL's
  // token under whichever secret minted it (the current one, or one retired since).
  const minters = [config.CALLBACK_TOKEN_SECRET, ...config.CALLBACK_TOKEN_SECRET_PREVIOUS].map((s) => createCallbackTokens(s));
  const keysOf = (attemptId: string) => [attemptId, ...minters.map((t) => t.tokenFor(attemptId))];
  return {
    sim,
    baseUrl: `http://127.0.0.1:${server.port}`,
    jobsFor: (attemptId) => keysOf(attemptId).reduce((n, key) => n + sim.tokenCount(key), 0),
    jobIdsFor: (attemptId) => keysOf(attemptId).flatMap((key) => sim.jobIdsFor(key)),
    close: () => server.close(),
  };
}

// ------------------------------------------------------------------------------------------
// database and tenant

export interface WorldDatabase {
  readonly url: string;
  readonly database: Database;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

/** A fresh database (a unique name on `config`'s server), migrated as `npm run db:migrate` does. */
export async function createWorldDatabase(
  config: Config,
  opts: { prefix: string; max: number; applicationName: string; failover?: boolean },
): Promise<WorldDatabase> {
  const url = new URL(config.DATABASE_URL);
  url.pathname = `/${uniqueName(opts.prefix)}`;
  await migrateDatabase({ url: url.toString(), region: config.REGION, fenceScope: config.FENCE_SCOPE });
  const database = createDatabase({
    url: url.toString(),
    max: opts.max,
    applicationName: opts.applicationName,
    ...(opts.failover ? { failoverHosts: failoverHosts(config) } : {}),
  });
  return {
    url: url.toString(),
    database,
    async drop() {
      await database.close();
      await dropDatabase(url.toString());
    },
  };
}

export interface WorldTenant {
  readonly tenantId: string;
  readonly apiKey: string;
}

/** A new tenant with `credits` and an API key, created as the operator CLI does. */
export async function createWorldTenant(db: Database, config: Config, opts: { name: string; credits: string; actor: string }): Promise<WorldTenant> {
  const t = await createTenant(db.db, {
    name: opts.name,
    credits: opts.credits,
    ifMissing: false,
    actor: opts.actor,
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
  });
  return { tenantId: t.tenant_id, apiKey: t.api_key! };
}

// ------------------------------------------------------------------------------------------
// Temporal client and API

/** A Temporal client on `config`'s server and namespace; `tracing` adds its client interceptors (observability/tracing.ts). */
export async function connectTemporal(config: Config, tracing?: Tracing): Promise<{ client: Client; close(): Promise<void> }> {
  const connection = await Connection.connect({ address: config.TEMPORAL_ADDRESS });
  const interceptors = { workflow: tracing?.clientInterceptors ?? [] };
  return { client: new Client({ connection, namespace: config.TEMPORAL_NAMESPACE, interceptors }), close: () => connection.close() };
}

/** The facade the API uses (temporal/facade.ts), on `config`'s task queue and priority. */
export function worldFacade(config: Config, client: () => Client | undefined): GenerationFacade {
  return createGenerationFacade(
    async () => {
      const c = client();
      if (!c) throw new Error('no Temporal client for this API');
      return c;
    },
    config.TEMPORAL_TASK_QUEUE,
    { taskPriority: config.TEMPORAL_TASK_PRIORITY },
  );
}

export interface InProcessApi {
  readonly baseUrl: string;
  /** The operator listener: /metrics and the detailed /readyz. */
  readonly opsUrl: string;
  readonly ctx: ApiContext;
  readonly facade: GenerationFacade;
  /** The spooled-callback replayer, as api/server.ts runs it (null unless asked for). */
  readonly replayer: { stop(): Promise<void>; runOnce(): Promise<unknown> } | null;
  close(): Promise<void>;
}

/** The API in this process (both listeners of api/listen.ts on loopback), over `db`. */
export async function startApiInProcess(
  config: Config,
  db: Database,
  opts: {
    facade: GenerationFacade;
    logger: Logger;
    metrics: Metrics;
    port?: number;
    fenceCacheMs?: number;
    storage?: ObjectStorage;
    /** The database the event LISTEN connection reaches (default db.url). */
    databaseUrl?: string;
    /** Replay spooled callbacks every this many ms (api/server.ts: CALLBACK_SPOOL_REPLAY_MS). */
    replayMs?: number;
  },
): Promise<InProcessApi> {
  const ctx = buildApiContext(config, {
    db: db.db,
    facade: opts.facade,
    logger: opts.logger,
    metrics: opts.metrics,
    databaseUrl: opts.databaseUrl ?? db.url,
    ...(opts.fenceCacheMs !== undefined ? { fenceCacheMs: opts.fenceCacheMs } : {}),
    ...(opts.storage ? { storage: opts.storage } : {}),
  });
  const served = await serveApi(ctx, { port: opts.port ?? 0 });
  const replayer = opts.replayMs !== undefined ? startCallbackReplayer(ctx, opts.replayMs) : null;
  return {
    baseUrl: served.url,
    opsUrl: served.opsUrl,
    ctx,
    facade: opts.facade,
    replayer,
    async close() {
      await replayer?.stop();
      await served.close();
      await ctx.close();
    },
  };
}

// ------------------------------------------------------------------------------------------
// workers

let runtimeInstalled = false;
/** Installs the Temporal SDK's runtime once per process, logging through `logger`; signals stay with the caller. */
export function installWorkerRuntime(logger: Logger): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    Runtime.install({ logger: temporalLogger(logger), shutdownSignals: [] });
  } catch {
    // Installed already by code that does not go through here.
  }
}

/** The activities' dependencies as workers/main.ts builds them: `config`'s storage and provider adapters over `db`. */
export function worldActivityDeps(config: Config, db: Database, logger: Logger): TaskActivityDeps {
  return buildActivityDeps(config, { db, storage: buildStorage(config), providers: buildProviders(config), logger });
}

/**
 * The generation worker and its poll workers (workers/generation-worker.ts) in this process, on
 * `config`'s queue, with `deps` and `activities` (default: built from
 * them); `connection` stays the caller's. Not yet running: the caller runs it (or a supervisor does).
 */
export function createInProcessWorkers(
  config: Config,
  db: Database,
  opts: {
    connection: NativeConnection;
    workflowBundle: WorkflowBundle;
    /** The activities' dependencies (worldActivityDeps builds the default ones). */
    deps: TaskActivityDeps;
    activities?: TaskActivities;
    /** Further worker options (poll providers, tracing, identity, the reconcile activities). */
    extra?: Partial<GenerationWorkerOptions>;
  },
): Promise<GenerationWorkers> {
  return createGenerationWorkers({
    connection: opts.connection,
    databaseUrl: db.url,
    namespace: config.TEMPORAL_NAMESPACE,
    taskQueueBase: config.TEMPORAL_TASK_QUEUE,
    deps: opts.deps,
    workflowBundle: opts.workflowBundle,
    maxWakesInFlight: config.WAKE_SIGNALS_MAX_IN_FLIGHT,
    shutdownGraceMs: 2_000,
    ...(opts.activities ? { activities: opts.activities } : {}),
    ...opts.extra,
  });
}

export interface WorkerProcess {
  readonly proc: ManagedProcess;
  /** The worker's metrics listener (WORKER_METRICS_PORT): /metrics. */
  readonly metricsUrl: string;
  readonly logFile: string;
}

/** workers/main.ts as a child process under `config` (plus `env`), its output in `logFile`, its metrics on a free port. */
export async function startWorkerAsProcess(config: Config, name: string, opts: { logFile: string; env?: Record<string, string> }): Promise<WorkerProcess> {
  const metricsPort = await freePort();
  const proc = startWorkerProcess(
    name,
    'workers/main.ts',
    { ...configToEnv(config), WORKER_METRICS_PORT: String(metricsPort), LOG_LEVEL: 'warn', LOG_PRETTY: 'false', ...opts.env },
    { log: fileLogger(opts.logFile) },
  );
  return { proc, metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`, logFile: opts.logFile };
}
