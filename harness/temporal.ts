// A Temporal dev server (`temporal server start-dev`) with the project's search attributes, and
// the Temporal CLI run against it.
import fs from 'node:fs';
import path from 'node:path';
import { freePort, waitForTcp, waitUntil } from './ports';
import { extend, launch, runCommand, type LogFn, type ManagedProcess, type RunResult } from './processes';
import { readToolPaths } from './tools';

export type TemporalSearchAttributeType = 'Text' | 'Keyword' | 'Int' | 'Double' | 'Bool' | 'Datetime' | 'KeywordList';

/**
 * The project's custom search attributes. Every Temporal server started through this module
 * has exactly these registered (at launch, and re-checked after start because a persisted
 * dev-server database ignores `--search-attribute` flags for namespaces that already exist).
 */
export const TEMPORAL_SEARCH_ATTRIBUTES = {
  TaskStatus: 'Keyword',
  TenantId: 'Keyword',
  Provider: 'Keyword',
  AttemptState: 'Keyword',
  NeedsAttention: 'Bool',
} as const satisfies Record<string, TemporalSearchAttributeType>;

export interface TemporalProcess extends ManagedProcess {
  /** host:port of the frontend gRPC service, as TEMPORAL_ADDRESS expects it. */
  readonly address: string;
  /** Web UI URL, unless headless. */
  readonly uiUrl: string | undefined;
}

export interface TemporalOptions {
  /** Frontend gRPC port. */
  port: number;
  /** Web UI port (default: port + 1000, the CLI's default). Ignored when headless. */
  uiPort?: number;
  /** Frontend HTTP API port (default: a random free port). */
  httpPort?: number;
  /** SQLite file to persist to; in-memory when omitted. Its directory is created. */
  dbFile?: string;
  /** An extra namespace to create at launch ("default" always exists). */
  namespace?: string;
  /** No Web UI. */
  headless?: boolean;
  /** Dynamic config values (`--dynamic-config-value key=value`), e.g. matching.useNewMatcher. */
  dynamicConfig?: Readonly<Record<string, string>>;
  log?: LogFn;
  /** Defaults to TEMPORAL_SEARCH_ATTRIBUTES. */
  searchAttributes?: Record<string, TemporalSearchAttributeType>;
  /** Readiness timeout (default 60 s). */
  timeoutMs?: number;
  /** Default: readToolPaths().temporal. */
  temporalPath?: string;
  /**
   * Closed-workflow retention set on every namespace at start (`temporal operator namespace update
   * --retention`); the dev server's own default when omitted. docs/runbooks/reconcilers.md.
   */
  retentionHours?: number;
}

/** Environment for Temporal CLI calls: no TEMPORAL_* variables, which the CLI would read as its own config. */
function temporalCliEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('TEMPORAL_')) env[k] = v;
  return env;
}

/** Runs `temporal <args> --address <address>` (config file and env config disabled). */
export function temporalCli(temporalPath: string, address: string, args: string[], timeoutMs = 15_000): Promise<RunResult> {
  return runCommand(temporalPath, [...args, '--address', address, '--disable-config-file', '--disable-config-env', '--color', 'never'], temporalCliEnv(), {
    timeoutMs,
  });
}

/**
 * Dynamic config every dev server of ours starts with (`npm run dev`, the tests, the benchmarks;
 * deploy/temporal/dynamicconfig.yaml for temporal-dev.yml): the matcher that honours the task
 * priority and fairness keys the facade starts each workflow with (temporal/facade.ts,
 * docs/decisions/0068), so one tenant's burst of workflow and activity tasks does not hold back
 * another tenant's on the way to the slot queue, and a priority-9 task's go first. `dynamicConfig`
 * values override these.
 */
export const TEMPORAL_DEV_DYNAMIC_CONFIG: Readonly<Record<string, string>> = {
  'matching.useNewMatcher': 'true',
  'matching.enableFairness': 'true',
};

