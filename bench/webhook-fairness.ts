// `npm run bench -- webhook-fairness`: one tenant's tarpit receivers against another tenant's
// webhooks (issue #49, docs/webhooks.md "Retries", docs/performance.md). One relay in this process
// on a fresh database, no Temporal. Tenant B has one endpoint at a receiver that answers at once
// and makes one event every `--every` ms; its delivery time is the receipt less the event's
// commit. Measured twice on the same relay: with tenant A idle, then with A attacking: `--hung`
// endpoints at receivers that accept the connection and never answer, and `--events` events
// created first (one delivery per endpoint each, all due before B's). The relay has `--hung` ×
// WEBHOOK_ENDPOINT_CONCURRENCY slots, as many as A's tarpits could hold; a tenant may hold
// `--tenant-cap` of them. Printed: B's p50/p90/p99/max in both phases, side by side.
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { cancelTask, createTask } from '../api/tasks.service';
import { configToEnv, loadConfig, type Config } from '../config/env';
import { createDatabase, type Database } from '../db/client';
import { dropDatabase, migrateDatabase } from '../db/migrate';
import { addSigningSecret, createSecretBox } from '../db/webhook-secrets';
import { insertEndpoint } from '../db/webhooks';
import { sleep } from '../harness';
import { createLogger } from '../observability/logger';
import { createTenant } from '../ops/tenants';
import { startWebhookReceiver, type WebhookReceiver } from '../test/support/webhook-receiver';
import { startWebhookRelay, webhookRelaySettings } from '../workers/webhook-relay';
import type { Reporter } from './lib/report';
import { round, summarize, sortNumbers, type LatencySummary } from './lib/stats';

export interface WebhookFairnessOptions {
  /** Tenant A's endpoints at tarpit receivers. */
  readonly hung: number;
  /** Tenant A's events, created before B's first. */
  readonly events: number;
  /** B's events per phase. */
  readonly samples: number;
  /** Milliseconds between B's events. */
  readonly everyMs: number;
  /** WEBHOOK_TENANT_CONCURRENCY for the run. */
  readonly tenantCap: number;
}

const body = { model: 'minimax/video-01', prompt: 'webhook fairness', duration_seconds: 6, resolution: '720p' as const, priority: 0 };

