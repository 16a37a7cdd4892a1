// Migrations are a release step (README "Deploying"): the API and the worker never migrate; they
// compare the migrations their build carries (db/migrations' journal) with the ones drizzle has
// recorded, and refuse an older schema with exit code 2, naming what is missing, before they
// open a port, poll or serve. A database ahead of the build (a newer release migrated it) is fine.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { configToEnv } from '../../config/env';
import { carriedMigrations, missingMigrations, SCHEMA_TOO_OLD_EXIT } from '../../db/schema-version';
import { REPO_ROOT, canConnect, nodeBinary, sleep } from '../../harness';
import { createTestDatabase, freePort, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
let database: TestDatabase;
const carried = carriedMigrations();
const last = carried.at(-1)!;

before(async () => {
  database = await createTestDatabase(config);
});
after(() => database.drop());

/** Runs an entry point against `databaseUrl` until it exits, watching its ports for a listener. */
async function start(script: string, databaseUrl: string) {
  const [port, opsPort, workerPort] = [await freePort(), await freePort(), await freePort()];
  const env = {
    ...configToEnv(config),
    DATABASE_URL: databaseUrl,
    PORT: String(port),
    OPS_PORT: String(opsPort),
    WORKER_METRICS_PORT: String(workerPort),
    LOG_PRETTY: 'false',
  };
  const child = spawn(nodeBinary(), ['--import', 'tsx', path.join(REPO_ROOT, script)], {
    cwd: REPO_ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (b: Buffer) => (output += b.toString()));
  child.stderr.on('data', (b: Buffer) => (output += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let done = false;
  void exited.then(() => (done = true));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  let listened = false;
  while (!done) {
    for (const p of [port, opsPort, workerPort]) if (await canConnect(p, '127.0.0.1', 200)) listened = true;
    await sleep(50);
  }
  clearTimeout(timer);
  return { code: await exited, output, listened };
}

describe('the schema a build needs', () => {
  test('a migrated database has every carried migration; one missing its last is named', async () => {
    assert.deepEqual(await missingMigrations(database.database.pool), []);
    await database.database.pool.query('DELETE FROM drizzle.__drizzle_migrations WHERE created_at = $1', [last.when]);
    assert.deepEqual(await missingMigrations(database.database.pool), [last]);
  });

  test('a database ahead of the build (a later release migrated it) is not older', async () => {
    assert.deepEqual(await missingMigrations(database.database.pool, carried.slice(0, -1)), []);
  });

  test('the API refuses the older schema with exit 2, naming the missing migration, and never listens', async () => {
    const r = await start('api/server.ts', database.url);
    assert.equal(r.code, SCHEMA_TOO_OLD_EXIT, r.output);
    assert.match(r.output, /the database schema is older than this build \(1 migration\(s\) not applied\): run the migrations first/);
    assert.ok(r.output.includes(last.tag), `names ${last.tag}`);
    assert.equal(r.listened, false, 'no port was opened');
  });

  test('the worker refuses it too, before its operator listener opens or it polls', async () => {
    const r = await start('workers/main.ts', database.url);
    assert.equal(r.code, SCHEMA_TOO_OLD_EXIT, r.output);
    assert.match(r.output, /schema is older than this build/);
    assert.equal(r.listened, false);
    assert.doesNotMatch(r.output, /worker polling/);
  });

  test('a database never migrated (or not created) has none of it: refused, not created', async () => {
    const url = new URL(database.url);
    url.pathname = `${url.pathname}_never`;
    const r = await start('api/server.ts', url.toString());
    assert.equal(r.code, SCHEMA_TOO_OLD_EXIT, r.output);
    assert.ok(r.output.includes(`${carried.length} migration(s) not applied`), r.output);
    const check = await database.database.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_database WHERE datname = $1', [url.pathname.slice(1)]);
    assert.equal(check.rows[0]!.n, 0, 'the process created no database');
  });
});