/**
 * Starts `temporal server start-dev` on 127.0.0.1 with the project's search attributes and
 * resolves once the frontend accepts connections, `operator namespace describe` succeeds for
 * every namespace, and every search attribute is registered (created when missing).
 * Update-with-start / workflow updates need no dynamic config: enabled by default since server 1.25
 * (the CLI v1.5.1 embeds server 1.29.1).
 */
export async function startTemporal(opts: TemporalOptions): Promise<TemporalProcess> {
  const temporalPath = opts.temporalPath ?? readToolPaths().temporal;
  const address = `127.0.0.1:${opts.port}`;
  const attrs = opts.searchAttributes ?? TEMPORAL_SEARCH_ATTRIBUTES;
  const args = ['server', 'start-dev', '--ip', '127.0.0.1', '--port', String(opts.port), '--log-level', 'warn'];
  if (opts.headless) args.push('--headless');
  else if (opts.uiPort !== undefined) args.push('--ui-port', String(opts.uiPort));
  if (opts.httpPort !== undefined) args.push('--http-port', String(opts.httpPort));
  for (const [k, v] of Object.entries({ ...TEMPORAL_DEV_DYNAMIC_CONFIG, ...opts.dynamicConfig })) args.push('--dynamic-config-value', `${k}=${v}`);
  if (opts.dbFile) {
    fs.mkdirSync(path.dirname(path.resolve(opts.dbFile)), { recursive: true });
    args.push('--db-filename', path.resolve(opts.dbFile));
  }
  const namespaces = ['default'];
  if (opts.namespace && opts.namespace !== 'default') {
    args.push('--namespace', opts.namespace);
    namespaces.push(opts.namespace);
  }
  for (const [name, type] of Object.entries(attrs)) args.push('--search-attribute', `${name}=${type}`);

  // Its shutdown always logs a burst of benign "connection refused"/"graceful_stop" warnings.
  const proc = launch('temporal', temporalPath, args, { env: temporalCliEnv(), log: opts.log, muteAfterStop: true });
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  const remaining = () => Math.max(1_000, deadline - Date.now());
  try {
    await waitForTcp(opts.port, { timeoutMs: remaining(), process: proc, what: `Temporal frontend on ${address}` });
    for (const ns of namespaces) {
      let last = '';
      await waitUntil(
        async () => {
          const r = await temporalCli(temporalPath, address, ['operator', 'namespace', 'describe', '--namespace', ns], 5_000);
          last = (r.stderr || r.stdout).trim().split('\n').slice(-3).join(' | ');
          return r.code === 0;
        },
        { timeoutMs: remaining(), intervalMs: 250, process: proc, what: `namespace ${ns} on ${address}` },
      ).catch((err: Error) => {
        throw new Error(`${err.message}${last ? `\nlast CLI error: ${last}` : ''}`);
      });
      await ensureSearchAttributes(temporalPath, address, ns, attrs);
      if (opts.retentionHours !== undefined) {
        const r = await temporalCli(temporalPath, address, ['operator', 'namespace', 'update', '--namespace', ns, '--retention', `${opts.retentionHours}h`]);
        if (r.code !== 0) throw new Error(`temporal operator namespace update --retention failed for ${ns}: ${(r.stderr || r.stdout).trim()}`);
      }
    }
  } catch (err) {
    await proc.stop('SIGKILL', 2_000);
    throw err instanceof Error ? err : new Error(String(err));
  }
  const uiUrl = opts.headless ? undefined : `http://127.0.0.1:${opts.uiPort ?? opts.port + 1000}`;
  return extend(proc, { address, uiUrl });
}

