import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import * as schema from './schema';

export type Db = NodePgDatabase<typeof schema>;
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

export function createDatabase(opts: { url: string; max?: number; applicationName?: string; statementTimeoutMs?: number }): Database {
  const pool = new pg.Pool({
    connectionString: opts.url,
    max: opts.max ?? 10,
    application_name: opts.applicationName ?? 'vidorch',
    ...(opts.statementTimeoutMs ? { statement_timeout: opts.statementTimeoutMs } : {}),
    // Fail fast when Postgres is down instead of queueing callers forever.
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
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
