// `npm run dev`: the whole local stack in the foreground.
//
//   Temporal dev server (+ Web UI)   TEMPORAL_ADDRESS / TEMPORAL_UI_URL   127.0.0.1:7233 / :8233
//   S3 (versitygw)                   S3_ENDPOINT                          127.0.0.1:7070
//   fallback S3 (a second versitygw) S3_FALLBACK_ENDPOINT                 127.0.0.1:7071
//   provider simulator               SIMULATOR_PORT                       127.0.0.1:7081
//   API                              PORT                                 127.0.0.1:3000
//   API operator listener            OPS_PORT                             127.0.0.1:9463
//   worker operator listener         WORKER_METRICS_PORT                  127.0.0.1:9464
//
// Ports and credentials come from the same variables as config/env.ts (and its defaults).
// State lives in .data/dev/ (VIDORCH_DEV_DIR overrides): temporal.db keeps workflows across
// restarts, s3/ and s3-fallback/ hold the objects, demo-api-key the demo tenant's key.
// Ctrl-C / SIGTERM stops API, worker, simulator, then S3 and Temporal. If any process dies on
// its own, everything is stopped and the exit code is 1.
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ConfigError, loadConfig, type Config } from '../config/env';
import {
  REPO_ROOT,
  describeExit,
  formatMs,
  isPortFree,
  readToolPaths,
  runNodeScript,
  sleep,
  startNodeProcess,
  startWorkerProcess,
  startS3,
  startTemporal,
  waitForHttp,
  waitForTcp,
  type ManagedProcess,
} from '../harness';

const started = Date.now();
const DEV_DIR = path.resolve(REPO_ROOT, process.env.VIDORCH_DEV_DIR || path.join('.data', 'dev'));
const ENTRY = {
  api: 'api/server.ts',
  worker: 'workers/main.ts',
  simulator: 'providers/simulator/main.ts',
  cli: 'ops/cli.ts',
} as const;

function say(msg: string): void {
  process.stdout.write(`dev: ${msg}\n`);
}

function portOf(url: string, fallback: number): number {
  const u = new URL(url.includes('://') ? url : `tcp://${url}`);
  return u.port ? Number(u.port) : fallback;
}

function loadConfigOrExit(): Config {
  try {
    // The local stack's dev values; without the flag the production profile would refuse them.
    return loadConfig({ VIDORCH_ENV: 'development', ...process.env });
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const issue of err.issues) console.error(`config: ${issue.field}: ${issue.message}`);
      process.exit(2);
    }
    throw err;
  }
}

/** The demo tenant's key: DEMO_API_KEY, else one generated once per dev data dir. */
function demoApiKey(): string {
  if (process.env.DEMO_API_KEY) return process.env.DEMO_API_KEY;
  const file = path.join(DEV_DIR, 'demo-api-key');
  if (fs.existsSync(file)) {
    const key = fs.readFileSync(file, 'utf8').trim();
    if (key) return key;
  }
  const key = `vk_demo_${randomBytes(24).toString('base64url')}`;
  fs.writeFileSync(file, `${key}\n`, { mode: 0o600 });
  return key;
}

const config = loadConfigOrExit();
const ports = {
  temporal: portOf(config.TEMPORAL_ADDRESS, 7233),
  ui: portOf(config.TEMPORAL_UI_URL, 8233),
  s3: portOf(config.S3_ENDPOINT, 7070),
  s3Fallback: config.S3_FALLBACK_ENDPOINT ? portOf(config.S3_FALLBACK_ENDPOINT, 7071) : null,
  simulator: config.SIMULATOR_PORT,
  api: config.PORT,
  metrics: config.WORKER_METRICS_PORT,
  apiOps: config.OPS_PORT,
};
const externalProvider = Boolean(process.env.PROVIDER_REPLICATE_BASE_URL);
const urls = {
  api: `http://127.0.0.1:${ports.api}`,
  temporalUi: `http://127.0.0.1:${ports.ui}`,
  s3: `http://127.0.0.1:${ports.s3}`,
  s3Fallback: ports.s3Fallback ? `http://127.0.0.1:${ports.s3Fallback}` : '',
  simulator: `http://127.0.0.1:${ports.simulator}`,
  metrics: `http://127.0.0.1:${ports.metrics}/metrics`,
  apiMetrics: `http://127.0.0.1:${ports.apiOps}/metrics`,
  replicate: externalProvider ? config.PROVIDER_REPLICATE_BASE_URL : `http://127.0.0.1:${ports.simulator}/replicate`,
};

