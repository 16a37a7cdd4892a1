// Creates the database when missing, applies drizzle-kit migrations, and makes sure the
// region fence row exists. Safe to run concurrently (advisory lock) and repeatedly.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { createDatabase } from './client';
import { regionWriteFence } from './schema';
import { pgConnectionOptions } from './tls';

const MIGRATIONS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'migrations');
const MIGRATION_LOCK = 7_307_001;

/** CREATE DATABASE <name of url> unless it exists (connects to the server's `postgres` db). */
export async function ensureDatabase(url: string): Promise<boolean> {
  const target = new URL(url);
  const name = decodeURIComponent(target.pathname.replace(/^\//, ''));
  if (!/^[A-Za-z0-9_]+$/.test(name)) throw new Error(`unsupported database name ${JSON.stringify(name)}`);
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new pg.Client(pgConnectionOptions(admin.toString()));
  await client.connect();
  try {
    const found = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (found.rowCount) return false;
    try {
      await client.query(`CREATE DATABASE "${name}"`);
    } catch (err) {
      // Another process created it between our check and our CREATE.
      if ((err as { code?: string }).code !== '42P04') throw err;
      return false;
    }
    return true;
  } finally {
    await client.end();
  }
}

export async function dropDatabase(url: string): Promise<void> {
  const name = decodeURIComponent(new URL(url).pathname.replace(/^\//, ''));
  const admin = new URL(url);
  admin.pathname = '/postgres';
  const client = new pg.Client(pgConnectionOptions(admin.toString()));
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  } finally {
    await client.end();
  }
}

export interface MigrateOptions {
  readonly url: string;
  /** The fence row created when none exists: the first region to own writes. */
  readonly region: string;
  readonly fenceScope: string;
}

export async function migrateDatabase(opts: MigrateOptions): Promise<{ created: boolean }> {
  const created = await ensureDatabase(opts.url);
  const database = createDatabase({ url: opts.url, max: 2, applicationName: 'vidorch-migrate' });
  const lock = await database.pool.connect();
  try {
    await lock.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await migrate(database.db, { migrationsFolder: MIGRATIONS });
    await database.db
      .insert(regionWriteFence)
      .values({ resource_scope: opts.fenceScope, active_region: opts.region, write_epoch: 1, mode: 'NORMAL' })
      .onConflictDoNothing();
  } finally {
    await lock.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    lock.release();
    await database.close();
  }
  return { created };
}

const isMain = process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1]);
if (isMain) {
  const { loadConfigOrExit } = await import('../config/env');
  const { databaseUrl } = await import('../config/connections');
  const config = loadConfigOrExit();
  const started = Date.now();
  const { created } = await migrateDatabase({
    url: databaseUrl(config),
    region: config.REGION,
    fenceScope: config.FENCE_SCOPE,
  });
  const safeUrl = new URL(config.DATABASE_URL);
  safeUrl.password = safeUrl.password ? '***' : '';
  console.log(`migrate: ${created ? 'created and ' : ''}migrated ${safeUrl.toString()} in ${Date.now() - started} ms`);
}
