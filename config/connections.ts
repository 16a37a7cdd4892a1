// How a process reaches Temporal, Postgres and Redis (docs/security.md "Connections"), built here
// from its Config so that the API, the worker, the ops CLI and the reconcilers' schedule client
// cannot reach a service differently; and what config/env.ts refuses of those settings: in every
// profile, TLS settings that contradict each other or name an unreadable file; in production, a
// connection in plaintext to anything but loopback (config/profile.ts unencryptedConnectionProblems).
import fs from 'node:fs';
import { isIP } from 'node:net';
import type { RedisConnection } from '../api/rate-limit';
import { PgTlsError, pgTlsParams, withTlsFiles, type SslMode } from '../db/tls';
import type { TemporalConnectionOptions } from '../temporal/connection';
import type { Config } from './env';
import { unencryptedConnectionProblems } from './profile';

type ReadFile = (path: string) => Buffer;
type Problem = { field: string; message: string };

type TemporalConnectionSettings = Pick<
  Config,
  | 'TEMPORAL_ADDRESS'
  | 'TEMPORAL_TLS'
  | 'TEMPORAL_TLS_CA_FILE'
  | 'TEMPORAL_TLS_CERT_FILE'
  | 'TEMPORAL_TLS_KEY_FILE'
  | 'TEMPORAL_TLS_SERVER_NAME'
  | 'TEMPORAL_API_KEY'
>;

/**
 * The options of every Temporal connection: the clients' `Connection` and the worker's
 * `NativeConnection`. The files are read now, once per process: a renewed certificate takes a restart.
 */
export function temporalConnection(config: TemporalConnectionSettings, readFile: ReadFile = fs.readFileSync): TemporalConnectionOptions {
  const apiKey = config.TEMPORAL_API_KEY ? { apiKey: config.TEMPORAL_API_KEY } : {};
  if (!config.TEMPORAL_TLS) return { address: config.TEMPORAL_ADDRESS, tls: false, ...apiKey };
  const { TEMPORAL_TLS_CA_FILE: ca, TEMPORAL_TLS_CERT_FILE: cert, TEMPORAL_TLS_KEY_FILE: key, TEMPORAL_TLS_SERVER_NAME: serverName } = config;
  return {
    address: config.TEMPORAL_ADDRESS,
    tls: {
      ...(ca ? { serverRootCACertificate: readFile(ca) } : {}),
      ...(cert && key ? { clientCertPair: { crt: readFile(cert), key: readFile(key) } } : {}),
      ...(serverName ? { serverNameOverride: serverName } : {}),
    },
    ...apiKey,
  };
}

/** DATABASE_URL with the DATABASE_TLS_* files as libpq's parameters: what every pool and LISTEN connection is given (db/tls.ts reads it). */
export function databaseUrl(config: Pick<Config, 'DATABASE_URL' | 'DATABASE_TLS_CA_FILE' | 'DATABASE_TLS_CERT_FILE' | 'DATABASE_TLS_KEY_FILE'>): string {
  return withTlsFiles(config.DATABASE_URL, { rootCert: config.DATABASE_TLS_CA_FILE, cert: config.DATABASE_TLS_CERT_FILE, key: config.DATABASE_TLS_KEY_FILE });
}

/** The shared limits' Redis (null: REDIS_URL is empty); `rediss://` connects with TLS, checking the certificate against the URL's host. */
export function redisConnection(config: Pick<Config, 'REDIS_URL' | 'REDIS_TLS_CA_FILE'>, readFile: ReadFile = fs.readFileSync): RedisConnection | null {
  if (!config.REDIS_URL) return null;
  const url = parseUrl(config.REDIS_URL);
  if (url?.protocol !== 'rediss:') return { url: config.REDIS_URL };
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return {
    url: config.REDIS_URL,
    // Given explicitly: ioredis turns TLS on only for a URL spelled `rediss://` in lower case.
    tls: { ...(config.REDIS_TLS_CA_FILE ? { ca: readFile(config.REDIS_TLS_CA_FILE) } : {}), ...(host && isIP(host) === 0 ? { servername: host } : {}) },
  };
}

const FILE_SETTINGS = [
  'TEMPORAL_TLS_CA_FILE',
  'TEMPORAL_TLS_CERT_FILE',
  'TEMPORAL_TLS_KEY_FILE',
  'DATABASE_TLS_CA_FILE',
  'DATABASE_TLS_CERT_FILE',
  'DATABASE_TLS_KEY_FILE',
  'REDIS_TLS_CA_FILE',
] as const satisfies readonly (keyof Config)[];