/** Makes sure `attrs` are registered on `namespace`; creates missing ones, fails on a type clash. */
export async function ensureSearchAttributes(
  temporalPath: string,
  address: string,
  namespace: string,
  attrs: Record<string, TemporalSearchAttributeType>,
): Promise<void> {
  const listed = await temporalCli(temporalPath, address, ['operator', 'search-attribute', 'list', '--namespace', namespace, '-o', 'json']);
  if (listed.code !== 0) throw new Error(`temporal operator search-attribute list failed: ${listed.stderr.trim()}`);
  const existing = (JSON.parse(listed.stdout) as { customAttributes?: Record<string, string> }).customAttributes ?? {};
  const norm = (t: string) =>
    t
      .replace(/^INDEXED_VALUE_TYPE_/, '')
      .replace(/_/g, '')
      .toUpperCase();
  for (const [name, type] of Object.entries(attrs)) {
    const have = existing[name];
    if (have === undefined) {
      const r = await temporalCli(temporalPath, address, ['operator', 'search-attribute', 'create', '--namespace', namespace, '--name', name, '--type', type]);
      if (r.code !== 0) throw new Error(`could not create search attribute ${name}=${type}: ${r.stderr.trim()}`);
    } else if (norm(have) !== norm(type)) {
      throw new Error(
        `search attribute ${name} is registered as ${have} on ${address}/${namespace}, expected ${type}` +
          ' (delete the dev server database, e.g. .data/dev/temporal.db, to start over)',
      );
    }
  }
}

/** The Temporal server version the CLI v1.5.1 dev server embeds: the production rehearsal builds this one. */
export const TEMPORAL_SERVER_VERSION = 'v1.29.1';

export interface TemporalServerOptions {
  /** Frontend gRPC port; the other services' ports are taken free. */
  port: number;
  /** Where its config and logs go. */
  dataDir: string;
  /** Postgres for persistence and visibility: host, port, user (password-less, trust). */
  postgres: { host: string; port: number; user: string };
  /** Prefix of its two databases (`<prefix>`, `<prefix>_visibility`), created and given their schemas. */
  databasePrefix: string;
  /** `server` and `sql` (temporal-sql-tool) built from go.temporal.io/server at TEMPORAL_SERVER_VERSION. */
  serverPath: string;
  sqlToolPath: string;
  /** The module's schema/postgresql/v12 directory (in the Go module cache). */
  schemaDir: string;
  /** The Temporal CLI, for namespace and search-attribute set-up. */
  temporalPath: string;
  numHistoryShards?: number;
  /** Connections per service (four in the process) to each database: small on a shared Postgres (default 5 and 2). */
  maxConns?: { main: number; visibility: number };
  log?: LogFn;
}

/**
 * Temporal as a production runs it: the server built from its Go module, its four services in
 * one process, on PostgreSQL persistence and visibility (schemas applied with temporal-sql-tool
 * from the module's schema/postgresql/v12), the config adapted from the module's
 * development-postgres12.yaml; the `default` namespace and the project's search attributes created
 * through the CLI, as an operator would.
 */
