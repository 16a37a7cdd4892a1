// `npm run drill -- production`: a production rehearsal. Temporal as production runs it (the
// server built from go.temporal.io/server on PostgreSQL persistence and visibility; `--temporal
// dev` runs the same on the CLI's dev server for comparison), the product from its build (`npm
// run build`: node dist/*.js, no tsx), the migration job first, two API processes and three worker
// processes under Worker Versioning; tasks created across both APIs with webhooks dropped for a
// while; mid-run a rolling deploy of a new worker build (ramp, then current: docs/deploy.md) and a
// SIGKILL of one old-build worker. Reports lost tasks, second provider jobs, the ledger, the tasks
// each build ran, create and end-to-end latency before, during and after the deploy, and tasks/s.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { configToEnv, loadConfig } from '../../config/env';
import {
  REPO_ROOT,
  TEMPORAL_SERVER_VERSION,
  fileLogger,
  freePort,
  launch,
  nodeBinary,
  readToolPaths,
  runCommand,
  sleep,
  startS3,
  startTemporal,
  startTemporalServer,
  dropTemporalServerDatabases,
  type ManagedProcess,
} from '../../harness';
import { connectTemporal, createWorldDatabase, createWorldTenant, simulatorProviderSettings, startSimulator } from '../../harness/world';
import { createLogger } from '../../observability/logger';
import { describeDeployment, runningOn, setCurrentVersion, setRampingVersion } from '../../ops/deploy';
import { tenantLedgerCheck } from './ledger-check';

export interface ProductionDrillOptions {
  readonly tasks: number;
  readonly temporal: 'server' | 'dev';
  readonly ratePerSecond: number;
}

const percentile = (xs: number[], p: number) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};

/** go install of the server and temporal-sql-tool into the cache (as scripts/setup.sh builds its tools), once. */
async function serverBinaries(log: (l: string) => void): Promise<{ server: string; sql: string; schemaDir: string }> {
  const bin = path.join(process.env['VIDORCH_CACHE_DIR'] ?? path.join(os.homedir(), '.cache', 'vidorch'), 'bin');
  const go = fs.existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go';
  for (const [pkg, name] of [
    ['go.temporal.io/server/cmd/server', 'server'],
    ['go.temporal.io/server/cmd/tools/sql', 'sql'],
  ] as const) {
    if (fs.existsSync(path.join(bin, name))) continue;
    log(`building ${pkg}@${TEMPORAL_SERVER_VERSION} into ${bin} (minutes, once)`);
    const r = await runCommand(go, ['install', `${pkg}@${TEMPORAL_SERVER_VERSION}`], { ...process.env, GOBIN: bin }, { timeoutMs: 30 * 60_000 });
    if (r.code !== 0) throw new Error(`go install ${pkg} failed: ${r.stderr.trim().split('\n').slice(-3).join(' | ')}`);
  }
  const modCache = (await runCommand(go, ['env', 'GOMODCACHE'], process.env, { timeoutMs: 30_000 })).stdout.trim();
  const schemaDir = path.join(modCache, `go.temporal.io/server@${TEMPORAL_SERVER_VERSION}`, 'schema', 'postgresql', 'v12');
  if (!fs.existsSync(schemaDir)) throw new Error(`no schema at ${schemaDir}`);
  return { server: path.join(bin, 'server'), sql: path.join(bin, 'sql'), schemaDir };
}

