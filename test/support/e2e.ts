// The whole product in one test process: a database, the simulator, the API (on a port fixed
// before start, so callback URLs reach it) and a worker on a unique task queue, all against the
// run's Temporal and S3 servers.
import assert from 'node:assert/strict';
import type { Client } from '@temporalio/client';
import { eq } from 'drizzle-orm';
import { createVidorchClient, type CreateTaskRequest, type Task, type VidorchClient } from '../../api/client';
import { createTask as createTaskRow } from './deps';
import type { Config } from '../../config/env';
import type { Tracing } from '../../observability/tracing';
import { creditLedger } from '../../db/schema';
import type { ReconcileRunMetrics } from '../../observability/metrics';
import {
  createTestDatabase,
  createTestTenant,
  eventually,
  freePort,
  startApi,
  startSimulator,
  startWorker,
  temporalClient,
  testConfig,
  uniqueQueue,
  type RunningApi,
  type RunningSimulator,
  type RunningWorker,
  type TestDatabase,
} from './stack';
import { simulatorProviderSettings } from '../../harness/world';
import { SA_PROVIDER, SA_TASK_STATUS, SA_TENANT_ID } from '../../workflows/definitions';
import type { GenerationInput, generationWorkflow } from '../../workflows/generation';

export const TERMINAL_OR_REVIEW = ['SUCCEEDED', 'FAILED', 'CANCELLED', 'MANUAL_REVIEW'];

export interface E2E {
  readonly config: Config;
  readonly sim: RunningSimulator;
  readonly tdb: TestDatabase;
  readonly api: RunningApi;
  worker: RunningWorker | null;
  readonly client: Client;
  readonly tenant: { tenantId: string; apiKey: string };
  /** The typed API client (api/client), as the tenant. */
  readonly vidorch: VidorchClient;
  createTask(key: string, body?: Record<string, unknown>): Promise<string>;
  /** The task as GET /v1/tasks/:id answers it; throws on any other answer than 200. */
  getTask(taskId: string): Promise<Task>;
  /** The task once it has `status` (typed loosely: the caller knows which fields that status fills). */
  waitForStatus(taskId: string, status: string, timeoutMs?: number): Promise<any>;
  /** POST /v1/tasks/:id/cancel: the answer's status and body (the cancel answer or a problem). */
  cancelTask(taskId: string): Promise<{ status: number; body: unknown }>;
  /**
   * Waits until the task's workflow itself reports the status (its facts query): Postgres moves
   * first (an activity commits), the workflow's facts follow when its step returns, and an
   * Update's validator reads the workflow's facts.
   */
  waitForWorkflowStatus(taskId: string, status: string, timeoutMs?: number): Promise<void>;
  ledgerOf(taskId: string): Promise<Record<string, string>>;
  close(): Promise<void>;
}

export const defaultRequest = {
  model: 'minimax/video-01',
  prompt: 'a red fox running through snow',
  duration_seconds: 6,
  resolution: '720p',
};

/** A tenant's task calls through the typed client (api/client), shared by the e2e and the modes stacks. */
export function tenantTasks(vidorch: VidorchClient, defaultBody: Record<string, unknown>) {
  const tasks = {
    /** POST /v1/tasks: the answer's status, headers and body (the task or a problem). */
    async create(key: string, body: Record<string, unknown> = defaultBody): Promise<{ status: number; headers: Headers; body: any }> {
      // Tests also send bodies the API refuses: the server validates, not the compiler.
      const res = await vidorch.POST('/v1/tasks', { params: { header: { 'Idempotency-Key': key } }, body: body as CreateTaskRequest });
      return { status: res.response.status, headers: res.response.headers, body: res.data ?? res.error };
    },
    /** POST /v1/tasks, which must answer 202: the task id. */
    async createTask(key: string, body: Record<string, unknown> = defaultBody): Promise<string> {
      const res = await tasks.create(key, body);
      assert.equal(res.status, 202, JSON.stringify(res.body));
      return res.body.task_id as string;
    },
    /** The task as GET /v1/tasks/:id answers it; throws on any other answer than 200. */
    async getTask(taskId: string): Promise<Task> {
      const res = await vidorch.GET('/v1/tasks/{id}', { params: { path: { id: taskId } } });
      if (!res.data) throw new Error(`GET /v1/tasks/${taskId} answered ${res.response.status}: ${JSON.stringify(res.error)}`);
      return res.data;
    },
    /** POST /v1/tasks/:id/cancel: the answer's status, headers and body (the cancel answer or a problem). */
    async cancel(taskId: string): Promise<{ status: number; headers: Headers; body: any }> {
      const res = await vidorch.POST('/v1/tasks/{id}/cancel', { params: { path: { id: taskId } } });
      return { status: res.response.status, headers: res.response.headers, body: res.data ?? res.error };
    },
    /** The task once it has `status`; fails as soon as it ends in another status. */
    waitForStatus(taskId: string, status: string, timeoutMs = 60_000): Promise<any> {
      return eventually(
        async () => {
          const body = await tasks.getTask(taskId);
          if (TERMINAL_OR_REVIEW.includes(body.status) && body.status !== status) {
            throw new Error(`task ended ${body.status}, expected ${status}: ${JSON.stringify(body.failure)}`);
          }
          return body.status === status ? body : undefined;
        },
        timeoutMs,
        200,
      );
    },
  };
  return tasks;
}

