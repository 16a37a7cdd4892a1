// Test fixtures over real services. `npm test` (scripts/test.ts) starts one Temporal dev
// server and one S3 server for the run and exports their addresses; each test file makes its
// own database, simulator, API and worker, so files are independent and can run in parallel.
import { randomBytes } from 'node:crypto';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Runtime, type WorkflowBundle } from '@temporalio/worker';
import { buildApiContext } from '../../api/context';
import { serveApi } from '../../api/listen';
import { loadConfig, type Config } from '../../config/env';
import { buildActivityDeps, buildProviders, buildReconcileDeps, buildStorage } from '../../config/services';
import { createReconcileActivities } from '../../activities/reconcile';
import type { ReconcileRunMetrics } from '../../observability/metrics';
import { createDatabase, type Database } from '../../db/client';
import { dropDatabase, migrateDatabase } from '../../db/migrate';
import { createLogger } from '../../observability/logger';
import { startFactSampler } from '../../observability/facts';
import { createMetrics } from '../../observability/metrics';
import { temporalLogger } from '../../observability/temporal-logger';
import type { Tracing } from '../../observability/tracing';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { createTenant } from '../../ops/tenants';
import { createCallbackTokens } from '../../providers/callback-token';
import { createSimulator, type Simulator } from '../../providers/simulator/server';
import type { ObjectStorage } from '../../storage/s3';
import { createGenerationFacade, type GenerationFacade } from '../../temporal/facade';
import { bundleWorkflows, createGenerationWorkers, type GenerationWorkers } from '../../workers/generation-worker';
import { startWebhookRelay, webhookRelaySettings, type WebhookRelay } from '../../workers/webhook-relay';
import { createSecretBox } from '../../db/webhook-secrets';

const logTaps = new Set<(line: string) => void>();
/** Calls `tap` with every log line of this process (its own and the Temporal SDK's) until the returned stop is called. */
export function tapLogs(tap: (line: string) => void): () => void {
  logTaps.add(tap);
  return () => logTaps.delete(tap);
}

export const testLogger = createLogger({
  name: 'test',
  level: process.env['LOG_LEVEL'] ?? 'warn',
  pretty: false,
  destination: {
    write(line: string) {
      process.stdout.write(line);
      for (const tap of logTaps) tap(line);
    },
  },
});

let runtimeInstalled = false;
function installRuntime() {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  Runtime.install({ logger: temporalLogger(testLogger), shutdownSignals: [] });
}

const unique = (prefix: string) => `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;

/** A Config for this test file: the run's services from the environment, plus overrides. */
export function testConfig(overrides: Record<string, string> = {}): Config {
  return loadConfig({
    ...process.env,
    NODE_ENV: 'test',
    OUTPUT_FETCH_ALLOW_PRIVATE: 'true',
    // Test receivers listen on loopback over http.
    WEBHOOK_ALLOW_PRIVATE: 'true',
    // Tests create in bursts; the rate limit has its own test.
    TENANT_CREATE_RATE_PER_SECOND: '100000',
    TENANT_READ_RATE_PER_SECOND: '100000',
    TENANT_CANCEL_RATE_PER_SECOND: '100000',
    ...overrides,
  });
}

export interface TestDatabase {
  readonly url: string;
  readonly database: Database;
  drop(): Promise<void>;
}

/** A fresh, migrated database named for this file; dropped by drop(). */
export async function createTestDatabase(config: Config): Promise<TestDatabase> {
  const url = new URL(config.DATABASE_URL);
  url.pathname = `/${unique('vidorch_t')}`;
  await migrateDatabase({ url: url.toString(), region: config.REGION, fenceScope: config.FENCE_SCOPE });
  const database = createDatabase({ url: url.toString(), max: 10, applicationName: 'vidorch-test' });
  return {
    url: url.toString(),
    database,
    async drop() {
      await database.close();
      await dropDatabase(url.toString());
    },
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

export async function startSimulator(config: Config, opts: { generationMs?: number } = {}): Promise<RunningSimulator> {
  const sim = createSimulator({
    apiToken: config.PROVIDER_REPLICATE_API_TOKEN,
    webhookSecret: config.PROVIDER_REPLICATE_WEBHOOK_SECRET,
    fal: { userId: config.PROVIDER_FAL_USER_ID },
    generationMs: opts.generationMs ?? 300,
    outputTtlMs: config.SIMULATOR_OUTPUT_TTL_MS,
    dataDir: path.join(os.tmpdir(), 'vidorch-test-simulator'),
    logger: testLogger,
    webhookRetry: { attempts: 3, baseDelayMs: 50 },
  });
  const server = await sim.listen(0);
  const tokens = createCallbackTokens(config.CALLBACK_TOKEN_SECRET);
  return {
    sim,
    baseUrl: `http://127.0.0.1:${server.port}`,
    jobsFor: (attemptId) => sim.tokenCount(attemptId) + sim.tokenCount(tokens.tokenFor(attemptId)),
    jobIdsFor: (attemptId) => [...sim.jobIdsFor(attemptId), ...sim.jobIdsFor(tokens.tokenFor(attemptId))],
    close: () => server.close(),
  };
}

