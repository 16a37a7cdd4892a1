// The production profile (README.md "Deploying"): under it no dev value (the simulator's credentials, the
// repo's webhook secret, loopback URLs) fills in; each missing or unsafe setting is named and
// the process exits before it listens, polls or touches a database.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { ConfigError, configToEnv, loadConfig } from '../../config/env';
import { REPO_ROOT, canConnect, freePort, nodeBinary, sleep } from '../../harness';

/** A complete, safe production environment (values are placeholders, none is a dev value). */
export const SAFE_PRODUCTION_ENV: Readonly<Record<string, string>> = {
  VIDORCH_ENV: 'production',
  PUBLIC_BASE_URL: 'https://api.vidorch.example',
  DATABASE_URL: 'postgres://vidorch:s3cret@db.internal:5432/vidorch?sslmode=verify-full',
  S3_ENDPOINT: 'https://s3.eu-west-1.amazonaws.com',
  S3_ACCESS_KEY_ID: 'AKIAEXAMPLEEXAMPLE',
  S3_SECRET_ACCESS_KEY: 'prod-secret-access-key-example',
  S3_FALLBACK_ENDPOINT: 'https://storage.googleapis.com',
  S3_FALLBACK_ACCESS_KEY_ID: 'GOOGEXAMPLEEXAMPLE',
  S3_FALLBACK_SECRET_ACCESS_KEY: 'prod-fallback-secret-example',
  PROVIDER_REPLICATE_BASE_URL: 'https://api.replicate.com/v1',
  PROVIDER_REPLICATE_API_TOKEN: 'r8_production_token_example',
  PROVIDER_REPLICATE_WEBHOOK_SECRET: 'whsec_cHJvZHVjdGlvbi13ZWJob29rLXNlY3JldC1leGFtcGxl',
  PROVIDER_FAL_BASE_URL: 'https://queue.fal.run',
  PROVIDER_FAL_API_KEY: 'prod-fal-key-id:prod-fal-key-secret',
  PROVIDER_FAL_JWKS_URL: 'https://rest.alpha.fal.ai/.well-known/jwks.json',
  PROVIDER_FAL_OPENAPI_URL: 'https://fal.ai/api/openapi/queue/openapi.json',
  PROVIDER_FAL_USER_ID: 'prod-fal-user-id',
  CALLBACK_TOKEN_SECRET: 'prod-callback-token-secret-0123456789abcdef',
  WEBHOOK_SECRET_KEY: 'prod-webhook-secret-key-0123456789abcdef',
  BROWSER_TOKEN_SECRET: 'prod-browser-token-secret-0123456789abcdef',
  PROVIDER_RUNWAY_BASE_URL: 'https://api.dev.runwayml.com/v1',
  PROVIDER_RUNWAY_API_SECRET: 'prod-runway-secret-example',
  PROVIDER_KLING_BASE_URL: 'https://api-singapore.klingai.com',
  PROVIDER_KLING_ACCESS_KEY: 'prod-kling-access-key',
  PROVIDER_KLING_SECRET_KEY: 'prod-kling-secret-key-example',
};

function refusedFields(env: Record<string, string | undefined>): Map<string, string> {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return new Map(err.issues.map((i) => [i.field, i.message]));
    throw err;
  }
  return new Map();
}

/** The test profile: the dev values fill in (production is what runs without VIDORCH_ENV). */
const devConfig = (env: Record<string, string> = {}) => loadConfig({ VIDORCH_ENV: 'test', ...env });

