// The production deploy files must stay in step with the code: no cluster or Docker runs here,
// so this test reads them (README "Deploying"). Every variable they set is a setting of
// config/env.ts (or a launch variable of the worker's); every setting the production profile
// requires reaches the API, the worker and the migration, and the whole set loads under the
// profile; credentials are references (a Secret, `${NAME:?}`), never values; ports and probe
// paths are the configuration's defaults; the worker gets longer than its drain to stop; every
// image named is a Dockerfile target.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { envSchema, loadConfig } from '../../config/env';
import { deployment, productionProblems } from '../../config/profile';
import { REPO_ROOT, WORKER_MALLOC_ARENA_MAX, WORKER_SEMI_SPACE_MB } from '../../harness';

type Env = Record<string, string>;
const shape = envSchema.shape as Record<string, (typeof envSchema.shape)[keyof typeof envSchema.shape]>;
const read = (file: string) => fs.readFileSync(path.join(REPO_ROOT, file), 'utf8');
const defaultOf = (field: string): string => String(shape[field]!.parse(undefined));

/** Read by the worker's launch (the Dockerfile, `npm run worker`), not by config/env.ts. */
const LAUNCH_VARIABLES = new Set(['MALLOC_ARENA_MAX', 'WORKER_SEMI_SPACE_MB']);
const SERVICES = ['api', 'worker', 'migrate'] as const;
type Service = (typeof SERVICES)[number];

const rules = Object.keys(shape).map((field) => ({ field, rule: deployment.get(shape[field]!) }));
const REQUIRED = rules.filter((r) => r.rule?.required).map((r) => r.field);
const CREDENTIALS = new Set([
  ...rules.filter((r) => r.rule?.credential).map((r) => r.field),
  'OPS_BEARER_TOKEN',
  'CALLBACK_TOKEN_SECRET_PREVIOUS',
  'WEBHOOK_SECRET_KEY_PREVIOUS',
]);

const dockerfile = read('Dockerfile');
const TARGETS = new Set([...dockerfile.matchAll(/^FROM\s+\S+\s+AS\s+(\S+)\s*$/gim)].map((m) => m[1]!));
/** Each Dockerfile stage's text, by name. */
const stages = new Map(
  dockerfile
    .split(/^(?=FROM\s)/m)
    .map((text): [string, string] => [/^FROM\s+\S+\s+AS\s+(\S+)/i.exec(text)?.[1] ?? '', text])
    .filter(([name]) => name),
);

/** The services' addresses as production takes them off loopback: with TLS (config/profile.ts unencryptedConnectionProblems). */
const SERVICE_PLACEHOLDERS: Readonly<Record<string, string>> = {
  DATABASE_URL: 'postgres://vidorch:placeholder@db.vidorch.example:5432/vidorch?sslmode=verify-full',
  REDIS_URL: 'rediss://redis.vidorch.example:6379',
  TEMPORAL_ADDRESS: 'temporal.vidorch.example:7233',
};

/** A value for a setting passed by reference, valid for its schema and not refused by the profile. */
function placeholder(field: string): string {
  const service = SERVICE_PLACEHOLDERS[field];
  if (service) return service;
  const candidates = [
    'https://placeholder.vidorch.example/',
    `whsec_${randomBytes(32).toString('base64')}`,
    `placeholder-${randomBytes(24).toString('hex')}`,
    'db.vidorch.example:7233',
  ];
  const fits = candidates.find((c) => shape[field]!.safeParse(c).success && productionProblems({ [field]: shape[field]! }, { [field]: c }).length === 0);
  assert.ok(fits, `a placeholder for ${field}`);
  return fits;
}

interface Provided {
  /** Set to a value in the file (a compose `${NAME:-default}` counts as its default). */
  readonly literals: Env;
  /** Set by reference (a Secret key, a compose `${NAME:?}`): its value comes from outside the repository. */
  readonly references: Set<string>;
  /** Whether a path in the container is a file mounted from a secret (a Secret volume, a compose secret). */
  readonly fromSecret: (file: string) => boolean;
}

/** A readable stand-in for a file the deployment mounts (the TLS files), so the whole set loads here. */
const standInFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'vidorch-deploy-files-')), 'stand-in.pem');
fs.writeFileSync(standInFile, '-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n');

