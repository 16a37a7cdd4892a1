// `npm run bench -- metrics-load`: metric scrapes must not starve creates (docs/
// performance.md "Metrics without load"). Over a ledger of N closed tasks (seeded with one
// INSERT … SELECT generate_series), S scrapers loop on the operator listener's /metrics while
// one client creates C tasks; the API's request pool is sampled every 2 ms. Goals: no create
// answered 503, the pool never had a waiter. An in-process API (the same listeners as
// `npm run api`) so its pool can be watched directly; loopback only.
import { randomBytes } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import { buildApiContext } from '../api/context';
import { serveApi } from '../api/listen';
import { configToEnv, loadConfig, type Config } from '../config/env';
import { createDatabase } from '../db/client';
import { dropDatabase, migrateDatabase } from '../db/migrate';
import { startFactSampler } from '../observability/facts';
import { createLogger, type Logger } from '../observability/logger';
import { createMetrics } from '../observability/metrics';
import { createTenant } from '../ops/tenants';
import { createGenerationFacade } from '../temporal/facade';
import { seedClosedTasks } from './lib/closed-ledger';
import { assertLoopback, createHttpClient, createTaskClient } from './lib/http';
import { createTask } from './lib/tasks';
import type { Reporter } from './lib/report';
import { percentile, round, sortNumbers } from './lib/stats';

export interface MetricsLoadOptions {
  readonly closedTasks: number;
  readonly scrapers: number;
  readonly creates: number;
  /** Base config (tests pass theirs; the bench reads the environment). */
  readonly config?: Config;
  readonly logger?: Logger;
  readonly log?: (line: string) => void;
}

export interface MetricsLoadResult {
  readonly closedTasks: number;
  readonly seedMs: number;
  readonly scrapers: number;
  readonly scrapes: number;
  readonly scrapeErrors: number;
  readonly scrapeP50Ms: number;
  readonly scrapeP99Ms: number;
  /** Create answers by HTTP status. */
  readonly creates: Record<string, number>;
  readonly createP50Ms: number;
  readonly createP99Ms: number;
  readonly poolMax: number;
  /** The most callers ever seen waiting for a connection of the API's request pool. */
  readonly poolMaxWaiting: number;
  readonly poolSamples: number;
  /** The fact sampler's last pass, on its own connection. */
  readonly factsPassMs: number | null;
  /** Status of /metrics on the public port (404: not served there). */
  readonly publicMetricsStatus: number;
}

const taskBody = { model: 'minimax/video-01', prompt: 'metrics under load', duration_seconds: 6, resolution: '720p' } as const;

export async function metricsLoad(opts: MetricsLoadOptions): Promise<MetricsLoadResult> {
  const log = opts.log ?? (() => undefined);
  const base = opts.config ?? loadConfig(process.env);
  const url = new URL(base.DATABASE_URL);
  url.pathname = `/vidorch_metrics_load_${process.pid}_${randomBytes(3).toString('hex')}`;
  const config = loadConfig({
    ...configToEnv(base),
    DATABASE_URL: url.toString(),
    TENANT_CREATE_RATE_PER_SECOND: '1000000',
    REDIS_URL: '',
  });
  const logger = opts.logger ?? createLogger({ name: 'metrics-load', level: 'error', pretty: false });
  await migrateDatabase({ url: config.DATABASE_URL, region: config.REGION, fenceScope: config.FENCE_SCOPE });
  const database = createDatabase({ url: config.DATABASE_URL, max: config.DATABASE_POOL_MAX, applicationName: 'vidorch-api' });
  const cleanups: (() => Promise<unknown>)[] = [() => dropDatabase(config.DATABASE_URL), () => database.close()];
  try {
    const tenant = await createTenant(database.db, {
      name: 'load',
      credits: '1000000',
      ifMissing: false,
      actor: 'bench',
      fence: { scope: config.FENCE_SCOPE, region: config.REGION },
    });
    const seedStart = Date.now();
    await seedClosedTasks(database.db, { tenantId: tenant.tenant_id, region: config.REGION, n: opts.closedTasks });
    const seedMs = Date.now() - seedStart;
    log(`seeded ${opts.closedTasks} closed tasks (${opts.closedTasks * 3} ledger rows) in ${(seedMs / 1000).toFixed(1)} s`);

    const facts = startFactSampler({
      databaseUrl: config.DATABASE_URL,
      intervalMs: config.METRICS_FACTS_INTERVAL_MS,
      logger,
      applicationName: 'vidorch-api-facts',
    });
    cleanups.unshift(() => facts.stop());
    // No Temporal here: each create's fast path fails and the outbox keeps the start, as in an outage.
    const facade = createGenerationFacade(async () => {
      throw new Error('no Temporal in this benchmark');
    }, config.TEMPORAL_TASK_QUEUE);
    const ctx = buildApiContext(config, {
      db: database.db,
      facade,
      logger,
      metrics: createMetrics({ service: 'api', facts: facts.latest, pool: database.pool }),
    });
    cleanups.unshift(() => ctx.close());
    const served = await serveApi(ctx);
    cleanups.unshift(() => served.close());
    await facts.refresh();

    const api = createHttpClient(served.url, 4);
    cleanups.unshift(async () => api.close());
    const publicMetricsStatus = (await api.request('GET', '/metrics')).status;
    const tasks = createTaskClient(served.url, 4, { timeoutMs: 30_000 });
    cleanups.unshift(async () => tasks.close());
    const vidorch = tasks.as(tenant.api_key!);

    let poolMaxWaiting = 0;
    let poolSamples = 0;
    const watch = setInterval(() => {
      poolSamples += 1;
      poolMaxWaiting = Math.max(poolMaxWaiting, database.pool.waitingCount);
    }, 2);
    const scrapers = startScrapers(`${served.opsUrl}/metrics`, opts.scrapers);
    const creates: Record<string, number> = {};
    const createMs: number[] = [];
    for (let i = 0; i < opts.creates; i += 1) {
      const t0 = performance.now();
      const r = await createTask(vidorch, `load-${i}`, taskBody);
      createMs.push(performance.now() - t0);
      creates[String(r.status)] = (creates[String(r.status)] ?? 0) + 1;
    }
    const { scrapeMs, scrapeErrors } = await scrapers.stop();
    clearInterval(watch);
    const scrapes = sortNumbers(scrapeMs);
    const createTimes = sortNumbers(createMs);
    return {
      closedTasks: opts.closedTasks,
      seedMs,
      scrapers: opts.scrapers,
      scrapes: scrapeMs.length,
      scrapeErrors,
      scrapeP50Ms: round(percentile(scrapes, 50)),
      scrapeP99Ms: round(percentile(scrapes, 99)),
      creates,
      createP50Ms: round(percentile(createTimes, 50)),
      createP99Ms: round(percentile(createTimes, 99)),
      poolMax: config.DATABASE_POOL_MAX,
      poolMaxWaiting,
      poolSamples,
      factsPassMs: facts.latest()?.durationMs ?? null,
      publicMetricsStatus,
    };
  } finally {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
  }
}

