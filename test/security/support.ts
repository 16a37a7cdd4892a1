// The API as an attacker reaches it: a database, the simulator (behind a counting proxy, so a
// test can see every provider read the API makes) and the API, no worker. Attempts are written
// as the submit step leaves them, with the callback token the provider was handed.
import http, { type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { eq, sql } from 'drizzle-orm';
import { createTask } from '../support/deps';
import { attemptIdFor } from '../../activities/dispatch';
import type { Config } from '../../config/env';
import { callbackInbox, taskAttempt } from '../../db/schema';
import { createCallbackTokens } from '../../providers/callback-token';
import {
  createTestDatabase,
  createTestTenant,
  startApi,
  startSimulator,
  testConfig,
  type RunningApi,
  type RunningSimulator,
  type TestDatabase,
} from '../support/stack';

export interface CallbackWorld {
  readonly config: Config;
  readonly sim: RunningSimulator;
  readonly tdb: TestDatabase;
  readonly api: RunningApi;
  /** Provider requests the API made, by method and path (through the proxy). */
  readonly providerReads: string[];
  /** A task with one attempt at `provider`, as submitted: its ids and its callback URL token. */
  attempt(provider: string, opts?: { jobId?: string | null; model?: string }): Promise<{ taskId: string; attemptId: string; token: string }>;
  inboxRows(): Promise<number>;
  attemptRow(attemptId: string): Promise<typeof taskAttempt.$inferSelect>;
  post(path: string, body: string, headers?: Record<string, string>): Promise<{ status: number; headers: Headers; body: any }>;
  close(): Promise<void>;
}

/** Forwards every request to `target`, recording "METHOD /path". */
async function countingProxy(target: string, seen: string[]): Promise<{ url: string; server: Server }> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push(`${req.method} ${req.url?.split('?')[0]}`);
      const body = chunks.length ? Buffer.concat(chunks) : undefined;
      fetch(`${target}${req.url}`, { method: req.method, headers: req.headers as Record<string, string>, ...(body ? { body } : {}) })
        .then(async (r) => {
          res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
          res.end(Buffer.from(await r.arrayBuffer()));
        })
        .catch(() => res.writeHead(502).end());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

export async function startCallbackWorld(overrides: Record<string, string> = {}): Promise<CallbackWorld> {
  const sim = await startSimulator(testConfig());
  const providerReads: string[] = [];
  const proxy = await countingProxy(sim.baseUrl, providerReads);
  const config = testConfig({
    PROVIDER_REPLICATE_BASE_URL: `${proxy.url}/replicate`,
    PROVIDER_FAL_BASE_URL: `${proxy.url}/fal`,
    PROVIDER_FAL_JWKS_URL: `${sim.baseUrl}/fal/.well-known/jwks.json`,
    PROVIDER_KLING_BASE_URL: `${proxy.url}/kling`,
    // The local limiter: the same everywhere, whether or not a Redis runs here.
    REDIS_URL: '',
    ...overrides,
  });
  const tdb = await createTestDatabase(config);
  const api = await startApi(config, tdb.database);
  const tenant = await createTestTenant(tdb.database, config, '1000');
  const tokens = createCallbackTokens(config.CALLBACK_TOKEN_SECRET);
  const db = tdb.database.db;
  let seq = 0;
  return {
    config,
    sim,
    tdb,
    api,
    providerReads,
    async attempt(provider, opts = {}) {
      seq += 1;
      const created = await createTask(
        db,
        { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 },
        {
          tenantId: tenant.tenantId,
          idempotencyKey: `sec-${seq}-${Date.now()}`,
          body: { model: 'minimax/video-01', prompt: `security ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
        },
      );
      const taskId = created.task.task_id;
      const attemptId = attemptIdFor(taskId, 1);
      const jobId = opts.jobId ?? null;
      await db.insert(taskAttempt).values({
        attempt_id: attemptId,
        task_id: taskId,
        attempt_no: 1,
        provider,
        provider_model: opts.model ?? 'kling-v2-master',
        provider_job_id: jobId,
        submit_state: jobId ? 'SUBMITTED' : 'SUBMIT_UNKNOWN',
        submit_started_at: new Date(),
      });
      return { taskId, attemptId, token: tokens.tokenFor(attemptId) };
    },
    async inboxRows() {
      const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(callbackInbox);
      return row?.n ?? 0;
    },
    async attemptRow(attemptId) {
      const [row] = await db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attemptId));
      return row!;
    },
    async post(path, body, headers = {}) {
      const res = await fetch(`${api.baseUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
      const text = await res.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        /* keep text */
      }
      return { status: res.status, headers: res.headers, body: parsed };
    },
    async close() {
      await api.close();
      await new Promise<void>((resolve) => proxy.server.close(() => resolve()));
      await sim.close();
      await tdb.drop();
    },
  };
}
