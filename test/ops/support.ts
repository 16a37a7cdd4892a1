// Fixtures for the mode, fence and failover tests: the product with the API's context in
// reach (its spool and replayer), and workers that know their region (a fence watcher and a
// region supervisor, as workers/main.ts runs them) or deliberately do not (a zombie).
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { NativeConnection } from '@temporalio/worker';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { createVidorchClient, type Task } from '../../api/client';
import type { ApiContext } from '../../api/context';
import type { Config } from '../../config/env';
import type { Database } from '../../db/client';
import { setMode } from '../../db/modes';
import type { SystemMode } from '../../domain/states';
import { createInProcessWorkers, simulatorProviderSettings, startApiInProcess, worldActivityDeps } from '../../harness/world';
import { createMetrics } from '../../observability/metrics';
import { createGenerationFacade, type GenerationFacade } from '../../temporal/facade';
import {
  regionSubmitSwitch,
  runAsRegionService,
  startFenceWatcher,
  superviseRegion,
  type FenceWatcher,
  type RegionSupervisor,
} from '../../workers/fence-watcher';
import type { GenerationWorkers } from '../../workers/generation-worker';
import { tenantTasks } from '../support/e2e';
import {
  createTestDatabase,
  createTestTenant,
  freePort,
  installTestRuntime,
  startSimulator,
  temporalClient,
  testConfig,
  testLogger,
  uniqueQueue,
  workflowBundle,
  type RunningSimulator,
  type TestDatabase,
} from '../support/stack';

/** What a worker's activities did: calls, and failures by ApplicationFailure type (or 'error'). */
export interface ActivityStats {
  calls: number;
  failures: Record<string, number>;
}

export interface RegionWorker {
  readonly region: string;
  readonly stats: ActivityStats;
  /** Null for a zombie (no watcher: it never hears of a failover). */
  readonly watcher: FenceWatcher | null;
  readonly supervisor: RegionSupervisor | null;
  /** The workers currently polling, if any. */
  current(): GenerationWorkers | null;
  stop(): Promise<void>;
}

/**
 * A generation worker of `region` on the stack's task queue. With `watch` (default) it runs
 * under a fence watcher and region supervisor like workers/main.ts; without, it polls no matter
 * what (a zombie), and only the fence row in Postgres stops its writes.
 */
export async function startRegionWorker(
  config: Config,
  database: Database,
  databaseUrl: string,
  opts: { region: string; watch?: boolean; pauseRetryMs?: number; watchIntervalMs?: number; listen?: boolean; identity?: string },
): Promise<RegionWorker> {
  installTestRuntime();
  // Bundle first: a standby worker must start polling within a second of its region becoming active.
  const bundle = await workflowBundle();
  const regionConfig = { ...config, REGION: opts.region };
  const connection = await NativeConnection.connect({ address: config.TEMPORAL_ADDRESS });
  const watcher =
    opts.watch === false
      ? null
      : await startFenceWatcher({
          db: database.db,
          databaseUrl,
          scope: config.FENCE_SCOPE,
          intervalMs: opts.watchIntervalMs ?? 1_000,
          logger: testLogger,
          ...(opts.listen === false ? { listen: false } : {}),
        });
  const deps = {
    ...worldActivityDeps(regionConfig, database, testLogger),
    modePauseRetryMs: opts.pauseRetryMs ?? 500,
    ...(watcher ? { submitSwitch: regionSubmitSwitch(watcher, opts.region) } : {}),
  };
  let current: GenerationWorkers | null = null;
  const stats: ActivityStats = { calls: 0, failures: {} };
  // The workers of workers/generation-worker.ts, with each activity counted.
  const activities = Object.fromEntries(
    Object.entries(createTaskActivities(deps)).map(([name, fn]) => [
      name,
      async (...args: unknown[]) => {
        stats.calls += 1;
        try {
          return await (fn as (...a: unknown[]) => Promise<unknown>)(...args);
        } catch (err) {
          const type = err instanceof ApplicationFailure ? (err.type ?? 'application') : 'error';
          stats.failures[type] = (stats.failures[type] ?? 0) + 1;
          throw err;
        }
      },
    ]),
  ) as TaskActivities;
  const start = async () => {
    const worker = await createInProcessWorkers(config, database, {
      connection,
      workflowBundle: bundle,
      deps,
      activities,
      extra: { identity: opts.identity ?? `${opts.region}-${randomBytes(2).toString('hex')}` },
    });
    current = worker;
    const service = runAsRegionService(worker);
    return {
      ended: service.ended,
      async stop() {
        await service.stop();
        if (current === worker) current = null;
      },
    };
  };
  if (!watcher) {
    const service = await start();
    return {
      region: opts.region,
      stats,
      watcher: null,
      supervisor: null,
      current: () => current,
      async stop() {
        await service.stop();
        await connection.close();
      },
    };
  }
  const supervisor = superviseRegion({ name: `worker-${opts.region}`, region: opts.region, watcher, start, logger: testLogger, restartDelayMs: 500 });
  return {
    region: opts.region,
    stats,
    watcher,
    supervisor,
    current: () => current,
    async stop() {
      await supervisor.stop();
      await watcher.stop();
      await connection.close();
    },
  };
}