/** `tracing`: the client's interceptors come from it (observability/tracing.ts). */
export async function temporalClient(config: Config, tracing?: Tracing): Promise<{ client: Client; close(): Promise<void> }> {
  const connection = await Connection.connect({ address: config.TEMPORAL_ADDRESS });
  const interceptors = { workflow: tracing?.clientInterceptors ?? [] };
  return { client: new Client({ connection, namespace: config.TEMPORAL_NAMESPACE, interceptors }), close: () => connection.close() };
}

export interface RunningApi {
  readonly baseUrl: string;
  /** The operator listener: /metrics and the detailed /readyz. */
  readonly opsUrl: string;
  readonly facade: GenerationFacade;
  /** Runs a fact-gauge pass now (the sampler's own loop runs every METRICS_FACTS_INTERVAL_MS). */
  refreshFacts(): Promise<void>;
  close(): Promise<void>;
}

export async function startApi(
  config: Config,
  db: Database,
  opts: { facade?: GenerationFacade; client?: Client; storage?: ObjectStorage; port?: number } = {},
): Promise<RunningApi> {
  const facade =
    opts.facade ??
    createGenerationFacade(async () => {
      if (!opts.client) throw new Error('no Temporal client for this API');
      return opts.client;
    }, config.TEMPORAL_TASK_QUEUE, { taskPriority: config.TEMPORAL_TASK_PRIORITY });
  const facts = startFactSampler({ databaseUrl: db.url, intervalMs: config.METRICS_FACTS_INTERVAL_MS, logger: testLogger, applicationName: 'vidorch-test-facts' });
  const ctx = buildApiContext(config, {
    db: db.db,
    facade,
    logger: testLogger,
    metrics: createMetrics({ service: 'api-test', facts: facts.latest, pool: db.pool }),
    fenceCacheMs: 0,
    databaseUrl: db.url,
    ...(opts.storage ? { storage: opts.storage } : {}),
  });
  const served = await serveApi(ctx, { port: opts.port ?? 0 });
  return {
    baseUrl: served.url,
    opsUrl: served.opsUrl,
    facade,
    refreshFacts: async () => {
      await facts.refresh();
    },
    async close() {
      await served.close();
      await Promise.all([ctx.close(), facts.stop()]);
    },
  };
}

const bundles = new Map<boolean, Promise<WorkflowBundle>>();
/** The workflow bundle (with the tracing interceptors or without), built once per test file. */
export function workflowBundle(opts: { tracing?: boolean } = {}): Promise<WorkflowBundle> {
  const tracing = opts.tracing ?? false;
  if (!bundles.has(tracing)) bundles.set(tracing, bundleWorkflows({ tracing }));
  return bundles.get(tracing)!;
}

export interface RunningWorker {
  /** The generation worker and one poll worker per provider (workers/generation-worker.ts). */
  readonly worker: GenerationWorkers;
  /** The webhook relay, as workers/main.ts runs it (null with `webhooks: false`). */
  readonly webhookRelay: WebhookRelay | null;
  stop(): Promise<void>;
}