// --- lifecycle ------------------------------------------------------------------------------

const procs: {
  temporal?: ManagedProcess;
  s3?: ManagedProcess;
  s3Fallback?: ManagedProcess;
  simulator?: ManagedProcess;
  api?: ManagedProcess;
  worker?: ManagedProcess;
} = {};
let shuttingDown: Promise<never> | undefined;

function shutdown(code: number, reason?: string): Promise<never> {
  shuttingDown ??= (async () => {
    if (reason) say(reason);
    say('stopping ...');
    const grace = config.WORKER_SHUTDOWN_GRACE_MS + 5_000;
    await procs.api?.stop('SIGTERM', 10_000);
    await procs.worker?.stop('SIGTERM', grace);
    await procs.simulator?.stop('SIGTERM', 5_000);
    await Promise.all([procs.s3?.stop('SIGTERM', 10_000), procs.s3Fallback?.stop('SIGTERM', 10_000), procs.temporal?.stop('SIGTERM', 10_000)]);
    say('stopped');
    process.exit(code);
  })();
  return shuttingDown;
}

let signals = 0;
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => {
    // tsx relays the terminal's SIGINT too, so one Ctrl-C arrives twice; a third signal forces.
    signals += 1;
    if (signals >= 3) {
      say('forced exit');
      process.exit(130); // the exit hook in stack.ts SIGKILLs every child
    }
    void shutdown(0, signals === 1 ? `${signal} received` : undefined);
  });
}

/** Registers a started process: an exit we did not ask for brings the whole stack down. */
function watch<T extends ManagedProcess>(key: keyof typeof procs, proc: T): T {
  procs[key] = proc;
  void proc.exited.then((info) => {
    if (!shuttingDown) void shutdown(1, `${proc.name} exited unexpectedly (${describeExit(info)}); shutting everything down`);
  });
  return proc;
}