export async function startE2E(
  name: string,
  overrides: Record<string, string> = {},
  opts: {
    generationMs?: number;
    worker?: boolean;
    tracing?: Tracing;
    reconcile?: { onRun?: (run: ReconcileRunMetrics) => void };
    /** The simulator's own settings (e.g. SIMULATOR_REPLICATE_RATE_LIMITS: the account it plays). */
    simulator?: Record<string, string>;
    /** false: the worker runs no outbox relay (a test that plays a lost relay). */
    outboxRelay?: boolean;
  } = {},
): Promise<E2E> {
  const sim = await startSimulator(testConfig(opts.simulator ?? {}), { generationMs: opts.generationMs ?? 400 });
  const port = await freePort();
  const config = testConfig({
    TEMPORAL_TASK_QUEUE: uniqueQueue(name),
    ...simulatorProviderSettings(sim.baseUrl),
    PUBLIC_BASE_URL: `http://127.0.0.1:${port}`,
    POLL_INITIAL_MS: '300',
    POLL_MAX_MS: '600',
    ...overrides,
  });
  const tdb = await createTestDatabase(config);
  const { client, close: closeClient } = await temporalClient(config, opts.tracing);
  const api = await startApi(config, tdb.database, { client, port });
  const worker =
    opts.worker === false
      ? null
      : await startWorker(config, tdb.database, {
          ...(opts.tracing ? { tracing: opts.tracing } : {}),
          ...(opts.reconcile ? { reconcile: opts.reconcile } : {}),
          ...(opts.outboxRelay === false ? { outboxRelay: false } : {}),
        });
  const tenant = await createTestTenant(tdb.database, config, '1000');
  const vidorch = createVidorchClient({ baseUrl: api.baseUrl, apiKey: tenant.apiKey });
  const tasks = tenantTasks(vidorch, defaultRequest);

  const e2e: E2E = {
    config,
    sim,
    tdb,
    api,
    worker,
    client,
    tenant,
    vidorch,
    createTask: tasks.createTask,
    getTask: tasks.getTask,
    cancelTask: tasks.cancel,
    waitForStatus: tasks.waitForStatus,
    async waitForWorkflowStatus(taskId, status, timeoutMs = 60_000) {
      await tasks.waitForStatus(taskId, status, timeoutMs);
      await eventually(async () => ((await api.facade.queryFacts(taskId))?.status === status ? true : undefined), timeoutMs, 200);
    },
    async ledgerOf(taskId) {
      const rows = await tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId));
      return Object.fromEntries(rows.map((r) => [r.entry_type, r.amount]));
    },
    async close() {
      await e2e.worker?.stop();
      await api.close();
      await closeClient();
      await sim.close();
      await tdb.drop();
    },
  };
  return e2e;
}

/**
 * A task committed in Postgres (as the API would) whose workflow the test starts itself, with
 * `input` (e.g. a run length), and the handle of that first run.
 */
export async function startTaskWorkflow(e: E2E, key: string, input: Omit<GenerationInput, 'taskId'> = {}) {
  const created = await createTaskRow(
    e.tdb.database.db,
    { scope: e.config.FENCE_SCOPE, region: e.config.REGION, epoch: 1 },
    {
      tenantId: e.tenant.tenantId,
      idempotencyKey: `${key}-${Date.now()}`,
      body: { ...defaultRequest, resolution: '720p', prompt: key, priority: 0 },
    },
  );
  const taskId = created.task.task_id;
  const handle = await e.client.workflow.start<typeof generationWorkflow>('generationWorkflow', {
    taskQueue: e.config.TEMPORAL_TASK_QUEUE,
    workflowId: e.api.facade.workflowIdFor(taskId),
    args: [{ taskId, ...input }],
    typedSearchAttributes: [
      { key: SA_TASK_STATUS, value: 'QUEUED' },
      { key: SA_TENANT_ID, value: e.tenant.tenantId },
      { key: SA_PROVIDER, value: 'replicate' },
    ],
  });
  return { taskId, handle };
}
