// temporal-dev.yml must stay in step with `npm run dev` and the code: no Docker runs here, so this
// test reads the file instead. It names built images only (no deprecated auto-setup, no
// floating tags), the Temporal server that the pinned CLI's dev server embeds, the ports the
// configuration's dev defaults point at (loopback only), the search attributes the workflows
// set, and the buckets the code uses.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { loadConfig } from '../../config/env';
import { REPO_ROOT, TEMPORAL_SEARCH_ATTRIBUTES, readToolPaths } from '../../harness';

interface Service {
  image?: string;
  ports?: string[];
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string }>;
  volumes?: string[];
}
const compose = parse(fs.readFileSync(path.join(REPO_ROOT, 'temporal-dev.yml'), 'utf8'), { merge: true }) as { services: Record<string, Service> };
const services = compose.services;
const dev = loadConfig({ VIDORCH_ENV: 'development' });

const imageTag = (s: Service) => {
  const [name, tag] = (s.image ?? '').split(':');
  return { name, tag };
};
const hostPort = (s: Service, containerPort: number): string => {
  const mapping = (s.ports ?? []).find((p) => p.endsWith(`:${containerPort}`));
  assert.ok(mapping, `a port mapping to ${containerPort}`);
  return mapping;
};

test('the services it names, on built images with pinned tags', () => {
  for (const name of ['postgres', 'temporal-schema', 'temporal', 'temporal-namespace', 'temporal-ui', 'redis', 's3', 's3-fallback', 's3-buckets']) {
    assert.ok(services[name], `service ${name}`);
  }
  for (const [name, s] of Object.entries(services)) {
    const { name: image, tag } = imageTag(s);
    assert.ok(image && tag, `${name}: an image with a tag`);
    assert.notEqual(tag, 'latest', `${name}: a pinned tag`);
    assert.notEqual(image, 'temporalio/auto-setup', `${name}: auto-setup is deprecated and no longer built`);
    for (const dep of Object.keys(s.depends_on ?? {})) assert.ok(services[dep], `${name} depends on ${dep}, which exists`);
    for (const v of s.volumes ?? []) {
      if (v.startsWith('./')) assert.ok(fs.existsSync(path.join(REPO_ROOT, v.split(':')[0]!)), `${name}: mounted file ${v} exists`);
    }
  }
});

test("Temporal is the server the pinned CLI's dev server embeds", async () => {
  const { stdout } = await promisify(execFile)(readToolPaths().temporal, ['--version']);
  const embedded = /Server (\d+\.\d+\.\d+)/.exec(stdout)?.[1];
  assert.ok(embedded, `the CLI reports its server version: ${stdout}`);
  assert.equal(imageTag(services.temporal!).name, 'temporalio/server');
  assert.equal(imageTag(services.temporal!).tag, embedded);
  for (const tool of ['temporal-schema', 'temporal-namespace']) {
    assert.ok(imageTag(services[tool]!).tag?.startsWith(`${embedded}-`) || imageTag(services[tool]!).tag === embedded, `${tool}: admin-tools of ${embedded}`);
  }
});

test('ports are the dev defaults of the configuration, bound to loopback', () => {
  const port = (url: string) => new URL(url).port;
  assert.equal(hostPort(services.postgres!, 5432), `127.0.0.1:${port(dev.DATABASE_URL)}:5432`);
  assert.equal(hostPort(services.temporal!, 7233), `127.0.0.1:${dev.TEMPORAL_ADDRESS.split(':')[1]}:7233`);
  assert.equal(hostPort(services['temporal-ui']!, 8080), `127.0.0.1:${port(dev.TEMPORAL_UI_URL)}:8080`);
  assert.equal(hostPort(services.s3!, 7070), `127.0.0.1:${port(dev.S3_ENDPOINT)}:7070`);
  assert.equal(hostPort(services['s3-fallback']!, 7071), `127.0.0.1:${port(dev.S3_FALLBACK_ENDPOINT)}:7071`);
  assert.equal(hostPort(services.redis!, 6379), `127.0.0.1:${port(dev.REDIS_URL)}:6379`);
  for (const [name, s] of Object.entries(services)) {
    for (const p of s.ports ?? []) assert.ok(p.startsWith('127.0.0.1:'), `${name}: ${p} is loopback only`);
  }
});

test('search attributes, namespace and buckets match the code', () => {
  const ns = services['temporal-namespace']!.environment!;
  const declared = Object.fromEntries(ns.SEARCH_ATTRIBUTES!.split(/\s+/).map((spec) => spec.split('=') as [string, string]));
  assert.deepEqual(declared, TEMPORAL_SEARCH_ATTRIBUTES);
  assert.equal(ns.NAMESPACE, dev.TEMPORAL_NAMESPACE);
  assert.equal(ns.NAMESPACE_RETENTION, `${dev.TEMPORAL_NAMESPACE_RETENTION_HOURS}h`, 'the retention npm run dev sets');
  const buckets = services['s3-buckets']!.environment!.BUCKETS!.split(/\s+/);
  assert.ok(buckets.includes(dev.S3_BUCKET_OUTPUTS), `bucket ${dev.S3_BUCKET_OUTPUTS}`);
  assert.equal(services['s3-buckets']!.environment!.FALLBACK_BUCKET, dev.S3_FALLBACK_BUCKET);
  assert.equal(services.s3!.environment!.ROOT_ACCESS_KEY, dev.S3_ACCESS_KEY_ID);
});
