// DATABASE_FAILOVER_HOSTS (docs/decisions/0030): the pool keeps only a read-write server. With a
// dead host first and a streaming standby before the primary, connections land on the primary;
// once the primary is gone and the standby promoted, they land on the new primary, and the pool
// never hands out a connection to a server in recovery; the fence watcher's LISTEN connection
// follows the same way. Real private clusters (pg_basebackup -R).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { isDatabaseUnavailable } from '../../api/problem';
import { loadConfig } from '../../config/env';
import { failoverHosts } from '../../config/services';
import { createDatabase, type Database } from '../../db/client';
import { migrateDatabase } from '../../db/migrate';
import { setMode } from '../../db/modes';
import { createLogger } from '../../observability/logger';
import { startFenceWatcher, type FenceWatcher } from '../../workers/fence-watcher';
import { startPrivatePostgres, startStandby, type PrivatePostgres } from '../../bench/drills/private-postgres';
import { freePort } from '../../harness';

// Under the system's temp folder, not the checkout: the clusters run as the postgres user, who
// must be able to reach them (a clone in a private folder, e.g. one made by mktemp -d, is not).
const root = path.join(os.tmpdir(), `vidorch_failover_hosts_${randomBytes(3).toString('hex')}`);
let primary: PrivatePostgres;
let standby: PrivatePostgres;
let database: Database;
let watcher: FenceWatcher;
let config: ReturnType<typeof loadConfig>;
const SCOPE = 'global';

const serverPort = async () => (await database.pool.query<{ port: number }>('SELECT inet_server_port() AS port')).rows[0]!.port;

before(async () => {
  primary = await startPrivatePostgres(path.join(root, 'primary'));
  standby = await startStandby(path.join(root, 'standby'), primary, 'standby1');
  await migrateDatabase({ url: `postgres://postgres@127.0.0.1:${primary.port}/vidorch_fw`, region: 'region-a', fenceScope: SCOPE });
  const dead = await freePort();
  // As the processes build it: DATABASE_URL's host, then DATABASE_FAILOVER_HOSTS in order.
  config = loadConfig({
    VIDORCH_ENV: 'test',
    DATABASE_URL: `postgres://postgres@127.0.0.1:${dead}/vidorch_fw`,
    DATABASE_FAILOVER_HOSTS: `127.0.0.1:${standby.port},127.0.0.1:${primary.port}`,
  });
  database = createDatabase({ url: config.DATABASE_URL, max: 4, failoverHosts: failoverHosts(config) });
  // Periodic reads once a minute: a change seen within seconds came through the LISTEN connection
  // (its NOTIFY, or the read it makes right after it connects).
  watcher = await startFenceWatcher({
    db: database.db,
    databaseUrl: config.DATABASE_URL,
    failoverHosts: failoverHosts(config),
    scope: SCOPE,
    intervalMs: 60_000,
    logger: createLogger({ name: 'test', level: 'silent', pretty: false }),
  });
});

after(async () => {
  await watcher?.stop();
  await database?.close();
  await standby?.destroy();
  await primary?.destroy();
  fs.rmSync(root, { recursive: true, force: true });
});

async function modeSeen(mode: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (watcher.current()?.mode === mode) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

/** Runs `work` until it succeeds, counting the failures (each one a connection the pool refused to keep). */
async function untilAnswered<T>(work: () => Promise<T>, limit = 50): Promise<{ value: T; failures: Error[] }> {
  const failures: Error[] = [];
  for (;;) {
    try {
      return { value: await work(), failures };
    } catch (err) {
      failures.push(err as Error);
      if (failures.length >= limit) throw err;
    }
  }
}

test('connections skip a dead host and a standby and land on the read-write primary', async () => {
  const fresh = createDatabase({ url: config.DATABASE_URL, max: 4, failoverHosts: failoverHosts(config) });
  const port = async () => (await fresh.pool.query<{ port: number }>('SELECT inet_server_port() AS port')).rows[0]!.port;
  const { value, failures } = await untilAnswered(port);
  assert.equal(value, primary.port);
  // One refused connection for the dead host, one for the standby (it answered in recovery).
  assert.equal(failures.length, 2);
  assert.match(failures[1]!.message, /in recovery/);
  // What the API answers 503 for (api/problem.ts isDatabaseUnavailable), never 500.
  assert.ok(isDatabaseUnavailable(failures[1]));
  // The pool stays on the primary: a burst of queries all answer from it.
  const ports = await Promise.all(Array.from({ length: 8 }, port));
  assert.deepEqual(new Set(ports), new Set([primary.port]));
  await fresh.close();
});

test('the fence watcher LISTENs on the primary through the same candidates', async () => {
  await untilAnswered(() => setMode(database.db, { scope: SCOPE, mode: 'QUEUE_ONLY', actor: 'test', reason: 'listen' }));
  assert.ok(await modeSeen('QUEUE_ONLY', 15_000), 'the NOTIFY reached the watcher');
});

test('after the primary stops and the standby is promoted, the same pool writes on the new primary', async () => {
  await database.pool.query('CREATE TABLE IF NOT EXISTS failover_probe (n int)');
  // A transaction open across the crash: whatever surfaces (the ROLLBACK on the dead client)
  // is "the database is unavailable" (503), never an unclassified error (500).
  let crashed!: () => void;
  let opened!: () => void;
  const crash = new Promise<void>((resolve) => (crashed = resolve));
  const open = new Promise<void>((resolve) => (opened = resolve));
  const outcome = database.db
    .transaction(async (tx) => {
      await tx.execute(sql`INSERT INTO failover_probe VALUES (0)`);
      opened();
      await crash;
      await tx.execute(sql`INSERT INTO failover_probe VALUES (0)`);
    })
    .then(
      () => null,
      (err: unknown) => err,
    );
  await open;
  await primary.crash();
  crashed();
  const err = await outcome;
  assert.ok(err instanceof Error, 'the transaction failed');
  assert.ok(isDatabaseUnavailable(err), `classified as unavailable: ${err.message}`);
  // Before the promotion no candidate is read-write: every attempt fails, none reaches the standby for writing.
  const before = await database.pool.query('INSERT INTO failover_probe VALUES (1)').then(
    () => 'written',
    (err: Error) => err.message,
  );
  assert.notEqual(before, 'written');
  await standby.promote();
  const { value } = await untilAnswered(async () => {
    await database.pool.query('INSERT INTO failover_probe VALUES (2)');
    return serverPort();
  });
  assert.equal(value, standby.port);
  // The table created on the old primary was streamed to the standby before the stop.
  const { rows } = await database.pool.query<{ n: number }>('SELECT n FROM failover_probe ORDER BY n');
  assert.deepEqual(
    rows.map((r) => r.n),
    [2],
  );
  // The LISTEN connection found the new primary too: a mode change there reaches the watcher by NOTIFY.
  await setMode(database.db, { scope: SCOPE, mode: 'RECONCILE_ONLY', actor: 'test', reason: 'after promotion' });
  assert.ok(await modeSeen('RECONCILE_ONLY', 20_000), 'the NOTIFY on the new primary reached the watcher');
});