describe('the production profile (loadConfig)', () => {
  test("a complete safe set loads, and no dev value fills in anywhere (output hosts are the providers' own)", () => {
    const config = loadConfig(SAFE_PRODUCTION_ENV);
    assert.equal(config.PUBLIC_BASE_URL, 'https://api.vidorch.example');
    assert.equal(config.OUTPUT_FETCH_ALLOW_PRIVATE, false);
    assert.deepEqual(config.PROVIDER_REPLICATE_OUTPUT_HOSTS, ['replicate.delivery', '*.replicate.delivery']);
    assert.deepEqual(config.PROVIDER_FAL_OUTPUT_HOSTS, ['fal.media', '*.fal.media']);
    assert.deepEqual(config.PROVIDER_KLING_OUTPUT_HOSTS, ['*.klingai.com']);
    assert.equal(config.OPS_LISTEN_HOST, '127.0.0.1');
    // NODE_ENV=production alone selects the profile too.
    const { VIDORCH_ENV: _, ...rest } = SAFE_PRODUCTION_ENV;
    assert.equal(loadConfig({ ...rest, NODE_ENV: 'production' }).PUBLIC_BASE_URL, 'https://api.vidorch.example');
  });

  test('every secret and third-party URL is required: an empty environment names each of them', () => {
    const refused = refusedFields({ NODE_ENV: 'production' });
    for (const field of Object.keys(SAFE_PRODUCTION_ENV).filter((f) => f !== 'VIDORCH_ENV')) {
      assert.match(refused.get(field) ?? '', /required in production/, field);
    }
  });

  test('dev values, loopback/private URLs, http, loopback output hosts and OUTPUT_FETCH_ALLOW_PRIVATE=true are refused, each by name', () => {
    const refused = refusedFields({
      ...SAFE_PRODUCTION_ENV,
      PROVIDER_REPLICATE_WEBHOOK_SECRET: 'whsec_ZGV2LXNpbXVsYXRvci13ZWJob29rLXNlY3JldC0zMmI=', // the repo's
      S3_SECRET_ACCESS_KEY: 'vidorch-dev-secret',
      PUBLIC_BASE_URL: 'http://api.vidorch.example',
      PROVIDER_FAL_JWKS_URL: 'https://127.0.0.1:7081/fal/.well-known/jwks.json',
      PROVIDER_KLING_BASE_URL: 'https://[::ffff:7f00:1]/kling',
      PROVIDER_RUNWAY_BASE_URL: 'https://10.1.2.3/v1',
      PROVIDER_REPLICATE_BASE_URL: 'https://localhost/v1',
      PROVIDER_KLING_OUTPUT_HOSTS: 'cdn.klingai.com,169.254.169.254',
      OUTPUT_FETCH_ALLOW_PRIVATE: 'true',
      OPS_LISTEN_HOST: '0.0.0.0',
    });
    assert.deepEqual([...refused.keys()].sort(), [
      'OPS_BEARER_TOKEN',
      'OUTPUT_FETCH_ALLOW_PRIVATE',
      'PROVIDER_FAL_JWKS_URL',
      'PROVIDER_KLING_BASE_URL',
      'PROVIDER_KLING_OUTPUT_HOSTS',
      'PROVIDER_REPLICATE_BASE_URL',
      'PROVIDER_REPLICATE_WEBHOOK_SECRET',
      'PROVIDER_RUNWAY_BASE_URL',
      'PUBLIC_BASE_URL',
      'S3_SECRET_ACCESS_KEY',
    ]);
    assert.match(refused.get('PROVIDER_REPLICATE_WEBHOOK_SECRET')!, /dev\/simulator value/);
    assert.match(refused.get('PUBLIC_BASE_URL')!, /https/);
    assert.match(refused.get('PROVIDER_KLING_OUTPUT_HOSTS')!, /169\.254\.169\.254/);
    for (const message of refused.values()) assert.doesNotMatch(message, /vidorch-dev-secret|ZGV2LXNp/, 'no value is echoed');
  });

  test('output host rules: *.domain loads; a rule over loopback, a private name or an address is refused by name', () => {
    const loaded = loadConfig({ ...SAFE_PRODUCTION_ENV, PROVIDER_RUNWAY_OUTPUT_HOSTS: 'dnznrvs05pmza.cloudfront.net,*.runwayml.com' });
    assert.deepEqual(loaded.PROVIDER_RUNWAY_OUTPUT_HOSTS, ['dnznrvs05pmza.cloudfront.net', '*.runwayml.com']);
    const refused = refusedFields({
      ...SAFE_PRODUCTION_ENV,
      PROVIDER_REPLICATE_OUTPUT_HOSTS: 'replicate.delivery,*.svc.localhost',
      PROVIDER_FAL_OUTPUT_HOSTS: '*.fal.media,*.10.0.0.1',
      PROVIDER_KLING_OUTPUT_HOSTS: '*.com',
    });
    assert.deepEqual([...refused.keys()].sort(), ['PROVIDER_FAL_OUTPUT_HOSTS', 'PROVIDER_KLING_OUTPUT_HOSTS', 'PROVIDER_REPLICATE_OUTPUT_HOSTS']);
    assert.match(refused.get('PROVIDER_REPLICATE_OUTPUT_HOSTS')!, /\*\.svc\.localhost/);
    assert.match(refused.get('PROVIDER_FAL_OUTPUT_HOSTS')!, /\*\.10\.0\.0\.1/);
    assert.match(refused.get('PROVIDER_KLING_OUTPUT_HOSTS')!, /\*\.com/);
  });

  test('a retired secret list holding the dev value is refused by name; a real retired secret loads', () => {
    const refused = refusedFields({
      ...SAFE_PRODUCTION_ENV,
      CALLBACK_TOKEN_SECRET_PREVIOUS: 'a-retired-callback-secret-0123456789abcdef,dev-callback-token-secret-not-for-production',
      WEBHOOK_SECRET_KEY_PREVIOUS: 'dev-webhook-secret-key-not-for-production',
    });
    assert.deepEqual([...refused.keys()].sort(), ['CALLBACK_TOKEN_SECRET_PREVIOUS', 'WEBHOOK_SECRET_KEY_PREVIOUS']);
    for (const message of refused.values()) assert.doesNotMatch(message, /not-for-production/, 'no value is echoed');
    const loaded = loadConfig({ ...SAFE_PRODUCTION_ENV, CALLBACK_TOKEN_SECRET_PREVIOUS: 'a-retired-callback-secret-0123456789abcdef' });
    assert.deepEqual(loaded.CALLBACK_TOKEN_SECRET_PREVIOUS, ['a-retired-callback-secret-0123456789abcdef']);
  });

  test('development and tests keep the simulator defaults, with VIDORCH_ENV saying so', () => {
    const dev = loadConfig({ VIDORCH_ENV: 'development' });
    assert.equal(dev.PROVIDER_REPLICATE_API_TOKEN, 'r8_dev_simulator_token');
    assert.deepEqual(dev.PROVIDER_REPLICATE_OUTPUT_HOSTS, ['replicate.delivery', '*.replicate.delivery', '127.0.0.1', 'localhost']);
    assert.equal(devConfig().S3_ACCESS_KEY_ID, 'vidorch-dev');
    // NODE_ENV=production wins over the flag.
    assert.match(refusedFields({ VIDORCH_ENV: 'test', NODE_ENV: 'production' }).get('DATABASE_URL') ?? '', /required in production/);
  });

  test('fail closed: without VIDORCH_ENV (NODE_ENV=test or development included) nothing fills in, and the dev values given are refused by name', () => {
    for (const env of [{}, { NODE_ENV: 'test' }, { NODE_ENV: 'development' }]) {
      const refused = refusedFields(env);
      for (const field of Object.keys(SAFE_PRODUCTION_ENV).filter((f) => f !== 'VIDORCH_ENV')) {
        assert.match(refused.get(field) ?? '', /required in production/, `${JSON.stringify(env)}: ${field}`);
      }
    }
    // The whole dev environment, spelled out, as a forgotten flag would leave it.
    const { VIDORCH_ENV: _, ...devEnv } = configToEnv(loadConfig({ VIDORCH_ENV: 'development' }));
    const refused = refusedFields(devEnv);
    for (const field of [
      'DATABASE_URL',
      'S3_SECRET_ACCESS_KEY',
      'PROVIDER_REPLICATE_API_TOKEN',
      'PROVIDER_REPLICATE_WEBHOOK_SECRET',
      'CALLBACK_TOKEN_SECRET',
      'WEBHOOK_SECRET_KEY',
      'BROWSER_TOKEN_SECRET',
    ]) {
      assert.match(refused.get(field) ?? '', /dev\/simulator value/, field);
    }
    assert.match(refused.get('PUBLIC_BASE_URL') ?? '', /https|dev\/simulator/);
  });

  test('a dev value is refused by its meaning, not its spelling: the webhook secret without its = padding, a loopback URL spelled otherwise', () => {
    const DEV_SECRET = 'whsec_ZGV2LXNpbXVsYXRvci13ZWJob29rLXNlY3JldC0zMmI=';
    for (const spelling of [DEV_SECRET.replace(/=+$/, ''), ` ${DEV_SECRET} `]) {
      const refused = refusedFields({ ...SAFE_PRODUCTION_ENV, PROVIDER_REPLICATE_WEBHOOK_SECRET: spelling });
      assert.deepEqual([...refused.keys()], ['PROVIDER_REPLICATE_WEBHOOK_SECRET'], spelling);
      assert.match(refused.get('PROVIDER_REPLICATE_WEBHOOK_SECRET')!, /dev\/simulator value/);
    }
    for (const url of [
      'postgres://postgres@localhost/vidorch',
      'postgresql://postgres@127.0.0.1:5432/vidorch/',
      'postgres://postgres@[::1]:5432/vidorch?sslmode=disable',
      'postgres://other-user@127.0.0.2/vidorch',
    ]) {
      assert.match(refusedFields({ ...SAFE_PRODUCTION_ENV, DATABASE_URL: url }).get('DATABASE_URL') ?? '', /dev\/simulator value/, url);
    }
    for (const url of ['http://LOCALHOST:7070/', 'https://127.0.0.1:7070', 'http://[::ffff:127.0.0.1]:7070']) {
      assert.match(refusedFields({ ...SAFE_PRODUCTION_ENV, S3_ENDPOINT: url }).get('S3_ENDPOINT') ?? '', /dev\/simulator value/, url);
    }
    // Not the dev value: another database, port or store, or the database's own password (a pooler on loopback).
    for (const [field, value] of [
      ['DATABASE_URL', 'postgres://postgres@127.0.0.1:5432/vidorch_prod'],
      ['DATABASE_URL', 'postgres://postgres@127.0.0.1:6432/vidorch'],
      ['DATABASE_URL', 'postgres://vidorch:s3cret@127.0.0.1:5432/vidorch'],
      ['S3_ENDPOINT', 'https://minio.internal:7070'],
      ['S3_ENDPOINT', 'http://127.0.0.1:9000'],
      ['PROVIDER_REPLICATE_WEBHOOK_SECRET', 'whsec_ZGV2LXNpbXVsYXRvci13ZWJob29rLXNlY3JldC0zMmI0'],
    ] as const) {
      assert.deepEqual([...refusedFields({ ...SAFE_PRODUCTION_ENV, [field]: value }).keys()], [], `${field}=${value}`);
    }
  });
});