// --- start ----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const tools = readToolPaths();
  fs.mkdirSync(DEV_DIR, { recursive: true });

  const present = (file: string) => fs.existsSync(path.join(REPO_ROOT, file));
  const missing = Object.values(ENTRY).filter((f) => !present(f));
  for (const f of missing) say(`WARNING: ${f} does not exist yet; its part of the stack is skipped`);

  // Fail fast, and clearly, when a port is taken (e.g. another `npm run dev`).
  const wanted: [string, number][] = [
    ['Temporal gRPC (TEMPORAL_ADDRESS)', ports.temporal],
    ['Temporal UI (TEMPORAL_UI_URL)', ports.ui],
    ['S3 (S3_ENDPOINT)', ports.s3],
    ...(ports.s3Fallback ? ([['fallback S3 (S3_FALLBACK_ENDPOINT)', ports.s3Fallback]] as [string, number][]) : []),
    ['API (PORT)', ports.api],
    ['worker metrics (WORKER_METRICS_PORT)', ports.metrics],
    ['API operator listener (OPS_PORT)', ports.apiOps],
  ];
  if (!externalProvider) wanted.push(['simulator (SIMULATOR_PORT)', ports.simulator]);
  for (const [what, port] of wanted) {
    if (!(await isPortFree(port))) {
      throw new Error(`port ${port} for ${what} is already in use (another \`npm run dev\`?); stop it or set that variable`);
    }
  }

  say(`starting Temporal (${config.TEMPORAL_ADDRESS}) and S3 (${urls.s3}); data in ${path.relative(REPO_ROOT, DEV_DIR)}/`);
  const t0 = Date.now();
  const [temporal, s3, s3Fallback] = await Promise.allSettled([
    startTemporal({
      port: ports.temporal,
      uiPort: ports.ui,
      dbFile: path.join(DEV_DIR, 'temporal.db'),
      namespace: config.TEMPORAL_NAMESPACE,
      temporalPath: tools.temporal,
      retentionHours: config.TEMPORAL_NAMESPACE_RETENTION_HOURS,
    }),
    startS3({
      port: ports.s3,
      dataDir: path.join(DEV_DIR, 's3'),
      accessKey: config.S3_ACCESS_KEY_ID,
      secretKey: config.S3_SECRET_ACCESS_KEY,
      region: config.S3_REGION,
      buckets: [config.S3_BUCKET_OUTPUTS],
      versitygwPath: tools.versitygw,
    }),
    ports.s3Fallback
      ? startS3({
          port: ports.s3Fallback,
          dataDir: path.join(DEV_DIR, 's3-fallback'),
          accessKey: config.S3_FALLBACK_ACCESS_KEY_ID,
          secretKey: config.S3_FALLBACK_SECRET_ACCESS_KEY,
          region: config.S3_FALLBACK_REGION,
          buckets: [config.S3_FALLBACK_BUCKET],
          versitygwPath: tools.versitygw,
        })
      : Promise.resolve(null),
  ]);
  if (temporal.status === 'fulfilled') watch('temporal', temporal.value);
  if (s3.status === 'fulfilled') watch('s3', s3.value);
  if (s3Fallback.status === 'fulfilled' && s3Fallback.value) watch('s3Fallback', s3Fallback.value);
  if (temporal.status === 'rejected') throw temporal.reason;
  if (s3.status === 'rejected') throw s3.reason;
  if (s3Fallback.status === 'rejected') throw s3Fallback.reason;
  say(`Temporal and S3 up in ${formatMs(Date.now() - t0)}`);

  const childEnv: NodeJS.ProcessEnv = {
    VIDORCH_ENV: config.VIDORCH_ENV ?? 'development',
    TEMPORAL_ADDRESS: `127.0.0.1:${ports.temporal}`,
    TEMPORAL_NAMESPACE: config.TEMPORAL_NAMESPACE,
    TEMPORAL_UI_URL: urls.temporalUi,
    S3_ENDPOINT: urls.s3,
    S3_REGION: config.S3_REGION,
    S3_ACCESS_KEY_ID: config.S3_ACCESS_KEY_ID,
    S3_SECRET_ACCESS_KEY: config.S3_SECRET_ACCESS_KEY,
    S3_BUCKET_OUTPUTS: config.S3_BUCKET_OUTPUTS,
    S3_FALLBACK_ENDPOINT: urls.s3Fallback,
    S3_FALLBACK_REGION: config.S3_FALLBACK_REGION,
    S3_FALLBACK_ACCESS_KEY_ID: config.S3_FALLBACK_ACCESS_KEY_ID,
    S3_FALLBACK_SECRET_ACCESS_KEY: config.S3_FALLBACK_SECRET_ACCESS_KEY,
    S3_FALLBACK_BUCKET: config.S3_FALLBACK_BUCKET,
    PORT: String(ports.api),
    PUBLIC_BASE_URL: process.env.PUBLIC_BASE_URL || urls.api,
    SIMULATOR_PORT: String(ports.simulator),
    WORKER_METRICS_PORT: String(ports.metrics),
    OPS_PORT: String(ports.apiOps),
    PROVIDER_REPLICATE_BASE_URL: urls.replicate,
    OUTPUT_FETCH_ALLOW_PRIVATE: 'true',
    // A webhook receiver on this machine (http, loopback) works out of the box (docs/webhooks.md).
    WEBHOOK_ALLOW_PRIVATE: 'true',
    LOG_PRETTY: 'true',
    // pino-pretty writes to a pipe here; keep its colors when we are on a terminal.
    ...(process.stdout.isTTY && !process.env.NO_COLOR && !process.env.FORCE_COLOR ? { FORCE_COLOR: '1' } : {}),
  };

  if (externalProvider) {
    say(`PROVIDER_REPLICATE_BASE_URL is set (${urls.replicate}); not starting the simulator`);
  } else if (present(ENTRY.simulator)) {
    const sim = watch('simulator', startNodeProcess('simulator', ENTRY.simulator, { ...childEnv, SIMULATOR_DATA_DIR: path.join(DEV_DIR, 'simulator') }));
    await waitForTcp(ports.simulator, { timeoutMs: 30_000, process: sim, what: `the simulator on ${urls.simulator}` });
  }

  let demo: { key: string; tenantId?: string; note?: string } = { key: demoApiKey() };
  if (present(ENTRY.cli)) {
    // The key goes by a file (0600), never on the command line.
    const keyFile = path.join(DEV_DIR, `.demo-api-key.${process.pid}`);
    fs.writeFileSync(keyFile, `${demo.key}\n`, { mode: 0o600 });
    const r = await runNodeScript(
      ENTRY.cli,
      ['tenant', 'create', '--name', 'demo', '--credits', '1000', '--if-missing', '--json', '--api-key-file', keyFile],
      { ...childEnv, LOG_PRETTY: 'false' },
      { timeoutMs: 60_000 },
    ).finally(() => fs.rmSync(keyFile, { force: true }));
    if (r.code !== 0) {
      throw new Error(`seeding the demo tenant failed (${ENTRY.cli} exit ${r.code}):\n${(r.stderr || r.stdout).trim()}`);
    }
    const line = r.stdout
      .trim()
      .split('\n')
      .reverse()
      .find((l) => l.trim().startsWith('{'));
    const out = line ? (JSON.parse(line) as { tenant_id?: string; created?: boolean }) : {};
    demo = {
      key: demo.key,
      tenantId: out.tenant_id,
      note: out.created ? 'created' : 'already existed; this key is registered for it',
    };
  } else {
    demo.note = `not seeded: ${ENTRY.cli} is missing`;
  }

  // The reconciler Schedules exist before any worker runs (the worker also creates them at start).
  if (present(ENTRY.cli)) {
    const r = await runNodeScript(ENTRY.cli, ['reconcile', 'schedules', '--json'], { ...childEnv, LOG_PRETTY: 'false' }, { timeoutMs: 60_000 });
    if (r.code !== 0) throw new Error(`creating the reconciler Schedules failed (${ENTRY.cli} exit ${r.code}):\n${(r.stderr || r.stdout).trim()}`);
  }
  if (present(ENTRY.worker)) watch('worker', startWorkerProcess('worker', ENTRY.worker, childEnv));
  if (present(ENTRY.api)) {
    const api = watch('api', startNodeProcess('api', ENTRY.api, childEnv));
    await waitForHttp(`${urls.api}/readyz`, { timeoutMs: 60_000, intervalMs: 250, process: api, what: `${urls.api}/readyz` });
  }

  await sleep(300); // let the children's start-up lines print before the banner
  banner(demo, missing);
}