/** Receivers that accept every connection and never answer (loopback). */
async function tarpit(): Promise<{ url: string; open: () => number; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
    socket.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/hook`,
    open: () => sockets.size,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

export async function runWebhookFairness(opts: WebhookFairnessOptions, report: Reporter): Promise<void> {
  const base = loadConfig(process.env);
  const url = new URL(base.DATABASE_URL);
  url.pathname = `/vidorch_bench_webhook_fairness_${process.pid}_${randomBytes(3).toString('hex')}`;
  const config: Config = loadConfig({
    ...configToEnv(base),
    DATABASE_URL: url.toString(),
    WEBHOOK_ALLOW_PRIVATE: 'true',
    WEBHOOK_RELAY_MAX_IN_FLIGHT: String(opts.hung * base.WEBHOOK_ENDPOINT_CONCURRENCY),
    WEBHOOK_TENANT_CONCURRENCY: String(opts.tenantCap),
    WEBHOOK_RELAY_RATE_PER_SECOND: '1000',
    REDIS_URL: '',
  });
  const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
  const token = { ...fence, epoch: 1 };
  await migrateDatabase({ url: config.DATABASE_URL, region: config.REGION, fenceScope: config.FENCE_SCOPE });
  const database: Database = createDatabase({ url: config.DATABASE_URL, max: 10, applicationName: 'vidorch-bench' });
  const db = database.db;
  const box = createSecretBox(config.WEBHOOK_SECRET_KEY);
  const cleanups: (() => Promise<unknown>)[] = [() => dropDatabase(config.DATABASE_URL), () => database.close()];
  let seq = 0;
  const tenant = async (urls: string[], secrets: string[] = []) => {
    const t = await createTenant(db, { name: `whf-${seq++}`, credits: '1000000', ifMissing: false, actor: 'bench', fence });
    for (const u of urls) {
      const endpoint = await insertEndpoint(db, { tenantId: t.tenant_id, url: u, description: null, events: null });
      secrets.push(await addSigningSecret(db, box, endpoint.endpoint_id));
    }
    return t.tenant_id;
  };
  /** One task.cancelled event; resolves at its commit with the task id. */
  const event = async (tenantId: string) => {
    const created = await createTask(db, token, {
      tenantId,
      idempotencyKey: `e-${seq++}`,
      body,
      defaultDeadlineSeconds: config.TASK_DEADLINE_SECONDS,
      webhookAllowPrivate: true,
      webhookMaxOrigins: config.WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT,
    });
    await cancelTask(db, token, tenantId, created.task.task_id);
    return created.task.task_id;
  };
  try {
    const relay = startWebhookRelay({
      db,
      fence,
      secrets: box,
      publicBaseUrl: 'https://api.example.com',
      logger: createLogger({ name: 'bench-webhook-fairness', level: 'error', pretty: false }),
      settings: webhookRelaySettings(config),
    });
    cleanups.unshift(() => relay.stop());

    /** B's delivery times over `samples` events, one every `everyMs`. */
    const measureB = async (phase: string): Promise<LatencySummary> => {
      const secrets: string[] = [];
      const receiver: WebhookReceiver = await startWebhookReceiver({ port: 0, secrets: () => secrets });
      cleanups.unshift(() => receiver.close());
      const b = await tenant([`${receiver.baseUrl}/b`], secrets);
      const committed = new Map<string, number>();
      for (let i = 0; i < opts.samples; i += 1) {
        const taskId = await event(b);
        committed.set(taskId, Date.now());
        await sleep(opts.everyMs);
      }
      const deadline = Date.now() + 120_000;
      while (receiver.received.length < opts.samples && Date.now() < deadline) await sleep(50);
      const taskOf = (r: (typeof receiver.received)[number]) => String((r.body as { data?: { task_id?: unknown } } | null)?.data?.task_id);
      const delays = receiver.received.map((r) => r.at - (committed.get(taskOf(r)) ?? r.at));
      if (delays.length < opts.samples) report.log(`${phase}: only ${delays.length} of ${opts.samples} of B's deliveries arrived in 120 s`);
      const s = summarize(sortNumbers(delays));
      report.log(`${phase}: B's ${s.count} deliveries, p50 ${round(s.p50)} ms, p99 ${round(s.p99)} ms`);
      return s;
    };

    report.log(`phase 1: tenant A idle; B makes ${opts.samples} events, one every ${opts.everyMs} ms`);
    const idle = await measureB('A idle');

    report.log(`phase 2: tenant A with ${opts.hung} hung endpoints and ${opts.events} events due first`);
    const pits = await Promise.all(Array.from({ length: opts.hung }, () => tarpit()));
    for (const p of pits) cleanups.unshift(() => p.close());
    const a = await tenant(pits.map((p) => p.url));
    for (let i = 0; i < opts.events; i += 1) await event(a);
    const openToA = () => pits.reduce((n, p) => n + p.open(), 0);
    const holding = Date.now() + 30_000;
    while (openToA() < Math.min(opts.tenantCap, opts.hung * config.WEBHOOK_ENDPOINT_CONCURRENCY) && Date.now() < holding) await sleep(20);
    report.log(`A's receivers hold ${openToA()} connections of the relay's ${config.WEBHOOK_RELAY_MAX_IN_FLIGHT} slots`);
    const attacked = await measureB('A attacking');
    report.log(`A's receivers held ${openToA()} connections at the end (attempt timeout ${config.WEBHOOK_ATTEMPT_TIMEOUT_MS} ms)`);

    report.table(
      `B's delivery time (event commit → receipt), ms — relay: ${config.WEBHOOK_RELAY_MAX_IN_FLIGHT} slots, tenant cap ${opts.tenantCap}, ${config.WEBHOOK_RELAY_CLAIM_PER_TENANT} per tenant per pass, pass every ${config.WEBHOOK_RELAY_INTERVAL_MS} ms`,
      ['B', 'deliveries', 'p50', 'p90', 'p99', 'max'],
      [
        ['A idle', idle.count, round(idle.p50), round(idle.p90), round(idle.p99), round(idle.max)],
        [
          `A attacking (${opts.hung} hung endpoints, ${opts.events} events)`,
          attacked.count,
          round(attacked.p50),
          round(attacked.p90),
          round(attacked.p99),
          round(attacked.max),
        ],
      ],
    );
    report.result({
      settings: { slots: config.WEBHOOK_RELAY_MAX_IN_FLIGHT, tenantCap: opts.tenantCap, hung: opts.hung, events: opts.events, samples: opts.samples },
      idle: { p50: idle.p50, p90: idle.p90, p99: idle.p99, max: idle.max, count: idle.count },
      attacking: { p50: attacked.p50, p90: attacked.p90, p99: attacked.p99, max: attacked.max, count: attacked.count },
    });
  } finally {
    for (const c of cleanups) await c().catch(() => undefined);
  }
}