describe('the production profile: object storage over https unless it is loopback', () => {
  test('an http S3 endpoint off loopback is refused by name, no URL echoed; https, or http to a loopback sidecar, loads', () => {
    for (const field of ['S3_ENDPOINT', 'S3_FALLBACK_ENDPOINT'] as const) {
      for (const url of ['http://minio.internal:7070', 'http://10.0.0.5:9000', 'http://s3.eu-west-1.amazonaws.com']) {
        const refused = refusedFields({ ...SAFE_PRODUCTION_ENV, [field]: url });
        assert.deepEqual([...refused.keys()], [field], `${field}=${url}`);
        assert.match(refused.get(field)!, /must be https in production unless its host is loopback/);
        assert.doesNotMatch(refused.get(field)!, /minio|10\.0\.0\.5|amazonaws/, 'no URL is echoed');
      }
      for (const url of ['https://minio.internal:7070', 'http://127.0.0.1:9000', 'http://localhost:9001', 'http://[::1]:9002']) {
        assert.deepEqual([...refusedFields({ ...SAFE_PRODUCTION_ENV, [field]: url }).keys()], [], `${field}=${url}`);
      }
    }
    // Dev and tests keep their plaintext stores.
    assert.equal(devConfig({ S3_ENDPOINT: 'http://minio.internal:7070' }).S3_ENDPOINT, 'http://minio.internal:7070');
  });

  test('loading refuses it with the field and why (the `config: S3_ENDPOINT: <why>` line at start)', () => {
    try {
      loadConfig({ ...SAFE_PRODUCTION_ENV, S3_ENDPOINT: 'http://minio.internal:7070' });
      assert.fail('loaded');
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      assert.match(err.message, /S3_ENDPOINT: must be https in production/);
    }
  });
});