/** The checks every deploy file's service passes. */
function checkService(where: string, service: Service, p: Provided): void {
  const names = [...Object.keys(p.literals), ...p.references];
  for (const name of names) assert.ok(name in shape || LAUNCH_VARIABLES.has(name), `${where}: ${name} is not a setting of config/env.ts`);
  const required = [...REQUIRED];
  const opsHost = p.literals['OPS_LISTEN_HOST'];
  if (opsHost && !['127.0.0.1', 'localhost', '::1'].includes(opsHost)) required.push('OPS_BEARER_TOKEN');
  for (const field of required) assert.ok(names.includes(field), `${where}: the production profile requires ${field}`);
  for (const name of Object.keys(p.literals)) assert.ok(!CREDENTIALS.has(name), `${where}: ${name} is a credential, set as a value in the file`);
  // The file's own values, as the profile and the schema see them.
  for (const [name, value] of Object.entries(p.literals)) {
    if (LAUNCH_VARIABLES.has(name)) continue;
    assert.deepEqual(productionProblems({ [name]: shape[name]! }, { [name]: value }), [], `${where}: ${name}=${value}`);
  }
  const env: Env = { ...p.literals };
  for (const name of p.references) env[name] ??= placeholder(name);
  // The TLS files: each is mounted from a secret, never baked into the image or the file.
  for (const name of Object.keys(env).filter((n) => /_TLS_[A-Z]+_FILE$/.test(n))) {
    assert.ok(p.fromSecret(env[name]!), `${where}: ${name}=${env[name]} is a file mounted from a secret`);
    env[name] = standInFile;
  }
  assert.doesNotThrow(() => loadConfig(env), `${where}: the whole set loads under the production profile`);
  assert.equal(env['VIDORCH_ENV'], undefined, `${where}: no VIDORCH_ENV (production is what runs)`);
}

/** `node dist/healthcheck.js <service> <path>`: the image's probe, for this service, on a path the operator listener serves. */
function assertProbe(where: string, command: unknown, service: 'api' | 'worker', probePath: '/healthz' | '/readyz'): void {
  const argv = (Array.isArray(command) ? command : []).filter((a) => a !== 'CMD') as string[];
  assert.deepEqual(argv, ['node', 'dist/healthcheck.js', service, probePath], `${where}: the probe`);
  const image = /HEALTHCHECK .*CMD (\[.*\])/.exec(stages.get(service) ?? '')?.[1];
  assert.deepEqual(JSON.parse(image ?? '[]'), ['node', 'dist/healthcheck.js', service, '/healthz'], `the ${service} image's HEALTHCHECK`);
}

describe('the Dockerfile', () => {
  test('a target per process, run as an unprivileged user, with the operator listener health check and the default ports', () => {
    for (const target of ['api', 'worker', 'ops', 'migrate']) {
      assert.ok(TARGETS.has(target), `target ${target}`);
      assert.match(stages.get(target)!, /^USER 10001:10001$/m, `${target}: not root`);
    }
    assert.match(stages.get('runtime')!, /^STOPSIGNAL SIGTERM$/m);
    assert.match(stages.get('runtime')!, /^ENV NODE_ENV=production$/m);
    assert.match(dockerfile, /^ARG NODE_BASE=node:24-bookworm-slim$/m);
    assert.match(stages.get('runtime-deps')!, /npm ci --omit=dev/);
    assert.match(stages.get('api')!, new RegExp(`^EXPOSE ${defaultOf('PORT')} ${defaultOf('OPS_PORT')}$`, 'm'));
    assert.match(stages.get('worker')!, new RegExp(`^EXPOSE ${defaultOf('WORKER_METRICS_PORT')}$`, 'm'));
    for (const stage of stages.values()) {
      for (const [, names] of stage.matchAll(/^ENV (.+)$/gm)) {
        for (const name of names!.split(/\s+/).map((kv) => kv.split('=')[0]!)) {
          assert.ok(name in shape || LAUNCH_VARIABLES.has(name), `Dockerfile ENV ${name} is a setting`);
        }
      }
    }
  });

  test('the worker launches as `npm run worker` does: MALLOC_ARENA_MAX and the semi-space, both overridable', () => {
    const worker = stages.get('worker')!;
    assert.match(worker, new RegExp(`^ENV MALLOC_ARENA_MAX=${WORKER_MALLOC_ARENA_MAX} WORKER_SEMI_SPACE_MB=${WORKER_SEMI_SPACE_MB}$`, 'm'));
    assert.match(worker, /exec node --max-semi-space-size=\\"\$\{WORKER_SEMI_SPACE_MB\}\\" dist\/worker\.js/);
    const scripts = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts;
    assert.match(
      scripts['start:worker']!,
      new RegExp(`MALLOC_ARENA_MAX:-${WORKER_MALLOC_ARENA_MAX}.*max-semi-space-size=\\$\\{WORKER_SEMI_SPACE_MB:-${WORKER_SEMI_SPACE_MB}\\} dist/worker\\.js`),
    );
  });
});

