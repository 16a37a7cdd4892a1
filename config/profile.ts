// The deployment profile (README "Deploying"). Settings that hold a credential or point at a
// third party are declared with the helpers below: their dev values (the simulator's, the local
// stack's) fill in only in development and tests; in production every one must be set, to a
// value that does not mean the dev one, and URLs must be https to a public host. Production is
// what runs unless VIDORCH_ENV says development or test (docs/decisions/0065). config/env.ts
// applies this before it parses; nothing here reads process.env.
import ipaddr from 'ipaddr.js';
import { z } from 'zod';
import { hostRuleProblem, isLoopbackHost, isPublicHost, ruleDomain } from '../net/host-rules';

export type Profile = 'development' | 'test' | 'production';

export interface DeploymentRule {
  /** The value used when the setting is unset outside production. */
  readonly dev?: string;
  /** Production must set it (there is no production default). */
  readonly required?: boolean;
  /** What makes a set value unsafe in production (null: fine). */
  readonly unsafe?: (value: string) => string | null;
  /** A credential: deploy files pass it by reference (a Secret, an env file), never as a value. */
  readonly credential?: boolean;
}

/** The rules, keyed by the schema of each setting (config/env.ts registers them). */
export const deployment = z.registry<DeploymentRule>();

function withRule<T extends z.ZodType>(schema: T, rule: DeploymentRule): T {
  deployment.add(schema, rule);
  return schema;
}

/**
 * A credential (or an address that carries one, like DATABASE_URL) production must name itself:
 * `dev` (the simulator's or the local stack's value) fills in for development and tests only, and
 * is refused in production.
 */
export function secret<T extends z.ZodType>(schema: T, dev: string): T {
  return withRule(schema, { dev, required: true, credential: true });
}

/** A credential production may go without (e.g. TEMPORAL_API_KEY): deploy files still pass it by reference only. */
export function credential<T extends z.ZodType>(schema: T): T {
  return withRule(schema, { credential: true });
}

/** A third party's URL (a provider API, its JWKS): required in production, https to a public host. */
export function publicUrl(dev: string) {
  return withRule(z.url(), { dev, required: true, unsafe: unsafeUrl });
}

/**
 * An object store's endpoint (S3_ENDPOINT, S3_FALLBACK_ENDPOINT): production names it, and it may
 * be inside the network, but tenants download from presigned URLs on it, so production takes
 * plaintext only toward loopback (a sidecar).
 */
export function storageEndpoint<T extends z.ZodType>(schema: T, dev: string): T {
  return withRule(schema, { dev, required: true, unsafe: storageEndpointProblem });
}

function storageEndpointProblem(value: string): string | null {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null; // the schema reports the malformed URL
  }
  if (url.protocol === 'https:' || isLoopbackHost(url.hostname)) return null;
  return 'must be https in production unless its host is loopback (a sidecar): presigned download URLs are served from it';
}

/** A setting with a production default that must not take one of `values` there (e.g. OUTPUT_FETCH_ALLOW_PRIVATE=true). */
export function refusedInProduction<T extends z.ZodType>(schema: T, values: readonly string[], why: string): T {
  return withRule(schema, { unsafe: (v) => (values.includes(v.trim().toLowerCase()) ? why : null) });
}

/** A setting whose value `unsafe` explains why production refuses (null: fine), e.g. a list holding a dev key. */
export function unsafeInProduction<T extends z.ZodType>(schema: T, unsafe: (value: string) => string | null): T {
  return withRule(schema, { unsafe });
}

/**
 * Hosts a provider's outputs may be downloaded from (exact names or `*.domain` rules,
 * net/host-rules.ts): `hosts` everywhere; dev and tests add the simulator's loopback names;
 * production refuses loopback and private entries, a rule over one (`*.localhost`) included.
 */