export async function runProductionDrill(opts: ProductionDrillOptions, log: (line: string) => void) {
  const buildId = fs.readFileSync(path.join(REPO_ROOT, 'dist', 'build-id'), 'utf8').trim();
  const id = `production_${randomBytes(3).toString('hex')}`;
  const dataDir = path.join(REPO_ROOT, '.data', 'drill', id);
  fs.mkdirSync(dataDir, { recursive: true });
  const cleanups: (() => Promise<unknown>)[] = [];
  const quiet = () => undefined;
  try {
    const tools = readToolPaths();
    const port = await freePort();
    log(`Temporal: ${opts.temporal === 'server' ? `server ${TEMPORAL_SERVER_VERSION} from its Go module on PostgreSQL` : 'the CLI dev server'}`);
    const temporal =
      opts.temporal === 'server'
        ? await (async () => {
            const b = await serverBinaries(log);
            const databases = { postgres: { host: '127.0.0.1', port: 5432, user: 'postgres' }, databasePrefix: `temporal_${id}`, sqlToolPath: b.sql };
            cleanups.push(() => dropTemporalServerDatabases(databases));
            return startTemporalServer({
              ...databases,
              port,
              dataDir: path.join(dataDir, 'temporal'),
              serverPath: b.server,
              schemaDir: b.schemaDir,
              temporalPath: tools.temporal,
              log: fileLogger(path.join(dataDir, 'temporal.log')),
            });
          })()
        : await startTemporal({ port, headless: true, log: quiet });
    cleanups.push(() => temporal.stop());
    const base = loadConfig({ ...process.env, TENANT_CREATE_RATE_PER_SECOND: '100000', TENANT_READ_RATE_PER_SECOND: '100000' });
    const s3 = await startS3({
      port: await freePort(),
      dataDir: path.join(dataDir, 's3'),
      accessKey: base.S3_ACCESS_KEY_ID,
      secretKey: base.S3_SECRET_ACCESS_KEY,
      buckets: [base.S3_BUCKET_OUTPUTS],
      log: quiet,
    });
    cleanups.push(() => s3.stop());
    const s3b = await startS3({
      port: await freePort(),
      dataDir: path.join(dataDir, 's3-fallback'),
      accessKey: base.S3_FALLBACK_ACCESS_KEY_ID,
      secretKey: base.S3_FALLBACK_SECRET_ACCESS_KEY,
      buckets: [base.S3_FALLBACK_BUCKET],
      log: quiet,
    });
    cleanups.push(() => s3b.stop());
    const simulator = await startSimulator(base, {
      logger: createLogger({ name: 'drill-production', level: 'error', pretty: false }),
      generationMs: base.SIMULATOR_GENERATION_MS,
      dataDir: path.join(REPO_ROOT, '.data', 'simulator'),
    });
    cleanups.push(() => simulator.close());
    const wdb = await createWorldDatabase(base, { prefix: 'vidorch_drill_production', max: 10, applicationName: 'vidorch-drill' });
    cleanups.push(() => wdb.drop());
    const apiPorts = [await freePort(), await freePort()];
    const config = loadConfig({
      ...process.env,
      TENANT_CREATE_RATE_PER_SECOND: '100000',
      TENANT_READ_RATE_PER_SECOND: '100000',
      DATABASE_URL: wdb.url,
      TEMPORAL_ADDRESS: temporal.address,
      TEMPORAL_TASK_QUEUE: `generation-${id}`,
      S3_ENDPOINT: s3.endpoint,
      S3_FALLBACK_ENDPOINT: s3b.endpoint,
      ...simulatorProviderSettings(simulator.baseUrl),
      PUBLIC_BASE_URL: `http://127.0.0.1:${apiPorts[0]}`,
      OUTPUT_FETCH_ALLOW_PRIVATE: 'true',
      WEBHOOK_ALLOW_PRIVATE: 'true',
      CALLBACK_SPOOL_DIR: path.join(dataDir, 'spool'),
      // Eight processes on a Postgres that other work shares: small pools.
      DATABASE_POOL_MAX: '3',
    });
    const env = { ...configToEnv(config), VIDORCH_ENV: 'development', LOG_LEVEL: 'warn', LOG_PRETTY: 'false' };
    const node = nodeBinary();
    const run = (name: string, script: string, extra: Record<string, string>): ManagedProcess => {
      const p = launch(name, node, [path.join(REPO_ROOT, 'dist', script)], {
        env: { ...process.env, ...env, ...extra },
        log: fileLogger(path.join(dataDir, `${name}.log`)),
      });
      cleanups.push(() => p.stop('SIGTERM', 40_000));
      return p;
    };

    // The release: the migration job first, to completion.
    const migrate = run('migrate', 'migrate.js', {});
    const migrated = await migrate.exited;
    log(`migration job exited ${migrated.code}`);
    if (migrated.code !== 0) throw new Error('the migration job failed');

    const deploymentName = `vidorch-${id}`;
    const workerEnv = async (build: string) => ({
      WORKER_VERSIONING: 'true',
      WORKER_DEPLOYMENT_NAME: deploymentName,
      WORKER_BUILD_ID: build,
      WORKER_METRICS_PORT: String(await freePort()),
      WORKER_SHUTDOWN_GRACE_MS: '20000',
    });
    const apis = await Promise.all(apiPorts.map(async (p, i) => run(`api-${i + 1}`, 'api.js', { PORT: String(p), OPS_PORT: String(await freePort()) })));
    const oldWorkers = await Promise.all([1, 2, 3].map(async (i) => run(`worker-a${i}`, 'worker.js', await workerEnv(buildId))));
    const { client, close } = await connectTemporal(config);
    cleanups.push(close);
    const target = { client, namespace: config.TEMPORAL_NAMESPACE, deploymentName, identity: 'operator:drill' };
    const retry = async (what: () => Promise<unknown>, label: string) => {
      for (const deadline = Date.now() + 180_000; ;) {
        try {
          return await what();
        } catch (err) {
          if (Date.now() > deadline) throw new Error(`${label}: ${(err as Error).message}`);
          await sleep(1_000);
        }
      }
    };
    await retry(() => setCurrentVersion(target, buildId), 'set the first build current');
    for (const [i, p] of apiPorts.entries()) {
      await retry(
        async () => {
          if (!(await fetch(`http://127.0.0.1:${p}/healthz`)).ok) throw new Error(`api-${i + 1} not healthy`);
        },
        `api-${i + 1}`,
      );
    }
    log(`build ${buildId} current: 2 APIs, 3 workers, from dist/ with node ${process.versions.node}`);
    const tenant = await createWorldTenant(wdb.database, config, { name: `drill-${id}`, credits: '1000000', actor: 'drill' });

    // The load: every create through one of the two APIs, its latency by phase.
    let phase = 'before';
    const created: { id: string; at: number; phase: string }[] = [];
    const createMs: Record<string, number[]> = { before: [], during: [], after: [] };
    let refused = 0;
    const started = Date.now();
    const load = (async () => {
      const inFlight = new Set<Promise<void>>();
      for (let i = 0; i < opts.tasks; i++) {
        // The last third only once the new build is current: the tasks it must take.
        if (i >= (2 * opts.tasks) / 3) await until(() => phase === 'after');
        const t0 = Date.now();
        const p = (async () => {
          const res = await fetch(`http://127.0.0.1:${apiPorts[i % 2]}/v1/tasks`, {
            method: 'POST',
            headers: { authorization: `Bearer ${tenant.apiKey}`, 'idempotency-key': `prod-${i}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'minimax/video-01', prompt: `rehearsal ${i}`, duration_seconds: 6, resolution: '720p' }),
            signal: AbortSignal.timeout(30_000),
          }).catch(() => null);
          const body = (await res?.json().catch(() => null)) as { task_id?: string } | null;
          if (res?.status === 202 && body?.task_id) {
            created.push({ id: body.task_id, at: Date.now(), phase });
            createMs[phase]!.push(Date.now() - t0);
          } else refused += 1;
        })().finally(() => inFlight.delete(p));
        inFlight.add(p);
        await sleep(1000 / opts.ratePerSecond);
      }
      await Promise.allSettled([...inFlight]);
    })();

    // Webhooks dropped for the second third of the creates: those tasks learn of their jobs by polling.
    await until(() => created.length >= opts.tasks / 3);
    simulator.sim.setFaults({ callbacks: 'off' });
    log('webhooks dropped');
    // The rolling deploy: the new build's three workers beside the old ones, a ramp, then current.
    phase = 'during';
    const deployAt = Date.now();
    const nextBuild = `${buildId}-next`;
    const newWorkers = await Promise.all([1, 2, 3].map(async (i) => run(`worker-b${i}`, 'worker.js', await workerEnv(nextBuild))));
    await retry(() => setRampingVersion(target, nextBuild, 50), 'ramp the new build');
    log(`ramping ${nextBuild} at 50%`);
    await sleep(10_000);
    await retry(() => setCurrentVersion(target, nextBuild), 'set the new build current');
    log(`${nextBuild} current; SIGKILL worker-a1`);
    await oldWorkers[0]!.stop('SIGKILL', 1_000);
    const deployedAt = Date.now();
    await until(() => created.length >= Math.floor((2 * opts.tasks) / 3));
    simulator.sim.clearFaults();
    phase = 'after';
    log('webhooks back');
    await load;

    // Every accepted task ends (or parks in review) within the deadline.
    const ids = created.map((c) => c.id);
    const endedAt = new Map<string, number>();
    const deadline = Date.now() + 15 * 60_000;
    while (Date.now() < deadline) {
      const { rows } = await wdb.database.db.execute(sql`
        SELECT task_id::text AS id, status, extract(epoch FROM coalesce(terminal_at, updated_at)) * 1000 AS at FROM generation_task
        WHERE task_id::text IN ${ids} AND (terminal_at IS NOT NULL OR status = 'MANUAL_REVIEW')`);
      for (const r of rows as { id: string; at: number }[]) if (!endedAt.has(r.id)) endedAt.set(r.id, Number(r.at));
      if (endedAt.size >= ids.length) break;
      await sleep(2_000);
    }
    const finishedAt = Math.max(...endedAt.values());
    // The old build's workers go once it holds nothing (docs/deploy.md "Drain").
    const oldRunning = await runningOn(client, deploymentName, buildId);
    for (const w of oldWorkers.slice(1)) await w.stop('SIGTERM', 40_000);

    const { rows: statusRows } = await wdb.database.db.execute(sql`
      SELECT status, count(*)::int AS n FROM generation_task WHERE task_id::text IN ${ids} GROUP BY status ORDER BY status`);
    const byStatus = Object.fromEntries((statusRows as { status: string; n: number }[]).map((r) => [r.status, r.n]));
    const jobs = Object.values(simulator.sim.stats().by_token);
    const count = async (b: string) =>
      (await client.workflow.count(`TemporalWorkerDeploymentVersion = '${deploymentName}:${b}' AND WorkflowType = 'generationWorkflow'`)).count;
    const e2e = (p: string) =>
      percentile(
        created.filter((c) => c.phase === p && endedAt.has(c.id)).map((c) => endedAt.get(c.id)! - c.at),
        50,
      );
    const state = await describeDeployment(client, config.TEMPORAL_NAMESPACE, deploymentName);
    await Promise.all([...apis, ...newWorkers].map((p) => p.stop('SIGTERM', 40_000)));
    return {
      temporal: opts.temporal,
      accepted: ids.length,
      refused,
      lost: ids.length - endedAt.size,
      byStatus,
      secondJobs: jobs.filter((n) => n > 1).length,
      ledger: await tenantLedgerCheck(wdb.database.db),
      tasksPerBuild: { [buildId]: await count(buildId), [nextBuild]: await count(nextBuild) },
      oldBuildRunningAtEnd: oldRunning,
      deployment: state ? { current: state.current, versions: state.versions.map((v) => `${v.buildId}:${v.status}`) } : null,
      deploySeconds: Math.round((deployedAt - deployAt) / 100) / 10,
      createP50Ms: { before: percentile(createMs['before']!, 50), during: percentile(createMs['during']!, 50), after: percentile(createMs['after']!, 50) },
      createP95Ms: { before: percentile(createMs['before']!, 95), during: percentile(createMs['during']!, 95), after: percentile(createMs['after']!, 95) },
      endToEndP50Ms: { before: e2e('before'), during: e2e('during'), after: e2e('after') },
      tasksPerSecond: Math.round((endedAt.size / ((finishedAt - started) / 1000)) * 100) / 100,
      load: os.loadavg().map((l) => Math.round(l * 10) / 10),
      dataDir,
    };
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  }
}

async function until(check: () => boolean): Promise<void> {
  while (!check()) await sleep(250);
}
