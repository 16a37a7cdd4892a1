// The schema a build needs: the migrations it carries (db/migrations; `npm run build` copies them
// into dist/) against the ones drizzle has recorded as applied. Migrations are a release step
// (the migrate image, the migration Job), never a side effect of a process starting; the API and
// the worker only check, and refuse to run on an older schema (README "Deploying").
import fs from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';

/** Beside this module (db/), or beside the bundled entry point (dist/), as db/migrate.ts finds them. */
const MIGRATIONS = path.join(path.dirname(fileURLToPath(import.meta.url)), 'migrations');

export interface CarriedMigration {
  readonly tag: string;
  /** drizzle-kit's folder timestamp: drizzle records it as the migration's created_at. */
  readonly when: number;
}

/** The migrations this build carries, oldest first (drizzle-kit's journal). */
export function carriedMigrations(dir = MIGRATIONS): CarriedMigration[] {
  const journal = JSON.parse(fs.readFileSync(path.join(dir, 'meta', '_journal.json'), 'utf8')) as { entries: CarriedMigration[] };
  return journal.entries.map(({ tag, when }) => ({ tag, when })).sort((a, b) => a.when - b.when);
}

interface Queryable {
  query(sql: string): Promise<{ rows: Record<string, unknown>[] }>;
}

/**
 * The carried migrations the database has not applied. drizzle's migrator applies every
 * migration newer than the latest it recorded, so that is the test here too; a database ahead
 * of the build (a newer release migrated it, this one still runs) is fine.
 */
export async function missingMigrations(db: Queryable, carried = carriedMigrations()): Promise<CarriedMigration[]> {
  const { rows } = await db.query(
    `SELECT CASE WHEN to_regclass('drizzle.__drizzle_migrations') IS NULL THEN NULL
            ELSE (SELECT coalesce(max(created_at), 0)::text FROM drizzle.__drizzle_migrations) END AS last`,
  );
  const last = rows[0]?.['last'];
  const lastApplied = typeof last === 'string' ? Number(last) : -1;
  return carried.filter((m) => m.when > lastApplied);
}

/** A failure to reach the database (worth waiting out), not an answer from it. */
function isUnreachable(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string') return err instanceof Error && /timeout|terminated|Connection/i.test(err.message);
  return (
    code.startsWith('08') || code.startsWith('57P') || ['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH'].includes(code)
  );
}

/** The exit code of a process that refuses an older schema (as for a refused configuration). */
export const SCHEMA_TOO_OLD_EXIT = 2;

/**
 * For the API's and the worker's start: waits while the database cannot be reached, then exits
 * with SCHEMA_TOO_OLD_EXIT, naming what is missing, when the schema is older than this build (a
 * database that does not exist yet has none of it).
 */
export async function requireCurrentSchemaOrExit(db: Queryable, logger: Logger, opts: { retryMs?: number } = {}): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      const missing = await missingMigrations(db).catch((err: unknown) => {
        if ((err as { code?: unknown }).code === '3D000') return carriedMigrations();
        throw err;
      });
      if (missing.length === 0) return;
      logger.fatal(
        { missing: missing.map((m) => m.tag), needed: missing.at(-1)?.tag },
        `the database schema is older than this build (${missing.length} migration(s) not applied): run the migrations first ` +
          '(the migrate image or job: node dist/migrate.js; npm run db:migrate in development), then start this process again',
      );
      process.exit(SCHEMA_TOO_OLD_EXIT);
    } catch (err) {
      if (!isUnreachable(err)) throw err;
      logger.warn({ err, attempt }, 'cannot reach the database to check its schema; retrying');
      await sleep(Math.min(opts.retryMs ?? 1_000 * attempt, 10_000));
    }
  }
}
