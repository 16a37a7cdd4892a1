import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import * as schema from './schema';
import { pgConnectionOptions } from './tls';

/** The drizzle handle, and the pool under it (`$client`) for the few named statements of hot paths. */
export type Db = NodePgDatabase<typeof schema> & { readonly $client: pg.Pool };
/** A transaction handle: the same query surface as Db. */
export type Tx = Parameters<Parameters<Db['transaction']>[0]>[0];
export type DbOrTx = Db | Tx;

export interface Database {
  /** The connection URL (it may carry a password: never log it). */
  readonly url: string;
  readonly db: Db;
  readonly pool: pg.Pool;
  close(): Promise<void>;
}

/** One candidate server of the facts database (DATABASE_FAILOVER_HOSTS entries). */
export interface DatabaseHost {
  readonly host: string;
  readonly port: number;
}

/** A connection reached a server that is not read-write (a standby still in recovery). */
export class StandbyServerError extends Error {
  /** SQLSTATE 08001 (unable to establish a connection), as libpq fails a read-write target: callers treat it as the database unavailable (503, retry). */
  readonly code = '08001';
  constructor(readonly server: DatabaseHost) {
    super(`${server.host}:${server.port} is in recovery (a standby), not the read-write primary`);
    this.name = 'StandbyServerError';
  }
}

/**
 * The pool's connection class when the facts database has failover hosts (docs/decisions/0030):
 * libpq's `target_session_attrs=read-write`, which node-postgres does not implement. Every new
 * connection goes to the current candidate and must answer `pg_is_in_recovery() = false`; a
 * candidate that refuses the connection or is a standby moves the pool on to the next one in
 * order (wrapping), so after a promotion the pool finds the new primary with at most one failed
 * connection per unusable candidate. Connections already open are not checked again: a server
 * that stops drops them, and PostgreSQL never demotes a primary in place.
 */
function failoverClientClass(candidates: readonly DatabaseHost[]): typeof pg.Client {
  let current = 0;
  return class FailoverClient extends pg.Client {
    readonly #index: number;
    constructor(config?: string | pg.ClientConfig) {
      const given = typeof config === 'string' ? { connectionString: config } : (config ?? {});
      const index = current;
      super({ ...given, connectionString: onServer(given.connectionString ?? '', candidates[index]!) });
      this.#index = index;
    }

    #moveOn(): void {
      // Only the first failure seen on this candidate moves the pool; later ones are stale.
      if (current === this.#index) current = (this.#index + 1) % candidates.length;
    }

    override connect(): Promise<pg.Client>;
    override connect(callback: (err: Error | null, client?: pg.Client) => void): void;
    override connect(callback?: (err: Error | null, client?: pg.Client) => void): Promise<pg.Client> | void {
      const checked = super.connect().then(async (): Promise<pg.Client> => {
        const { rows } = await this.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
        if (rows[0]?.standby) {
          await this.end().catch(() => undefined);
          throw new StandbyServerError(candidates[this.#index]!);
        }
        return this;
      });
      const settled = checked.catch((err: unknown) => {
        this.#moveOn();
        throw err;
      });
      if (!callback) return settled;
      settled.then(
        (client) => callback(null, client),
        (err: Error) => callback(err),
      );
    }
  };
}

/** The connection URL pointed at another server (the connection string wins over host/port in pg). */
function onServer(url: string, server: DatabaseHost): string {
  const u = new URL(url);
  u.host = `${server.host.includes(':') ? `[${server.host}]` : server.host}:${server.port}`;
  return u.toString();
}

/** DATABASE_URL's own host first, then the failover hosts, each tried in that order. */
export function databaseCandidates(url: string, failoverHosts: readonly DatabaseHost[]): DatabaseHost[] {
  const u = new URL(url);
  return [{ host: u.hostname, port: Number(u.port || 5432) }, ...failoverHosts];
}

/**
 * A LISTEN connection's attempt (its connect, then its LISTEN) fails after this, and its owner
 * retries: a server that accepts and never answers must not leave it unconnected for good.
 */
const LISTEN_CONNECT_TIMEOUT_MS = 10_000;

/**
 * The connection class for a single connection outside the pool (a LISTEN): pg.Client, or with
 * failover hosts the read-write-only class the pool uses (its own candidate cursor).
 */
function connectionClass(url: string, failoverHosts: readonly DatabaseHost[] = []): typeof pg.Client {
  return failoverHosts.length > 0 ? failoverClientClass(databaseCandidates(url, failoverHosts)) : pg.Client;
}

/**
 * Makes the LISTEN connections of one owner (api/event-hub.ts, workers/fence-watcher.ts,
 * workers/slot-grant-waker.ts): through the failover hosts as the pool connects, each connect and
 * each query bounded by `timeoutMs` (LISTEN_CONNECT_TIMEOUT_MS), so an attempt the server never
 * answers fails and its owner retries.
 */
export function listenClients(opts: {
  readonly url: string;
  readonly failoverHosts?: readonly DatabaseHost[] | undefined;
  readonly applicationName: string;
  readonly timeoutMs?: number | undefined;
}): () => pg.Client {
  const Client = connectionClass(opts.url, opts.failoverHosts);
  const target = pgConnectionOptions(opts.url);
  const timeoutMs = opts.timeoutMs ?? LISTEN_CONNECT_TIMEOUT_MS;
  return () => new Client({ ...target, application_name: opts.applicationName, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs });
}

/**
 * Ends a connection its owner has let go of: no listener of the owner's is left on it, and a late
 * error (the server's FATAL after 'end') is swallowed rather than unhandled. Never rejects.
 */
export function discardClient(client: pg.Client): Promise<void> {
  client.removeAllListeners();
  client.on('error', () => undefined);
  return client.end().catch(() => undefined);
}

export function createDatabase(opts: {
  url: string;
  max?: number;
  applicationName?: string;
  statementTimeoutMs?: number;
  /** A statement that waits this long for a lock fails (55P03) instead of holding its connection. */
  lockTimeoutMs?: number;
  /** Further servers tried after the URL's host; each connection must be read-write (docs/decisions/0030). */
  failoverHosts?: readonly DatabaseHost[];
}): Database {
  const failover = opts.failoverHosts?.length ? { Client: connectionClass(opts.url, opts.failoverHosts) } : {};
  const pool = new pg.Pool({
    // The URL's TLS parameters (sslmode, sslrootcert, …) as libpq means them (db/tls.ts).
    ...pgConnectionOptions(opts.url),
    max: opts.max ?? 10,
    application_name: opts.applicationName ?? 'vidorch',
    ...(opts.statementTimeoutMs ? { statement_timeout: opts.statementTimeoutMs } : {}),
    ...(opts.lockTimeoutMs ? { lock_timeout: opts.lockTimeoutMs } : {}),
    // Fail fast when Postgres is down instead of queueing callers forever.
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    ...failover,
  });
  // An idle client's error (e.g. the server restarted) must not crash the process.
  pool.on('error', () => undefined);
  // Nor a checked-out one's: the pool drops its own error listener while a client is lent out,
  // and a server shutdown (FATAL 57P01) arriving between two queries of a transaction would be
  // an unhandled 'error'. The query in progress still fails; the broken client is not reused.
  pool.on('connect', (client) => {
    client.on('error', () => undefined);
  });
  const db = drizzle(pool, { schema });
  return { url: opts.url, db, pool, close: () => pool.end() };
}

export { schema };