describe('deploy/compose/compose.production.yml', () => {
  interface ComposeService {
    image?: string;
    build?: { target?: string };
    environment?: Record<string, string>;
    depends_on?: Record<string, { condition: string }>;
    ports?: string[];
    healthcheck?: { test?: string[] };
    stop_grace_period?: string;
    deploy?: { replicas?: number; resources?: { limits?: { cpus?: string; memory?: string } } };
    secrets?: string[];
  }
  const compose = parse(read('deploy/compose/compose.production.yml'), { merge: true }) as {
    services: Record<string, ComposeService>;
    secrets?: Record<string, { file?: string }>;
  };
  const services = compose.services;

  /** `${NAME:?}` is a reference to NAME; `${NAME:-default}` is its default; anything else a value. */
  function provided(where: string, env: Record<string, string>, secrets: readonly string[] = []): Provided {
    const literals: Env = {};
    const references = new Set<string>();
    for (const [name, raw] of Object.entries(env)) {
      const value = String(raw);
      const ref = /^\$\{([A-Z0-9_]+)(?::([?-])(.*))?\}$/.exec(value);
      if (!ref) {
        assert.doesNotMatch(value, /\$\{/, `${where}: ${name} interpolates only as a whole value`);
        literals[name] = value;
        continue;
      }
      assert.equal(ref[1], name, `${where}: ${name} takes the deploy environment's ${name}`);
      if (ref[2] === '?') references.add(name);
      else if (ref[3]) literals[name] = ref[3];
    }
    // A compose secret is at /run/secrets/<name>, its file from the deploy environment's directory.
    const fromSecret = (file: string) => {
      const name = /^\/run\/secrets\/([^/]+)$/.exec(file)?.[1];
      return name !== undefined && secrets.includes(name) && /^\$\{[A-Z0-9_]+:\?\}\//.test(compose.secrets?.[name]?.file ?? '');
    };
    return { literals, references, fromSecret };
  }

  test('the migration runs first, then the API (×2) and the worker, each a Dockerfile target', () => {
    assert.deepEqual(Object.keys(services).sort(), ['api', 'migrate', 'worker']);
    for (const name of SERVICES) {
      const s = services[name]!;
      assert.equal(s.build?.target, name);
      assert.ok(TARGETS.has(s.build.target), `${name}: Dockerfile target ${s.build.target}`);
      assert.match(s.image ?? '', new RegExp(`-${name}:\\$\\{VIDORCH_VERSION:\\?\\}$`), `${name}: the release's image`);
      assert.ok(s.deploy?.resources?.limits?.cpus && s.deploy.resources.limits.memory, `${name}: resource limits`);
    }
    for (const name of ['api', 'worker']) assert.equal(services[name]!.depends_on?.['migrate']?.condition, 'service_completed_successfully');
    assert.equal(services['api']!.deploy?.replicas, 2);
  });

  test('each service gets every setting the production profile requires, credentials by reference only', () => {
    for (const name of SERVICES) {
      const s = services[name]!;
      checkService(`compose ${name}`, name, provided(`compose ${name}`, s.environment ?? {}, s.secrets));
    }
  });

  test("the worker runs under Worker Versioning with the image's build id (docs/deploy.md)", () => {
    const env = services['worker']!.environment ?? {};
    assert.equal(shape['WORKER_VERSIONING']!.parse(env['WORKER_VERSIONING']), true);
    assert.equal(env['WORKER_BUILD_ID'], undefined, "the build id is the image's own (dist/build-id), not a value in the file");
  });

  test('ports and health checks are the configuration defaults on the operator listener; the worker outlasts its drain', () => {
    const api = services['api']!;
    const worker = services['worker']!;
    assert.equal(api.environment?.['PORT'], defaultOf('PORT'));
    assert.equal(api.environment?.['OPS_PORT'], defaultOf('OPS_PORT'));
    assert.ok(
      api.ports?.every((p) => p.endsWith(`:${defaultOf('PORT')}`)),
      'the API publishes its port',
    );
    assert.equal(worker.environment?.['WORKER_METRICS_PORT'], defaultOf('WORKER_METRICS_PORT'));
    assertProbe('compose api', api.healthcheck?.test, 'api', '/healthz');
    assertProbe('compose worker', worker.healthcheck?.test, 'worker', '/healthz');
    const drain = Number(worker.environment?.['WORKER_SHUTDOWN_GRACE_MS'] ?? defaultOf('WORKER_SHUTDOWN_GRACE_MS'));
    const grace = /^(\d+)s$/.exec(worker.stop_grace_period ?? '')?.[1];
    assert.ok(Number(grace) * 1000 >= drain + 10_000, `stop_grace_period ${worker.stop_grace_period} above the drain (${drain} ms) with room to close`);
  });
});

describe('deploy/kubernetes', () => {
  interface Container {
    name: string;
    image: string;
    ports?: { name: string; containerPort: number }[];
    envFrom?: { configMapRef?: { name: string } }[];
    env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string; optional?: boolean } } }[];
    startupProbe?: { exec?: { command: string[] } };
    livenessProbe?: { exec?: { command: string[] } };
    readinessProbe?: { exec?: { command: string[] } };
    resources?: { requests?: object; limits?: { cpu?: string; memory?: string } };
    volumeMounts?: { name: string; mountPath: string }[];
  }
  interface Doc {
    kind: string;
    metadata: { name: string };
    data?: Record<string, string>;
    spec?: {
      template?: {
        metadata?: { labels?: Record<string, string> };
        spec: {
          containers: Container[];
          terminationGracePeriodSeconds?: number;
          securityContext?: { runAsNonRoot?: boolean };
          volumes?: { name: string; secret?: { secretName: string } }[];
        };
      };
      selector?: Record<string, string>;
      ports?: { name: string; port: number; targetPort: string }[];
    };
    images?: { name: string }[];
  }
  const dir = path.join(REPO_ROOT, 'deploy', 'kubernetes');
  const docs = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .flatMap((f) => parseAllDocuments(fs.readFileSync(path.join(dir, f), 'utf8')).map((d) => ({ file: f, doc: d.toJSON() as Doc })));
  const find = (kind: string, name: string) => {
    const found = docs.find((d) => d.doc.kind === kind && d.doc.metadata?.name === name);
    assert.ok(found, `${kind} ${name}`);
    return found.doc;
  };
  const settings = find('ConfigMap', 'vidorch-settings').data ?? {};
  const workloads: Record<Service, Doc> = {
    api: find('Deployment', 'vidorch-api'),
    worker: find('Deployment', 'vidorch-worker'),
    migrate: find('Job', 'vidorch-migrate'),
  };
  const containerOf = (s: Service) => workloads[s].spec!.template!.spec.containers[0]!;

  test('a Secret by reference only: every credential comes from vidorch-secrets under its own name; no Secret with values here', () => {
    assert.deepEqual(
      docs.filter((d) => d.doc.kind === 'Secret').map((d) => d.file),
      [],
    );
    for (const s of SERVICES) {
      for (const e of containerOf(s).env ?? []) {
        const ref = e.valueFrom?.secretKeyRef;
        if (!ref) continue;
        assert.equal(ref.name, 'vidorch-secrets', `${s}: ${e.name}`);
        assert.equal(ref.key, e.name, `${s}: ${e.name} is the Secret's key of the same name`);
      }
    }
  });

  test('the API, the worker and the migration Job get every setting the production profile requires', () => {
    for (const s of SERVICES) {
      const c = containerOf(s);
      assert.ok(
        c.envFrom?.some((e) => e.configMapRef?.name === 'vidorch-settings'),
        `${s}: the settings ConfigMap`,
      );
      const literals: Env = { ...settings };
      const references = new Set<string>();
      for (const e of c.env ?? []) {
        if (e.value !== undefined) literals[e.name] = e.value;
        else if (e.valueFrom?.secretKeyRef && !e.valueFrom.secretKeyRef.optional) references.add(e.name);
        else if (e.valueFrom?.secretKeyRef) assert.ok(e.name in shape, `${s}: ${e.name} is a setting`);
      }
      const podSpec = workloads[s].spec!.template!.spec;
      const secretMounts = (c.volumeMounts ?? []).filter((m) => podSpec.volumes?.some((v) => v.name === m.name && v.secret?.secretName));
      const fromSecret = (file: string) => secretMounts.some((m) => path.posix.dirname(file) === m.mountPath);
      checkService(`kubernetes ${s}`, s, { literals, references, fromSecret });
      assert.ok(c.resources?.requests && c.resources.limits?.cpu && c.resources.limits.memory, `${s}: resources`);
      assert.equal(workloads[s].spec!.template!.spec.securityContext?.runAsNonRoot, true, `${s}: runAsNonRoot`);
    }
  });

  test('ports and probes: the operator listener at its default port, /healthz for liveness, /readyz for readiness; the Service reaches them', () => {
    for (const [s, opsField] of [
      ['api', 'OPS_PORT'],
      ['worker', 'WORKER_METRICS_PORT'],
    ] as const) {
      const c = containerOf(s);
      assert.equal(settings[opsField], defaultOf(opsField), `${opsField} in the ConfigMap`);
      assert.equal(c.ports?.find((p) => p.name === 'ops')?.containerPort, Number(defaultOf(opsField)), `${s}: the ops port`);
      assertProbe(`kubernetes ${s} startup`, c.startupProbe?.exec?.command, s, '/healthz');
      assertProbe(`kubernetes ${s} liveness`, c.livenessProbe?.exec?.command, s, '/healthz');
      assertProbe(`kubernetes ${s} readiness`, c.readinessProbe?.exec?.command, s, '/readyz');
    }
    const api = containerOf('api');
    assert.equal(api.ports?.find((p) => p.name === 'http')?.containerPort, Number(defaultOf('PORT')));
    const service = find('Service', 'vidorch-api');
    assert.deepEqual(service.spec!.selector, { 'app.kubernetes.io/name': 'vidorch-api' });
    assert.equal(workloads.api.spec!.template!.metadata?.labels?.['app.kubernetes.io/name'], 'vidorch-api');
    for (const p of service.spec!.ports ?? [])
      assert.ok(
        api.ports?.some((cp) => cp.name === p.targetPort),
        `Service port ${p.name} → ${p.targetPort}`,
      );
  });

  test("the worker runs under Worker Versioning with the image's build id (docs/deploy.md)", () => {
    const env = { ...settings, ...Object.fromEntries((containerOf('worker').env ?? []).map((e) => [e.name, e.value])) };
    assert.equal(shape['WORKER_VERSIONING']!.parse(env['WORKER_VERSIONING']), true);
    assert.equal(env['WORKER_BUILD_ID'], undefined, "the build id is the image's own (dist/build-id), not a value in the file");
  });

  test("the worker's termination grace is longer than its drain; every image is a Dockerfile target", () => {
    const drain = Number(settings['WORKER_SHUTDOWN_GRACE_MS'] ?? defaultOf('WORKER_SHUTDOWN_GRACE_MS'));
    const grace = workloads.worker.spec!.template!.spec.terminationGracePeriodSeconds ?? 30;
    assert.ok(grace * 1000 >= drain + 10_000, `terminationGracePeriodSeconds ${grace} s above the drain (${drain} ms) with room to close`);
    for (const s of SERVICES) {
      const target = /^vidorch-([a-z]+)(:|$)/.exec(containerOf(s).image)?.[1];
      assert.equal(target, s, `${s}: image ${containerOf(s).image}`);
      assert.ok(TARGETS.has(target), `${s}: Dockerfile target ${target}`);
    }
    const kustomization = docs.find((d) => d.doc.kind === 'Kustomization')?.doc;
    assert.ok(kustomization, 'kustomization.yaml');
    for (const image of kustomization.images ?? []) assert.ok(TARGETS.has(image.name.replace(/^vidorch-/, '')), `kustomization image ${image.name}`);
  });
});