export interface ModesStack {
  readonly config: Config;
  readonly tdb: TestDatabase;
  readonly sim: RunningSimulator;
  readonly client: Client;
  readonly ctx: ApiContext;
  readonly apiUrl: string;
  /** The API's operator listener (the detailed /readyz, /metrics). */
  readonly opsUrl: string;
  readonly tenant: { tenantId: string; apiKey: string };
  readonly replayer: { stop(): Promise<void>; runOnce(): Promise<unknown> } | null;
  workers: RegionWorker[];
  setMode(mode: SystemMode, reason?: string): Promise<void>;
  /** POST /v1/tasks with the typed client (api/client): the answer's status, headers and body (the task or a problem). */
  create(key: string, body?: Record<string, unknown>): Promise<{ status: number; headers: Headers; body: any }>;
  createTask(key: string): Promise<string>;
  getTask(taskId: string): Promise<Task>;
  /** POST /v1/tasks/:id/cancel with the typed client: the answer's status, headers and body. */
  cancel(taskId: string): Promise<{ status: number; headers: Headers; body: any }>;
  waitForStatus(taskId: string, status: string, timeoutMs?: number): Promise<any>;
  close(): Promise<void>;
}

export const taskBody = { model: 'minimax/video-01', prompt: 'modes and fences', duration_seconds: 6, resolution: '720p' };

/** Simulator, database, the API (its context kept), an optional worker of region-a. */
export async function startModesStack(
  name: string,
  overrides: Record<string, string> = {},
  opts: {
    generationMs?: number;
    fenceCacheMs?: number;
    worker?: boolean;
    replayer?: boolean;
    /** The API's own database handle (e.g. through a TcpProxy); workers keep the direct one. */
    apiDatabase?: (url: string) => Database;
    /** The API's Temporal facade (e.g. an unreachable one). */
    facade?: GenerationFacade;
  } = {},
): Promise<ModesStack> {
  const sim = await startSimulator(testConfig(), { generationMs: opts.generationMs ?? 1_000 });
  const port = await freePort();
  const config = testConfig({
    TEMPORAL_TASK_QUEUE: uniqueQueue(name),
    ...simulatorProviderSettings(sim.baseUrl),
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
    POLL_INITIAL_MS: '500',
    POLL_MAX_MS: '1000',
    CALLBACK_SPOOL_DIR: path.join(os.tmpdir(), `vidorch-spool-${process.pid}-${randomBytes(3).toString('hex')}`),
    ...overrides,
  });
  const tdb = await createTestDatabase(config);
  const { client, close: closeClient } = await temporalClient(config);
  const facade = opts.facade ?? createGenerationFacade(async () => client, config.TEMPORAL_TASK_QUEUE);
  const apiDatabase = opts.apiDatabase?.(tdb.url) ?? null;
  const api = await startApiInProcess(config, apiDatabase ?? tdb.database, {
    facade,
    logger: testLogger,
    metrics: createMetrics({ service: `api-${name}` }),
    fenceCacheMs: opts.fenceCacheMs ?? 0,
    databaseUrl: tdb.url,
    port,
    ...(opts.replayer === false ? {} : { replayMs: 200 }),
  });
  const tenant = await createTestTenant(tdb.database, config, '1000');
  const tasks = tenantTasks(createVidorchClient({ baseUrl: api.baseUrl, apiKey: tenant.apiKey }), taskBody);
  const workers: RegionWorker[] = [];
  if (opts.worker !== false) workers.push(await startRegionWorker(config, tdb.database, tdb.url, { region: config.REGION }));

  const stack: ModesStack = {
    config,
    tdb,
    sim,
    client,
    ctx: api.ctx,
    apiUrl: api.baseUrl,
    opsUrl: api.opsUrl,
    tenant,
    replayer: api.replayer,
    workers,
    async setMode(mode, reason = 'test') {
      await setMode(tdb.database.db, { scope: config.FENCE_SCOPE, mode, actor: 'test', reason });
    },
    create: tasks.create,
    createTask: (key) => tasks.createTask(key),
    cancel: tasks.cancel,
    getTask: tasks.getTask,
    waitForStatus: tasks.waitForStatus,
    async close() {
      for (const w of stack.workers) await w.stop().catch(() => undefined);
      await api.close();
      await closeClient();
      await sim.close();
      await apiDatabase?.close().catch(() => undefined);
      await tdb.drop();
    },
  };
  return stack;
}

export interface TcpProxy {
  readonly port: number;
  /** Stops listening and drops every open connection: the target looks down. */
  cut(): Promise<void>;
  /** Listens again on the same port. */
  restore(): Promise<void>;
  close(): Promise<void>;
}

/** A TCP proxy to 127.0.0.1:targetPort that a test can cut and restore (a Postgres outage for one process only). */
export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream).pipe(client);
  });
  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
    });
  const port = await listen(0);
  const cut = async () => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const s of sockets) s.destroy();
    sockets.clear();
    await closed;
  };
  return {
    port,
    cut,
    restore: async () => {
      await listen(port);
    },
    close: async () => {
      if (server.listening) await cut();
    },
  };
}