export function outputHosts<T extends z.ZodType>(schema: T, hosts: readonly string[]): T {
  return withRule(schema, {
    dev: [...hosts, '127.0.0.1', 'localhost'].join(','),
    unsafe: (v) => {
      const bad = v
        .split(',')
        .map((h) => h.trim())
        .filter((h) => h && (hostRuleProblem(h) !== null || !isPublicHost(ruleDomain(h))));
      return bad.length ? `loopback, private or malformed hosts are refused in production: ${bad.join(', ')}` : null;
    },
  });
}

/**
 * Production unless VIDORCH_ENV names development or test (`npm run dev`, `npm test`, the drills
 * and benchmarks set it), and always when VIDORCH_ENV or NODE_ENV says production. NODE_ENV
 * alone never selects a dev profile: libraries and platforms set it for reasons of their own,
 * and a forgotten flag must cost a refusal at start, not a public dev secret in production.
 */
export function profileOf(env: Record<string, string | undefined>): Profile {
  const flag = env['VIDORCH_ENV'];
  if (flag === 'production' || env['NODE_ENV'] === 'production') return 'production';
  return flag === 'development' || flag === 'test' ? flag : 'production';
}

/** Whether the production profile applies only because no VIDORCH_ENV (nor NODE_ENV=production) was given. */
export const isImplicitProduction = (env: Record<string, string | undefined>): boolean =>
  profileOf(env) === 'production' && env['VIDORCH_ENV'] === undefined && env['NODE_ENV'] !== 'production';

/**
 * Whether `value` means the dev value `dev`, however it is spelled: a `whsec_` secret by its
 * decoded bytes (padding, the prefix and the base64 alphabet do not matter); a URL by its host
 * (every loopback name is one), port (the scheme's default when none) and path, unless it
 * carries a password of its own (the local stack's services take none); anything else trimmed.
 */
export function meansDevValue(value: string, dev: string): boolean {
  const v = value.trim();
  if (v === dev) return true;
  const devBytes = webhookSecretBytes(dev);
  if (devBytes) return webhookSecretBytes(`whsec_${v.replace(/^whsec_/, '')}`)?.equals(devBytes) ?? false;
  const devUrl = urlMeaning(dev);
  return devUrl !== null && urlMeaning(v) === devUrl;
}

function webhookSecretBytes(value: string): Buffer | null {
  if (!value.startsWith('whsec_')) return null;
  // Node's base64 decoder takes both alphabets and needs no padding.
  const bytes = Buffer.from(value.slice('whsec_'.length), 'base64');
  return bytes.length > 0 ? bytes : null;
}

const DEFAULT_PORTS: Readonly<Record<string, string>> = { 'http:': '80', 'https:': '443', 'postgres:': '5432', 'postgresql:': '5432', 'redis:': '6379' };

function urlMeaning(value: string): string | null {
  if (!value.includes('://')) return null;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null;
  }
  if (url.password) return null;
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const loopback =
    host === 'localhost' || host.endsWith('.localhost') || (ipaddr.isValid(host) && ['loopback', 'unspecified'].includes(ipaddr.process(host).range()));
  const port = url.port || DEFAULT_PORTS[url.protocol] || '';
  let pathname = url.pathname;
  try {
    pathname = decodeURIComponent(pathname);
  } catch {
    // kept as written
  }
  return `${loopback ? 'loopback' : host}:${port}${pathname.replace(/\/+$/, '')}`;
}

/** The services inside the network, as production checks their connections (config/connections.ts reads them from the settings). */
export interface ServiceConnections {
  readonly temporal: { readonly address: string; readonly tls: boolean };
  /** Every server a pool may connect to (DATABASE_URL's, then DATABASE_FAILOVER_HOSTS'; a path is a socket), and the sslmode they share. */
  readonly database: { readonly hosts: readonly string[]; readonly sslMode: string };
  /** REDIS_URL; empty: no Redis. */
  readonly redisUrl: string;
}