/** The TLS settings' problems (every profile), then production's refusal of plaintext off loopback; one per field. */
export function connectionProblems(config: Config, production: boolean): Problem[] {
  const database = databaseTls(config);
  const problems = [...fileProblems(config), ...temporalProblems(config), ...database.problems, ...redisProblems(config)];
  if (production) {
    const found = unencryptedConnectionProblems({
      temporal: { address: config.TEMPORAL_ADDRESS, tls: config.TEMPORAL_TLS },
      database: { hosts: databaseHosts(config), sslMode: database.mode ?? 'disable' },
      redisUrl: config.REDIS_URL,
    });
    // A DATABASE_URL whose TLS cannot be read is named for that already.
    problems.push(...found.filter((p) => p.field !== 'DATABASE_URL' || database.mode !== null));
  }
  const seen = new Set<string>();
  return problems.filter((p) => !seen.has(p.field) && seen.add(p.field));
}

function fileProblems(config: Config): Problem[] {
  return FILE_SETTINGS.flatMap((field) => {
    const file = config[field];
    if (!file) return [];
    try {
      if (!fs.statSync(file).isFile()) return [{ field, message: 'not a file' }];
      fs.accessSync(file, fs.constants.R_OK);
      return [];
    } catch (err) {
      return [{ field, message: `cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})` }];
    }
  });
}

/** Both or neither; the one missing is named. */
function pairProblems(certField: keyof Config, keyField: keyof Config, config: Config): Problem[] {
  if (Boolean(config[certField]) === Boolean(config[keyField])) return [];
  const [missing, given] = config[certField] ? [keyField, certField] : [certField, keyField];
  return [{ field: missing, message: `required with ${given}: a client certificate takes its key, and the key its certificate` }];
}

function temporalProblems(config: Config): Problem[] {
  const pair = pairProblems('TEMPORAL_TLS_CERT_FILE', 'TEMPORAL_TLS_KEY_FILE', config);
  if (config.TEMPORAL_TLS) return pair;
  const unused = (['TEMPORAL_TLS_CA_FILE', 'TEMPORAL_TLS_CERT_FILE', 'TEMPORAL_TLS_KEY_FILE', 'TEMPORAL_TLS_SERVER_NAME'] as const)
    .filter((field) => config[field])
    .map((field) => ({ field, message: 'set, but TEMPORAL_TLS is not true: set TEMPORAL_TLS=true' }));
  const key = config.TEMPORAL_API_KEY ? [{ field: 'TEMPORAL_API_KEY', message: 'needs TEMPORAL_TLS=true: the key must not cross the network in clear' }] : [];
  return [...unused, ...key, ...pair];
}

/** The sslmode every database connection uses (null: DATABASE_URL's TLS cannot be honoured), and why not. */
function databaseTls(config: Config): { mode: SslMode | null; problems: Problem[] } {
  const problems = pairProblems('DATABASE_TLS_CERT_FILE', 'DATABASE_TLS_KEY_FILE', config);
  const params = parseUrl(config.DATABASE_URL)?.searchParams;
  for (const [field, param] of [
    ['DATABASE_TLS_CA_FILE', 'sslrootcert'],
    ['DATABASE_TLS_CERT_FILE', 'sslcert'],
    ['DATABASE_TLS_KEY_FILE', 'sslkey'],
  ] as const) {
    if (config[field] && params?.has(param)) problems.push({ field, message: `DATABASE_URL names ${param} too: keep one` });
  }
  try {
    return { mode: pgTlsParams(databaseUrl(config)).mode, problems };
  } catch (err) {
    if (err instanceof PgTlsError) return { mode: null, problems: [...problems, { field: 'DATABASE_URL', message: err.message }] };
    // withTlsFiles could not add the files: the URL does not parse.
    return { mode: null, problems: [...problems, { field: 'DATABASE_URL', message: 'not a URL, so DATABASE_TLS_* cannot be applied to it' }] };
  }
}

/** Every server the pools may connect to: DATABASE_URL's (its `host` parameter first, as node-postgres reads it), then the failover hosts. */
function databaseHosts(config: Config): string[] {
  const url = parseUrl(config.DATABASE_URL);
  // Unparsed: no host can be shown to be loopback.
  const primary = url ? url.searchParams.get('host') || url.hostname.replace(/^\[|\]$/g, '') || 'localhost' : config.DATABASE_URL;
  return [primary, ...config.DATABASE_FAILOVER_HOSTS.map((entry) => entry.slice(0, entry.lastIndexOf(':')))];
}

function redisProblems(config: Config): Problem[] {
  if (!config.REDIS_TLS_CA_FILE || parseUrl(config.REDIS_URL)?.protocol === 'rediss:') return [];
  return [{ field: 'REDIS_TLS_CA_FILE', message: 'set, but REDIS_URL is not rediss://' }];
}

function parseUrl(value: string): URL | null {
  try {
    return new URL(value);
  } catch {
    return null;
  }
}
