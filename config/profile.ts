// The deployment profile (README "Deploying"). Settings that hold a credential or point at a
// third party are declared with the helpers below: their dev values (the simulator's, the local
// stack's) fill in only in development and tests; in production every one must be set, to a
// value that is not the dev one, and URLs must be https to a public host. config/env.ts applies
// this before it parses; nothing here reads process.env.
import ipaddr from 'ipaddr.js';
import { z } from 'zod';

export type Profile = 'development' | 'test' | 'production';

export interface DeploymentRule {
  /** The value used when the setting is unset outside production. */
  readonly dev?: string;
  /** Production must set it (there is no production default). */
  readonly required?: boolean;
  /** What makes a set value unsafe in production (null: fine). */
  readonly unsafe?: (value: string) => string | null;
}

/** The rules, keyed by the schema of each setting (config/env.ts registers them). */
export const deployment = z.registry<DeploymentRule>();

function withRule<T extends z.ZodType>(schema: T, rule: DeploymentRule): T {
  deployment.add(schema, rule);
  return schema;
}

/**
 * A setting production must name itself: `dev` (the simulator's or the local stack's value)
 * fills in for development and tests only, and is refused in production.
 */
export function devDefault<T extends z.ZodType>(schema: T, dev: string): T {
  return withRule(schema, { dev, required: true });
}

/**
 * A credential (or an address that carries one, like DATABASE_URL): the devDefault rule.
 * @alias
 */
export const secret = devDefault;

/** A third party's URL (a provider API, its JWKS): required in production, https to a public host. */
export function publicUrl(dev: string) {
  return withRule(z.url(), { dev, required: true, unsafe: unsafeUrl });
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
 * Hosts a provider's outputs may be downloaded from: `hosts` everywhere; dev and tests add the
 * simulator's loopback names; production refuses loopback and private entries.
 */
export function outputHosts<T extends z.ZodType>(schema: T, hosts: readonly string[]): T {
  return withRule(schema, {
    dev: [...hosts, '127.0.0.1', 'localhost'].join(','),
    unsafe: (v) => {
      const bad = v
        .split(',')
        .map((h) => h.trim())
        .filter((h) => h && !isPublicHost(h));
      return bad.length ? `loopback or private hosts are refused in production: ${bad.join(', ')}` : null;
    },
  });
}

/** Production if VIDORCH_ENV or NODE_ENV says so; else VIDORCH_ENV, NODE_ENV, development. */
export function profileOf(env: Record<string, string | undefined>): Profile {
  const named = [env['VIDORCH_ENV'], env['NODE_ENV']];
  if (named.includes('production')) return 'production';
  const first = named.find((p) => p === 'development' || p === 'test');
  return (first as Profile | undefined) ?? 'development';
}

/** A host name or address literal that may be a public endpoint: not loopback, private, link-local, … */
export function isPublicHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return false;
  if (!ipaddr.isValid(h)) return true; // a DNS name: resolved (and checked) where it is fetched
  return ipaddr.process(h).range() === 'unicast';
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
    const unsafe = v === rule.dev ? 'is the dev/simulator value; refused in production' : rule.unsafe?.(v);
    if (unsafe) problems.push({ field, message: unsafe });
  }
  return problems;
}