// The scrapers run on a thread of their own: their HTTP parsing is not the API's event loop's
// work, as with a real scraper in another process.
const SCRAPER = `
const { workerData, parentPort } = require('node:worker_threads');
let done = false;
parentPort.on('message', () => { done = true; });
const times = [];
let errors = 0;
const loop = async () => {
  while (!done) {
    const t0 = performance.now();
    try {
      const r = await fetch(workerData.url);
      await r.text();
      if (r.status !== 200) errors += 1;
    } catch { errors += 1; }
    times.push(performance.now() - t0);
  }
};
Promise.all(Array.from({ length: workerData.n }, loop)).then(() => parentPort.postMessage({ times, errors }));
`;

function startScrapers(url: string, n: number): { stop(): Promise<{ scrapeMs: number[]; scrapeErrors: number }> } {
  assertLoopback(url);
  const worker = new Worker(SCRAPER, { eval: true, workerData: { url, n } });
  const result = new Promise<{ scrapeMs: number[]; scrapeErrors: number }>((resolve, reject) => {
    worker.once('message', (m: { times: number[]; errors: number }) => resolve({ scrapeMs: m.times, scrapeErrors: m.errors }));
    worker.once('error', reject);
  });
  return {
    async stop() {
      worker.postMessage('stop');
      const r = await result;
      await worker.terminate();
      return r;
    },
  };
}

export async function runMetricsLoad(opts: { closedTasks: number; scrapers: number; creates: number }, report: Reporter): Promise<void> {
  const r = await metricsLoad({ ...opts, log: (line) => report.log(`metrics-load: ${line}`) });
  report.table(
    `metrics-load: ${r.scrapers} scrapers on the operator listener while creating ${opts.creates} tasks over ${r.closedTasks} closed tasks`,
    [
      'scrapes',
      'scrape p50 ms',
      'scrape p99 ms',
      'creates by status',
      'create p50 ms',
      'create p99 ms',
      'pool max waiting',
      'pool samples',
      'facts pass ms',
      'public /metrics',
    ],
    [
      [
        r.scrapes,
        r.scrapeP50Ms,
        r.scrapeP99Ms,
        JSON.stringify(r.creates),
        r.createP50Ms,
        r.createP99Ms,
        r.poolMaxWaiting,
        r.poolSamples,
        r.factsPassMs,
        r.publicMetricsStatus,
      ],
    ],
  );
  const unavailable = r.creates['503'] ?? 0;
  report.goals([
    { name: 'creates answered 503', target: '0', measured: String(unavailable), met: unavailable === 0 },
    { name: 'API pool callers waiting (max)', target: '0', measured: String(r.poolMaxWaiting), met: r.poolMaxWaiting === 0 },
    { name: 'every create accepted', target: String(opts.creates), measured: String(r.creates['202'] ?? 0), met: (r.creates['202'] ?? 0) === opts.creates },
  ]);
  report.result({ benchmark: 'metrics-load', ...r });
}
