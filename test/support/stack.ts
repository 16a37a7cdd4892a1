// Test fixtures over real services. `npm test` (scripts/test.ts) starts one Temporal dev
// server and one S3 server for the run and exports their addresses; each test file makes its
// own database, simulator, API and worker, so files are independent and can run in parallel.
import os from 'node:os';
import path from 'node:path';
import { inspect } from 'node:util';
import type { Client } from '@temporalio/client';
import { NativeConnection, type WorkflowBundle } from '@temporalio/worker';
import { loadConfig, type Config } from '../../config/env';
import { buildReconcileDeps, buildStorage } from '../../config/services';
import { createReconcileActivities } from '../../activities/reconcile';
import type { ReconcileRunMetrics } from '../../observability/metrics';
import type { Database } from '../../db/client';
import { createLogger } from '../../observability/logger';
import { startFactSampler } from '../../observability/facts';
import { createMetrics } from '../../observability/metrics';
import type { Tracing } from '../../observability/tracing';
import { createTaskActivities, type TaskActivities } from '../../activities';
import type { ObjectStorage } from '../../storage/s3';
import { createGenerationFacade, type GenerationFacade } from '../../temporal/facade';
import { bundleWorkflows, type GenerationWorkers } from '../../workers/generation-worker';
import { startWebhookRelay, webhookRelaySettings, type WebhookRelay } from '../../workers/webhook-relay';
import { startOutboxRelay } from '../../workers/outbox-relay';
import { createSecretBox } from '../../db/webhook-secrets';
import {
  connectTemporal,
  createInProcessWorkers,
  createWorldDatabase,
  createWorldTenant,
  installWorkerRuntime,
  startApiInProcess,
  startSimulator as startWorldSimulator,
  uniqueName,
  worldActivityDeps,
  worldFacade,
  type RunningSimulator,
  type WorldDatabase,
} from '../../harness/world';

export { freePort } from '../../harness/ports';
export type { RunningSimulator } from '../../harness/world';

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

/** The Temporal SDK's runtime of this test process, logging through testLogger. */
export const installTestRuntime = () => installWorkerRuntime(testLogger);

/** A Config for this test file: the run's services from the environment, plus overrides. */
export function testConfig(overrides: Record<string, string> = {}): Config {
  return loadConfig({
    ...process.env,
    NODE_ENV: 'test',
    VIDORCH_ENV: 'test',
    OUTPUT_FETCH_ALLOW_PRIVATE: 'true',
    // Test receivers listen on loopback over http.
    WEBHOOK_ALLOW_PRIVATE: 'true',
    // Tests create in bursts; the rate limit has its own test.
    TENANT_CREATE_RATE_PER_SECOND: '100000',
    TENANT_READ_RATE_PER_SECOND: '100000',
    TENANT_CANCEL_RATE_PER_SECOND: '100000',
    // A claim's create leaves within milliseconds here; tests that resolve an unknown outcome at
    // once wait out less of the send window (docs/decisions/0063).
    SUBMIT_SEND_WINDOW_MS: '1000',
    ...overrides,
  });
}

export type TestDatabase = WorldDatabase;

/** A fresh, migrated database named for this file; dropped by drop(). */
export function createTestDatabase(config: Config): Promise<TestDatabase> {
  return createWorldDatabase(config, { prefix: 'vidorch_t', max: 10, applicationName: 'vidorch-test' });
}

export function startSimulator(config: Config, opts: { generationMs?: number } = {}): Promise<RunningSimulator> {
  return startWorldSimulator(config, {
    logger: testLogger,
    generationMs: opts.generationMs ?? 300,
    dataDir: path.join(os.tmpdir(), 'vidorch-test-simulator'),
    webhookRetry: { attempts: 3, baseDelayMs: 50 },
  });
}