/** The generation worker and its poll workers; `pollProviders` limits which providers get one. */
export async function startWorker(
  config: Config,
  db: Database,
  opts: {
    pollProviders?: readonly string[];
    wrapActivities?: (a: TaskActivities) => TaskActivities;
    tracing?: Tracing;
    /** false: no webhook relay (on by default, as workers/main.ts runs it). */
    webhooks?: boolean;
    /** Also run the reconcile-queue worker (the reconciler Schedules' workflows), as workers/main.ts does. */
    reconcile?: { onRun?: (run: ReconcileRunMetrics) => void };
  } = {},
): Promise<RunningWorker> {
  installRuntime();
  const connection = await NativeConnection.connect({ address: config.TEMPORAL_ADDRESS });
  const storage = buildStorage(config);
  const deps = buildActivityDeps(config, { db, storage, providers: buildProviders(config), logger: testLogger });
  const client = opts.reconcile ? await temporalClient(config) : null;
  const reconcileActivities = client
    ? createReconcileActivities(
        buildReconcileDeps(config, {
          db,
          storage,
          facade: createGenerationFacade(async () => client.client, config.TEMPORAL_TASK_QUEUE),
          logger: testLogger,
          ...(opts.reconcile?.onRun ? { onRun: opts.reconcile.onRun } : {}),
        }),
      )
    : undefined;
  const worker = await createGenerationWorkers({
    ...(reconcileActivities ? { reconcileActivities } : {}),
    connection,
    databaseUrl: db.url,
    namespace: config.TEMPORAL_NAMESPACE,
    taskQueueBase: config.TEMPORAL_TASK_QUEUE,
    deps,
    ...(opts.wrapActivities ? { activities: opts.wrapActivities(createTaskActivities(deps)) } : {}),
    workflowBundle: await workflowBundle({ tracing: opts.tracing?.enabled ?? false }),
    tracing: opts.tracing?.worker ?? null,
    shutdownGraceMs: 2_000,
    ...(opts.pollProviders ? { pollProviders: opts.pollProviders } : {}),
  });
  const running = worker.run();
  const webhookRelay =
    opts.webhooks === false
      ? null
      : startWebhookRelay({
          db: db.db,
          fence: { scope: config.FENCE_SCOPE, region: config.REGION },
          secrets: createSecretBox(config.WEBHOOK_SECRET_KEY),
          publicBaseUrl: config.PUBLIC_BASE_URL.replace(/\/+$/, ''),
          logger: testLogger,
          settings: webhookRelaySettings(config),
        });
  return {
    worker,
    webhookRelay,
    async stop() {
      worker.shutdown();
      await Promise.all([running, webhookRelay?.stop()]);
      await client?.close();
      await connection.close();
    },
  };
}

export async function createTestTenant(db: Database, config: Config, credits = '1000'): Promise<{ tenantId: string; apiKey: string }> {
  const t = await createTenant(db.db, {
    name: unique('tenant'),
    credits,
    ifMissing: false,
    actor: 'test',
    fence: { scope: config.FENCE_SCOPE, region: config.REGION },
  });
  return { tenantId: t.tenant_id, apiKey: t.api_key! };
}

/** A port that was free a moment ago (for a server whose URL must be known before it starts). */
export async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', () => resolve()));
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

export const uniqueQueue = (name: string) => unique(`tq_${name}`);

/** JSON request helper that returns status, headers and parsed body. */
export async function http(
  baseUrl: string,
  method: string,
  path: string,
  opts: { apiKey?: string; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; headers: Headers; body: any }> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.apiKey) headers['authorization'] = `Bearer ${opts.apiKey}`;
  let payload: string | undefined;
  if (opts.rawBody !== undefined) payload = opts.rawBody;
  else if (opts.body !== undefined) payload = JSON.stringify(opts.body);
  if (payload !== undefined) headers['content-type'] ??= 'application/json';
  const res = await fetch(`${baseUrl}${path}`, { method, headers, ...(payload !== undefined ? { body: payload } : {}) });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    /* keep text */
  }
  return { status: res.status, headers: res.headers, body };
}

/** Polls `check` until it returns a value (not undefined) or the timeout passes. */
export async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs = 30_000, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`condition not met in ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}


export { configToEnv } from '../../config/env';