describe('the production profile: TLS toward Temporal, Postgres and Redis unless they are on loopback', () => {
  const offLoopback = {
    ...SAFE_PRODUCTION_ENV,
    TEMPORAL_ADDRESS: 'temporal.internal:7233',
    DATABASE_URL: 'postgres://vidorch:s3cret@db.internal:5432/vidorch',
    REDIS_URL: 'redis://:r3dis-pass@redis.internal:6379',
  };

  test('each plaintext connection off loopback is refused by the field that fixes it, no URL echoed; with TLS the same addresses load', () => {
    const refused = refusedFields(offLoopback);
    assert.deepEqual([...refused.keys()].sort(), ['DATABASE_URL', 'REDIS_URL', 'TEMPORAL_TLS']);
    assert.match(refused.get('TEMPORAL_TLS')!, /TEMPORAL_ADDRESS \(temporal\.internal\) is not loopback/);
    assert.match(refused.get('DATABASE_URL')!, /sslmode=verify-full is required in production/);
    assert.match(refused.get('REDIS_URL')!, /rediss:\/\//);
    for (const message of refused.values()) assert.doesNotMatch(message, /s3cret|r3dis-pass|db\.internal|redis\.internal/, 'no URL is echoed');

    const config = loadConfig({
      ...offLoopback,
      TEMPORAL_TLS: 'true',
      DATABASE_URL: `${offLoopback.DATABASE_URL}?sslmode=verify-full`,
      REDIS_URL: 'rediss://:r3dis-pass@redis.internal:6379',
    });
    assert.equal(config.TEMPORAL_TLS, true);
  });

  test('Postgres off loopback takes verify-full only: require checks no certificate and verify-ca no name; a failover host off loopback counts too', () => {
    for (const mode of ['disable', 'require', 'verify-ca']) {
      const refused = refusedFields({ ...SAFE_PRODUCTION_ENV, DATABASE_URL: `postgres://vidorch:s3cret@db.internal:5432/vidorch?sslmode=${mode}` });
      assert.deepEqual([...refused.keys()], ['DATABASE_URL'], mode);
      assert.match(refused.get('DATABASE_URL')!, mode === 'disable' ? /no TLS/ : new RegExp(`has sslmode=${mode}$`), mode);
    }
    const standby = refusedFields({
      ...SAFE_PRODUCTION_ENV,
      DATABASE_URL: 'postgres://vidorch:s3cret@127.0.0.1:5432/vidorch',
      DATABASE_FAILOVER_HOSTS: 'db-2.internal:5432',
    });
    assert.deepEqual([...standby.keys()], ['DATABASE_URL']);
    // A CA file with no sslmode means verify-full.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vidorch-ca-'));
    try {
      const ca = path.join(dir, 'ca.pem');
      fs.writeFileSync(ca, '-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n');
      assert.equal(loadConfig({ ...offLoopback, TEMPORAL_TLS: 'true', REDIS_URL: '', DATABASE_TLS_CA_FILE: ca }).DATABASE_TLS_CA_FILE, ca);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a sidecar on loopback needs no TLS: Temporal, Postgres (or its socket) and Redis on 127.0.0.1, ::1 or localhost load in plaintext', () => {
    for (const [TEMPORAL_ADDRESS, DATABASE_URL, REDIS_URL] of [
      ['127.0.0.1:7233', 'postgres://vidorch:s3cret@127.0.0.1:6432/vidorch', 'redis://127.0.0.1:6379'],
      ['[::1]:7233', 'postgres://vidorch:s3cret@[::1]:5432/vidorch?sslmode=disable', 'redis://[::1]:6379/2'],
      ['localhost:7233', 'postgres://vidorch@localhost/vidorch_prod?host=/var/run/postgresql', ''],
    ] as const) {
      const env = { ...SAFE_PRODUCTION_ENV, TEMPORAL_ADDRESS, DATABASE_URL, REDIS_URL };
      assert.deepEqual([...refusedFields(env).keys()], [], JSON.stringify({ TEMPORAL_ADDRESS, REDIS_URL }));
    }
  });
});

/** Runs an entry point with only `env` (plus PATH/HOME), watching `ports` for a listener until it exits. */
async function runUnderProfile(script: string, args: string[], env: Record<string, string>, ports: number[]) {
  const child = spawn(nodeBinary(), ['--import', 'tsx', path.join(REPO_ROOT, script), ...args], {
    cwd: REPO_ROOT,
    env: { PATH: process.env['PATH'] ?? '', HOME: process.env['HOME'] ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let listened = false;
  let done = false;
  void exited.then(() => (done = true));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  while (!done) {
    for (const port of ports) if (await canConnect(port, '127.0.0.1', 200)) listened = true;
    await sleep(50);
  }
  clearTimeout(timer);
  return { code: await exited, stdout, stderr, listened };
}

describe('the production profile stops the real processes before they serve', () => {
  const unsafe = {
    ...SAFE_PRODUCTION_ENV,
    PROVIDER_REPLICATE_WEBHOOK_SECRET: '',
    PROVIDER_FAL_JWKS_URL: 'https://127.0.0.1/jwks.json',
    OUTPUT_FETCH_ALLOW_PRIVATE: 'true',
  };
  const expectNamed = (stderr: string) => {
    for (const field of ['PROVIDER_REPLICATE_WEBHOOK_SECRET', 'PROVIDER_FAL_JWKS_URL', 'OUTPUT_FETCH_ALLOW_PRIVATE']) {
      assert.match(stderr, new RegExp(`config: ${field}: `), `stderr names ${field}:\n${stderr}`);
    }
  };

  test('the API exits non-zero naming each field, and neither its port nor its operator port ever listens', async () => {
    const [port, opsPort] = [await freePort(), await freePort()];
    const r = await runUnderProfile('api/server.ts', [], { ...unsafe, PORT: String(port), OPS_PORT: String(opsPort) }, [port, opsPort]);
    assert.equal(r.code, 2, r.stderr);
    expectNamed(r.stderr);
    assert.equal(r.listened, false, 'no listener was opened');
    assert.doesNotMatch(r.stdout, /listening/);
  });

  test('with no VIDORCH_ENV at all the API is under the production profile: it names the missing settings and the flag, and never listens', async () => {
    const [port, opsPort] = [await freePort(), await freePort()];
    const r = await runUnderProfile('api/server.ts', [], { PORT: String(port), OPS_PORT: String(opsPort) }, [port, opsPort]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /config: DATABASE_URL: required in production/);
    assert.match(r.stderr, /config: VIDORCH_ENV: unset, so the production profile applies/);
    assert.equal(r.listened, false);
  });

  test('the worker exits non-zero naming each field, and its operator port never listens (no Temporal poll starts)', async () => {
    const opsPort = await freePort();
    const r = await runUnderProfile('workers/main.ts', [], { ...unsafe, WORKER_METRICS_PORT: String(opsPort), TEMPORAL_ADDRESS: '127.0.0.1:1' }, [opsPort]);
    assert.equal(r.code, 2, r.stderr);
    expectNamed(r.stderr);
    assert.equal(r.listened, false);
    assert.doesNotMatch(r.stdout, /worker polling|waiting for Temporal/i);
  });

  test('the ops CLI exits non-zero naming each field before any command runs', async () => {
    const r = await runUnderProfile('ops/cli.ts', ['mode', 'get', '--json'], unsafe, []);
    assert.equal(r.code, 2, r.stderr);
    expectNamed(r.stderr);
    assert.equal(r.stdout.trim(), '');
  });
});

test('a provider quota no poll queue rate can hold over 10 s is refused at load, naming the entry and the partitions', () => {
  assert.throws(
    () => devConfig({ POLL_QUEUE_RATES: 'kling=0.3' }),
    (err: unknown) =>
      err instanceof ConfigError &&
      err.issues.some((i) => i.field === 'POLL_QUEUE_RATES' && /kling=0\.3/.test(i.message) && /POLL_QUEUE_PARTITIONS=4/.test(i.message)),
  );
  assert.deepEqual(devConfig({ POLL_QUEUE_RATES: 'kling=0.3', POLL_QUEUE_PARTITIONS: '1' }).POLL_QUEUE_RATES, ['kling=0.3']);
  assert.throws(() => devConfig({ POLL_QUEUE_PARTITIONS: '64' }), ConfigError);
});

test('TEMPORAL_TASK_QUEUE is refused unless a plain name: it is spliced into a visibility query that terminates the runs it matches', () => {
  assert.throws(
    () => devConfig({ TEMPORAL_TASK_QUEUE: "x' OR WorkflowType = 'generationWorkflow" }),
    (err: Error & { issues?: { field: string }[] }) => err instanceof ConfigError && (err.issues ?? []).some((i) => i.field === 'TEMPORAL_TASK_QUEUE'),
  );
  assert.equal(devConfig({ TEMPORAL_TASK_QUEUE: 'tq_pg-outage_1234_ab.c' }).TEMPORAL_TASK_QUEUE, 'tq_pg-outage_1234_ab.c');
});

test("SIMULATOR_REPLICATE_RATE_LIMITS: the documented 600,3000 by default, 'off' or two positive integers, anything else refused naming the variable", () => {
  assert.equal(devConfig().SIMULATOR_REPLICATE_RATE_LIMITS, '600,3000');
  assert.equal(devConfig({ SIMULATOR_REPLICATE_RATE_LIMITS: 'off' }).SIMULATOR_REPLICATE_RATE_LIMITS, 'off');
  assert.equal(devConfig({ SIMULATOR_REPLICATE_RATE_LIMITS: '60,300' }).SIMULATOR_REPLICATE_RATE_LIMITS, '60,300');
  for (const bad of ['600', '0,3000', '600,3000,1', 'none', '600, 3000']) {
    assert.throws(
      () => devConfig({ SIMULATOR_REPLICATE_RATE_LIMITS: bad }),
      (e: unknown) => e instanceof ConfigError && e.issues.some((i) => i.field === 'SIMULATOR_REPLICATE_RATE_LIMITS'),
      bad,
    );
  }
});

test('PROVIDER_CREATE_QUOTAS and MAX_THROTTLED_SUBMITS: empty and 20 by default, provider=creates per second above 0, anything else refused naming the variable', () => {
  const config = devConfig();
  assert.deepEqual(config.PROVIDER_CREATE_QUOTAS, []);
  assert.equal(config.MAX_THROTTLED_SUBMITS, 20);
  assert.deepEqual(devConfig({ PROVIDER_CREATE_QUOTAS: 'replicate=20,kling=0.5' }).PROVIDER_CREATE_QUOTAS, ['replicate=20', 'kling=0.5']);
  for (const bad of ['replicate', 'replicate=0', 'replicate=-1', 'replicate=fast', 'Replicate=10']) {
    assert.throws(
      () => devConfig({ PROVIDER_CREATE_QUOTAS: bad }),
      (e: unknown) => e instanceof ConfigError && e.issues.some((i) => i.field.startsWith('PROVIDER_CREATE_QUOTAS')),
      bad,
    );
  }
  assert.throws(
    () => devConfig({ MAX_THROTTLED_SUBMITS: '-1' }),
    (e: unknown) => e instanceof ConfigError && e.issues.some((i) => i.field === 'MAX_THROTTLED_SUBMITS'),
  );
});