export async function startTemporalServer(opts: TemporalServerOptions): Promise<TemporalProcess> {
  const { host, port: pgPort, user } = opts.postgres;
  const dbs = { main: opts.databasePrefix, visibility: `${opts.databasePrefix}_visibility` };
  for (const [db, dir] of [
    [dbs.main, 'temporal'],
    [dbs.visibility, 'visibility'],
  ] as const) {
    const tool = (args: string[]) =>
      runCommand(opts.sqlToolPath, ['--plugin', 'postgres12', '--ep', host, '-p', String(pgPort), '-u', user, '--db', db, ...args], temporalCliEnv(), {
        timeoutMs: 180_000,
      });
    for (const args of [['create-database'], ['setup-schema', '-v', '0.0'], ['update-schema', '-d', path.join(opts.schemaDir, dir, 'versioned')]]) {
      const r = await tool(args);
      if (r.code !== 0) throw new Error(`temporal-sql-tool ${args[0]} ${db} failed: ${(r.stderr || r.stdout).trim().split('\n').slice(-3).join(' | ')}`);
    }
  }
  const ports = { http: await freePort(), history: await freePort(), matching: await freePort(), worker: await freePort(), metrics: await freePort() };
  const membership = [await freePort(), await freePort(), await freePort(), await freePort()];
  const store = (db: string, maxConns: number) => `
      sql:
        pluginName: postgres12
        databaseName: ${db}
        connectAddr: "${host}:${pgPort}"
        connectProtocol: tcp
        user: ${user}
        password: ""
        maxConns: ${maxConns}
        maxIdleConns: ${maxConns}
        maxConnLifetime: 1h`;
  const service = (grpc: number, member: number, http?: number) => `
    rpc:
      grpcPort: ${grpc}
      membershipPort: ${member}
      bindOnLocalHost: true${http ? `\n      httpPort: ${http}` : ''}`;
  const configDir = path.join(opts.dataDir, 'config');
  fs.mkdirSync(configDir, { recursive: true });
  fs.writeFileSync(path.join(configDir, 'dynamicconfig.yaml'), 'limit.maxIDLength:\n  - value: 255\n    constraints: {}\n');
  fs.writeFileSync(
    path.join(configDir, 'production.yaml'),
    `log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: ${opts.numHistoryShards ?? 4}
  datastores:
    default:${store(dbs.main, opts.maxConns?.main ?? 5)}
    visibility:${store(dbs.visibility, opts.maxConns?.visibility ?? 2)}
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
  metrics:
    prometheus:
      framework: tally
      timerType: histogram
      listenAddress: "127.0.0.1:${ports.metrics}"
services:
  frontend:${service(opts.port, membership[0]!, ports.http)}
  history:${service(ports.history, membership[1]!)}
  matching:${service(ports.matching, membership[2]!)}
  worker:${service(ports.worker, membership[3]!)}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "127.0.0.1:${opts.port}"
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: "${path.join(configDir, 'dynamicconfig.yaml')}"
  pollInterval: 10s
`,
  );
  const address = `127.0.0.1:${opts.port}`;
  const proc = launch('temporal-server', opts.serverPath, ['--root', opts.dataDir, '--config', 'config', '--env', 'production', '--allow-no-auth', 'start'], {
    env: temporalCliEnv(),
    log: opts.log,
    muteAfterStop: true,
  });
  const deadline = Date.now() + 180_000;
  const remaining = () => Math.max(1_000, deadline - Date.now());
  try {
    await waitForTcp(opts.port, { timeoutMs: remaining(), process: proc, what: `Temporal server frontend on ${address}` });
    await waitUntil(
      async () => {
        const described = await temporalCli(opts.temporalPath, address, ['operator', 'namespace', 'describe', '--namespace', 'default'], 10_000);
        if (described.code === 0) return true;
        await temporalCli(opts.temporalPath, address, ['operator', 'namespace', 'create', '--namespace', 'default', '--retention', '24h'], 10_000);
        return false;
      },
      { timeoutMs: remaining(), intervalMs: 1_000, process: proc, what: `namespace default on ${address}` },
    );
    await ensureSearchAttributes(opts.temporalPath, address, 'default', TEMPORAL_SEARCH_ATTRIBUTES);
  } catch (err) {
    await proc.stop('SIGKILL', 2_000);
    throw err instanceof Error ? err : new Error(String(err));
  }
  return extend(proc, { address, uiUrl: undefined });
}

/** Drops the databases startTemporalServer created (after the server stopped). */
export async function dropTemporalServerDatabases(opts: Pick<TemporalServerOptions, 'postgres' | 'databasePrefix' | 'sqlToolPath'>): Promise<void> {
  const { host, port, user } = opts.postgres;
  for (const db of [opts.databasePrefix, `${opts.databasePrefix}_visibility`]) {
    await runCommand(
      opts.sqlToolPath,
      ['--plugin', 'postgres12', '--ep', host, '-p', String(port), '-u', user, '--db', db, 'drop-database', '-f'],
      temporalCliEnv(),
      {
        timeoutMs: 60_000,
      },
    );
  }
}
