// DATABASE_LOCK_TIMEOUT_MS: a process's statement that waits for a row lock gives up after the
// setting (Postgres lock_timeout, 55P03) instead of holding its pooled connection behind a hot row
// for as long as the holder likes; the step then retries.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { buildDatabase } from '../../config/services';
import type { Database } from '../../db/client';
import { createTestDatabase, testConfig, type TestDatabase } from '../support/stack';

let tdb: TestDatabase;
let database: Database;
before(async () => {
  tdb = await createTestDatabase(testConfig());
  database = buildDatabase(testConfig({ DATABASE_URL: tdb.url, DATABASE_LOCK_TIMEOUT_MS: '300' }), 'vidorch-test-lock-timeout');
});
after(async () => {
  await database?.pool.end();
  await tdb?.drop();
});

test("a statement of the process's pool waiting on a held row lock fails after DATABASE_LOCK_TIMEOUT_MS instead of waiting for ever", async () => {
  await tdb.database.db.execute(sql`INSERT INTO provider_control (provider) VALUES ('lock-timeout') ON CONFLICT DO NOTHING`);
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const holder = tdb.database.db.transaction(async (tx) => {
    await tx.execute(sql`SELECT 1 FROM provider_control WHERE provider = 'lock-timeout' FOR UPDATE`);
    await held;
  });
  try {
    const started = Date.now();
    await assert.rejects(
      database.db.transaction((tx) => tx.execute(sql`SELECT 1 FROM provider_control WHERE provider = 'lock-timeout' FOR UPDATE`)),
      (err: unknown) =>
        (err as { cause?: { code?: string }; code?: string }).code === '55P03' || (err as { cause?: { code?: string } }).cause?.code === '55P03',
    );
    const waited = Date.now() - started;
    assert.ok(waited >= 250 && waited < 5_000, `gave up after ${waited} ms`);
  } finally {
    release();
    await holder;
  }
});