function banner(demo: { key: string; tenantId?: string; note?: string }, missing: string[]): void {
  const key = demo.key;
  const body = '{"model":"minimax/video-01","prompt":"a red fox running through snow","duration_seconds":6,"resolution":"720p"}';
  const lines = [
    '',
    '================================================================================',
    ` vidorch dev stack ${missing.length ? 'PARTLY ' : ''}ready in ${formatMs(Date.now() - started)}`,
    '--------------------------------------------------------------------------------',
    ` API              ${urls.api}${procs.api ? '' : '   (not running)'}`,
    ` Temporal UI      ${urls.temporalUi}`,
    ` Temporal gRPC    127.0.0.1:${ports.temporal}  namespace ${config.TEMPORAL_NAMESPACE}`,
    ` S3               ${urls.s3}  bucket ${config.S3_BUCKET_OUTPUTS}  (key ${config.S3_ACCESS_KEY_ID})`,
    ` Fallback S3      ${urls.s3Fallback ? `${urls.s3Fallback}  bucket ${config.S3_FALLBACK_BUCKET}` : '(off: S3_FALLBACK_ENDPOINT is empty)'}`,
    ` Simulator        ${externalProvider ? `(external) ${urls.replicate}` : `${urls.simulator}  (replicate API ${urls.replicate})${procs.simulator ? '' : '   (not running)'}`}`,
    ` API metrics      ${urls.apiMetrics}  (and the detailed /readyz)`,
    ` Worker metrics   ${urls.metrics}${procs.worker ? '' : '   (not running)'}`,
    ` Data             ${path.relative(REPO_ROOT, DEV_DIR)}/`,
    '',
    ` Demo tenant      ${demo.tenantId ?? '-'}  ${demo.note ? `(${demo.note})` : ''}`,
    ` Demo API key     ${key}`,
    '',
    ' Create a task:',
    `   KEY=${key}`,
    `   curl -s -X POST ${urls.api}/v1/tasks -H "Authorization: Bearer $KEY" -H "Idempotency-Key: demo-1" -H 'Content-Type: application/json' -d '${body}'`,
    ' Then look at it:',
    `   curl -s ${urls.api}/v1/tasks/<task_id> -H "Authorization: Bearer $KEY"`,
    '',
    ...missing.map((f) => ` WARNING: ${f} is missing; that part is not running`),
    ' Ctrl-C stops everything.',
    '================================================================================',
    '',
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

main().catch((err: unknown) => {
  void shutdown(1, `failed to start: ${err instanceof Error ? err.message : String(err)}`);
});