/** `tracing`: the client's interceptors come from it (observability/tracing.ts). */
export const temporalClient = (config: Config, tracing?: Tracing): Promise<{ client: Client; close(): Promise<void> }> => connectTemporal(config, tracing);

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
  const facade = opts.facade ?? worldFacade(config, () => opts.client);
  const facts = startFactSampler({
    databaseUrl: db.url,
    intervalMs: config.METRICS_FACTS_INTERVAL_MS,
    logger: testLogger,
    applicationName: 'vidorch-test-facts',
  });
  const api = await startApiInProcess(config, db, {
    facade,
    logger: testLogger,
    metrics: createMetrics({ service: 'api-test', facts: facts.latest, pool: db.pool }),
    fenceCacheMs: 0,
    port: opts.port ?? 0,
    ...(opts.storage ? { storage: opts.storage } : {}),
  });
  return {
    baseUrl: api.baseUrl,
    opsUrl: api.opsUrl,
    facade,
    refreshFacts: async () => {
      await facts.refresh();
    },
    async close() {
      await api.close();
      await facts.stop();
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
    /**
     * false: no outbox relay. On by default, as workers/main.ts runs it: a create whose fast-path
     * start took over a second (a loaded machine) is started by it, not left QUEUED.
     */
    outboxRelay?: boolean;
    /** Also run the reconcile-queue worker (the reconciler Schedules' workflows), as workers/main.ts does. */
    reconcile?: { onRun?: (run: ReconcileRunMetrics) => void };
  } = {},
): Promise<RunningWorker> {
  installTestRuntime();
  const connection = await NativeConnection.connect({ address: config.TEMPORAL_ADDRESS });
  const client = opts.reconcile ? await temporalClient(config) : null;
  const reconcileActivities = client
    ? createReconcileActivities(
        buildReconcileDeps(config, {
          db,
          storage: buildStorage(config),
          facade: createGenerationFacade(async () => client.client, config.TEMPORAL_TASK_QUEUE),
          logger: testLogger,
          ...(opts.reconcile?.onRun ? { onRun: opts.reconcile.onRun } : {}),
        }),
      )
    : undefined;
  const deps = worldActivityDeps(config, db, testLogger);
  const worker = await createInProcessWorkers(config, db, {
    connection,
    workflowBundle: await workflowBundle({ tracing: opts.tracing?.enabled ?? false }),
    deps,
    ...(opts.wrapActivities ? { activities: opts.wrapActivities(createTaskActivities(deps)) } : {}),
    extra: {
      ...(reconcileActivities ? { reconcileActivities } : {}),
      tracing: opts.tracing?.worker ?? null,
      ...(opts.pollProviders ? { pollProviders: opts.pollProviders } : {}),
    },
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
  const relayClient = opts.outboxRelay === false ? null : await temporalClient(config);
  const outboxRelay =
    relayClient === null
      ? null
      : startOutboxRelay({
          db: db.db,
          fence: { scope: config.FENCE_SCOPE, region: config.REGION },
          facade: worldFacade(config, () => relayClient.client),
          logger: testLogger,
          batchSize: config.OUTBOX_RELAY_BATCH,
          intervalMs: config.OUTBOX_RELAY_INTERVAL_MS,
          // Rows younger than 3 s are the fast path's (its window is 1 s) or a test's own: a test that
          // starts a workflow itself (startTaskWorkflow), marks a task's row published after creating
          // it (createTaskWithoutWorkflow) or follows the create's trace never races this relay.
          holdOffMs: 3_000,
        });
  return {
    worker,
    webhookRelay,
    async stop() {
      worker.shutdown();
      await Promise.all([running, webhookRelay?.stop(), outboxRelay?.stop()]);
      await client?.close();
      await relayClient?.close();
      await connection.close();
    },
  };
}

export function createTestTenant(db: Database, config: Config, credits = '1000'): Promise<{ tenantId: string; apiKey: string }> {
  return createWorldTenant(db, config, { name: uniqueName('tenant'), credits, actor: 'test' });
}

export const uniqueQueue = (name: string) => uniqueName(`tq_${name}`);

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
    if (Date.now() > deadline) throw new Error(`condition not met in ${timeoutMs} ms${last ? `: ${inspect(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export { configToEnv } from '../../config/env';