/**
 * Production: a connection to a service that is not on loopback is encrypted and checks whose
 * server it reached. Temporal with TLS; Postgres with sslmode=verify-full, as require does not
 * check the certificate and verify-ca does not check the name (any server the CA signed for would
 * do); Redis over rediss://. A sidecar on loopback (a proxy, a pooler) may be reached in plaintext.
 * Messages name the host of the Temporal address (not a secret), never a URL, which may carry a password.
 */
export function unencryptedConnectionProblems(c: ServiceConnections): { field: string; message: string }[] {
  const problems: { field: string; message: string }[] = [];
  const temporalHost = hostOfAddress(c.temporal.address);
  if (!c.temporal.tls && !isLoopbackHost(temporalHost)) {
    problems.push({ field: 'TEMPORAL_TLS', message: `required in production: TEMPORAL_ADDRESS (${temporalHost}) is not loopback` });
  }
  const remote = c.database.hosts.filter((h) => !h.startsWith('/') && !isLoopbackHost(h));
  if (remote.length > 0 && c.database.sslMode !== 'verify-full') {
    problems.push({
      field: 'DATABASE_URL',
      message: `sslmode=verify-full is required in production toward a server that is not loopback; it has ${c.database.sslMode === 'disable' ? 'no TLS (sslmode unset or disable)' : `sslmode=${c.database.sslMode}`}`,
    });
  }
  const redis = redisUrlProblem(c.redisUrl);
  if (redis) problems.push({ field: 'REDIS_URL', message: redis });
  return problems;
}

/** The host of a `host:port` address (`[v6]:port`, a bare IPv6 address or a host without port as given). */
function hostOfAddress(address: string): string {
  const bracketed = /^\[([^\]]+)\]/.exec(address);
  if (bracketed) return bracketed[1]!;
  const colon = address.indexOf(':');
  return colon !== -1 && colon === address.lastIndexOf(':') ? address.slice(0, colon) : address;
}

function redisUrlProblem(value: string): string | null {
  if (value === '' || value.startsWith('/')) return null; // no Redis, or its socket
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'must be a rediss:// URL in production (it does not parse as a URL)';
  }
  if (url.protocol === 'rediss:' || (url.protocol === 'redis:' && isLoopbackHost(url.hostname))) return null;
  return 'must be rediss:// (TLS) in production unless its host is loopback';
}

function unsafeUrl(value: string): string | null {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return null; // the schema reports the malformed URL
  }
  if (url.protocol !== 'https:') return 'must be https in production';
  if (!isPublicHost(url.hostname)) return `must name a public host in production, not ${url.hostname}`;
  return null;
}

type Shape = Readonly<Record<string, z.ZodType>>;
type Env = Record<string, string | undefined>;
const isUnset = (v: string | undefined) => v === undefined || v === '';

/** The environment with every unset dev value filled in (development and tests only). */
export function withDevValues(shape: Shape, env: Env): Env {
  const filled: Env = { ...env };
  for (const [field, schema] of Object.entries(shape)) {
    const dev = deployment.get(schema)?.dev;
    if (dev !== undefined && isUnset(filled[field])) filled[field] = dev;
  }
  return filled;
}

/** Every setting production refuses, by field: unset where required, the dev value, an unsafe value. */
export function productionProblems(shape: Shape, env: Env): { field: string; message: string }[] {
  const problems: { field: string; message: string }[] = [];
  for (const [field, schema] of Object.entries(shape)) {
    const rule = deployment.get(schema);
    if (!rule) continue;
    const value = env[field];
    if (isUnset(value)) {
      if (rule.required) problems.push({ field, message: 'required in production (dev and test values are not used there)' });
      continue;
    }
    const v = value;
    const unsafe = rule.dev !== undefined && meansDevValue(v, rule.dev) ? 'is the dev/simulator value; refused in production' : rule.unsafe?.(v);
    if (unsafe) problems.push({ field, message: unsafe });
  }
  return problems;
}
