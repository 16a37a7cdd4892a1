// How the processes reach Temporal, Postgres and Redis (docs/security.md "Connections"): one
// builder of Temporal's connection options (TLS, mTLS, an API key) for every client and worker;
// Postgres's TLS read from the URL as libpq means it (verify-full checks the certificate and the
// name, each failover candidate its own); Redis over rediss://; and the TLS settings that
// contradict each other refused at load in every profile.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, describe, test } from 'node:test';
import { databaseUrl, redisConnection, temporalConnection } from '../../config/connections';
import { ConfigError, loadConfig } from '../../config/env';
import { createDatabase, listenClients } from '../../db/client';
import { PgTlsError, pgConnectionOptions } from '../../db/tls';
import { REPO_ROOT } from '../../harness';

/** A reader that names what it read, so the options show which file went where. */
const fakeRead = (file: string) => Buffer.from(`<${file}>`);

const TEMPORAL_OFF = {
  TEMPORAL_ADDRESS: 'temporal.internal:7233',
  TEMPORAL_TLS: false,
  TEMPORAL_TLS_CA_FILE: undefined,
  TEMPORAL_TLS_CERT_FILE: undefined,
  TEMPORAL_TLS_KEY_FILE: undefined,
  TEMPORAL_TLS_SERVER_NAME: undefined,
  TEMPORAL_API_KEY: undefined,
};

describe('the Temporal connection options (config/connections.ts temporalConnection)', () => {
  test('TLS off: the address alone, in plaintext, and no Authorization', () => {
    assert.deepEqual(temporalConnection(TEMPORAL_OFF, fakeRead), { address: 'temporal.internal:7233', tls: false });
  });

  test("TLS on with nothing else: the system's CAs and the address's own name", () => {
    assert.deepEqual(temporalConnection({ ...TEMPORAL_OFF, TEMPORAL_TLS: true }, fakeRead), { address: 'temporal.internal:7233', tls: {} });
  });

  test('mTLS, a private CA, a server name and an API key: each setting lands in its option, the files read', () => {
    const options = temporalConnection(
      {
        ...TEMPORAL_OFF,
        TEMPORAL_TLS: true,
        TEMPORAL_TLS_CA_FILE: '/tls/ca.pem',
        TEMPORAL_TLS_CERT_FILE: '/tls/client.pem',
        TEMPORAL_TLS_KEY_FILE: '/tls/client.key',
        TEMPORAL_TLS_SERVER_NAME: 'frontend.temporal.internal',
        TEMPORAL_API_KEY: 'tcld-key',
      },
      fakeRead,
    );
    assert.deepEqual(options, {
      address: 'temporal.internal:7233',
      tls: {
        serverRootCACertificate: fakeRead('/tls/ca.pem'),
        clientCertPair: { crt: fakeRead('/tls/client.pem'), key: fakeRead('/tls/client.key') },
        serverNameOverride: 'frontend.temporal.internal',
      },
      apiKey: 'tcld-key',
    });
  });

  test('no process builds a Temporal, Redis or Postgres connection of its own: the builders are the only way in', () => {
    const dirs = ['activities', 'api', 'db', 'media', 'net', 'observability', 'ops', 'providers', 'reconcilers', 'storage', 'temporal', 'workers'];
    const files = dirs.flatMap((dir) =>
      (fs.readdirSync(path.join(REPO_ROOT, dir), { recursive: true }) as string[]).filter((f) => f.endsWith('.ts')).map((f) => path.join(dir, f)),
    );
    const where = (pattern: RegExp) => files.filter((f) => pattern.test(fs.readFileSync(path.join(REPO_ROOT, f), 'utf8'))).sort();
    assert.deepEqual(where(/\bTEMPORAL_(ADDRESS|TLS\w*|API_KEY)\b/), [], 'the Temporal settings are read by config/connections.ts only');
    assert.deepEqual(where(/Connection\.connect\(/), ['temporal/connection.ts', 'workers/connect.ts']);
    assert.deepEqual(where(/\bnew Redis\(/), ['api/rate-limit.ts']);
    assert.deepEqual(where(/\bnew pg\.(Pool|Client)\(/), ['db/client.ts', 'db/migrate.ts']);
    for (const file of ['db/client.ts', 'db/migrate.ts']) assert.match(fs.readFileSync(path.join(REPO_ROOT, file), 'utf8'), /pgConnectionOptions\(/, file);
  });
});

describe('Redis (config/connections.ts redisConnection)', () => {
  test("empty: none; redis://: plaintext; rediss://: TLS with the URL's host as the name checked, and the CA file when given", () => {
    assert.equal(redisConnection({ REDIS_URL: '', REDIS_TLS_CA_FILE: undefined }, fakeRead), null);
    assert.deepEqual(redisConnection({ REDIS_URL: 'redis://127.0.0.1:6379', REDIS_TLS_CA_FILE: undefined }, fakeRead), { url: 'redis://127.0.0.1:6379' });
    assert.deepEqual(redisConnection({ REDIS_URL: 'rediss://:pw@redis.internal:6380/1', REDIS_TLS_CA_FILE: '/tls/redis-ca.pem' }, fakeRead), {
      url: 'rediss://:pw@redis.internal:6380/1',
      tls: { ca: fakeRead('/tls/redis-ca.pem'), servername: 'redis.internal' },
    });
    // An address is checked as itself (no SNI); the scheme in capitals is TLS too.
    assert.deepEqual(redisConnection({ REDIS_URL: 'REDISS://10.0.0.7:6380', REDIS_TLS_CA_FILE: undefined }, fakeRead), {
      url: 'REDISS://10.0.0.7:6380',
      tls: {},
    });
  });
});

describe('Postgres TLS from the URL, as libpq reads it (db/tls.ts pgConnectionOptions)', () => {
  const base = 'postgres://vidorch:s3cret@db.internal:5432/vidorch';

  test('no TLS parameter: plaintext, the URL unchanged; disable: plaintext', () => {
    assert.deepEqual(pgConnectionOptions(base, fakeRead), { connectionString: base, ssl: false });
    assert.deepEqual(pgConnectionOptions(`${base}?sslmode=disable&application_name=x`, fakeRead), {
      connectionString: `${base}?application_name=x`,
      ssl: false,
    });
  });

  test("verify-full checks the chain and the name (Node's defaults, the CA given); verify-ca the chain only; require neither unless a CA is given", () => {
    const full = pgConnectionOptions(`${base}?sslmode=verify-full&sslrootcert=/tls/ca.pem`, fakeRead);
    assert.deepEqual(full, { connectionString: base, ssl: { ca: fakeRead('/tls/ca.pem') } });
    const ca = pgConnectionOptions(`${base}?sslmode=verify-ca`, fakeRead);
    assert.equal(ca.connectionString, base);
    assert.ok(ca.ssl && ca.ssl.rejectUnauthorized !== false && ca.ssl.checkServerIdentity?.('other.host', {} as tls.PeerCertificate) === undefined);
    assert.deepEqual(pgConnectionOptions(`${base}?sslmode=require`, fakeRead).ssl, { rejectUnauthorized: false });
    const requireWithCa = pgConnectionOptions(`${base}?sslmode=require&sslrootcert=/tls/ca.pem`, fakeRead).ssl;
    assert.ok(requireWithCa && requireWithCa.ca && requireWithCa.rejectUnauthorized !== false && requireWithCa.checkServerIdentity);
    // A CA or client certificate without sslmode: verify-full; sslrootcert=system: the system's CAs.
    assert.deepEqual(pgConnectionOptions(`${base}?sslcert=/tls/c.pem&sslkey=/tls/c.key`, fakeRead).ssl, {
      cert: fakeRead('/tls/c.pem'),
      key: fakeRead('/tls/c.key'),
    });
    assert.deepEqual(pgConnectionOptions(`${base}?sslrootcert=system`, fakeRead).ssl, {});
  });

  test('DATABASE_TLS_* are added as libpq parameters, so every pool and LISTEN connection is given them', () => {
    const url = databaseUrl({
      DATABASE_URL: `${base}?sslmode=verify-full`,
      DATABASE_TLS_CA_FILE: '/tls/ca.pem',
      DATABASE_TLS_CERT_FILE: undefined,
      DATABASE_TLS_KEY_FILE: undefined,
    });
    assert.equal(url, `${base}?sslmode=verify-full&sslrootcert=%2Ftls%2Fca.pem`);
    assert.deepEqual(pgConnectionOptions(url, fakeRead).ssl, { ca: fakeRead('/tls/ca.pem') });
    assert.equal(
      databaseUrl({ DATABASE_URL: base, DATABASE_TLS_CA_FILE: undefined, DATABASE_TLS_CERT_FILE: undefined, DATABASE_TLS_KEY_FILE: undefined }),
      base,
    );
  });

  test('what cannot be honoured is refused, naming the parameter and never the URL: prefer, allow, pg spellings, half a client certificate', () => {
    for (const query of ['sslmode=prefer', 'sslmode=allow', 'sslmode=no-verify', 'ssl=true', 'sslcert=/tls/c.pem', 'sslrootcert=system&sslmode=require']) {
      assert.throws(
        () => pgConnectionOptions(`${base}?${query}`, fakeRead),
        (err: unknown) => err instanceof PgTlsError && !/s3cret|db\.internal/.test(err.message),
        query,
      );
    }
  });
});

describe('TLS settings that contradict each other are refused at load, in every profile', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vidorch-tls-settings-'));
  const pem = path.join(dir, 'ca.pem');
  fs.writeFileSync(pem, 'a PEM file');
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  function refused(env: Record<string, string>): Map<string, string> {
    try {
      loadConfig({ VIDORCH_ENV: 'test', ...env });
    } catch (err) {
      if (err instanceof ConfigError) return new Map(err.issues.map((i) => [i.field, i.message]));
      throw err;
    }
    return new Map();
  }

  test('Temporal: TLS files or an API key with TLS off, a certificate without its key, a file that cannot be read', () => {
    const off = refused({ TEMPORAL_TLS_CA_FILE: pem, TEMPORAL_TLS_SERVER_NAME: 'frontend', TEMPORAL_API_KEY: 'tcld-key' });
    assert.deepEqual([...off.keys()].sort(), ['TEMPORAL_API_KEY', 'TEMPORAL_TLS_CA_FILE', 'TEMPORAL_TLS_SERVER_NAME']);
    assert.match(off.get('TEMPORAL_API_KEY')!, /TEMPORAL_TLS=true/);
    assert.doesNotMatch(off.get('TEMPORAL_API_KEY')!, /tcld-key/);
    const half = refused({ TEMPORAL_TLS: 'true', TEMPORAL_TLS_CERT_FILE: pem });
    assert.deepEqual([...half.keys()], ['TEMPORAL_TLS_KEY_FILE']);
    const missing = refused({ TEMPORAL_TLS: 'true', TEMPORAL_TLS_CA_FILE: path.join(dir, 'absent.pem') });
    assert.match(missing.get('TEMPORAL_TLS_CA_FILE') ?? '', /cannot be read \(ENOENT\)/);
    // Empty is unset (a compose `${NAME:-}`); with TLS on, everything loads.
    assert.deepEqual([...refused({ TEMPORAL_TLS_CA_FILE: '', TEMPORAL_API_KEY: '' }).keys()], []);
    const loaded = loadConfig({ VIDORCH_ENV: 'test', TEMPORAL_TLS: 'true', TEMPORAL_TLS_CA_FILE: pem, TEMPORAL_API_KEY: 'tcld-key' });
    assert.equal(temporalConnection(loaded).apiKey, 'tcld-key');
  });

  test("Postgres and Redis: a mode that cannot be honoured, a CA named twice, Redis's CA without rediss://", () => {
    assert.match(refused({ DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/vidorch?sslmode=prefer' }).get('DATABASE_URL') ?? '', /prefer/);
    assert.match(
      refused({ DATABASE_URL: `postgres://postgres@127.0.0.1:5432/vidorch?sslrootcert=${pem}`, DATABASE_TLS_CA_FILE: pem }).get('DATABASE_TLS_CA_FILE') ?? '',
      /sslrootcert too/,
    );
    assert.match(
      refused({ DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/vidorch?sslmode=disable', DATABASE_TLS_CA_FILE: pem }).get('DATABASE_URL') ?? '',
      /disable/,
    );
    assert.deepEqual([...refused({ REDIS_TLS_CA_FILE: pem }).keys()], ['REDIS_TLS_CA_FILE']);
    assert.deepEqual([...refused({ REDIS_URL: 'rediss://127.0.0.1:6380', REDIS_TLS_CA_FILE: pem }).keys()], []);
  });
});

/**
 * A server that answers node-postgres's SSLRequest with 'S' and completes the TLS handshake with
 * the certificate `openssl` made (for DNS:localhost only, signed by a throwaway CA), then hangs up:
 * a client that reached it fails with "Connection terminated", one that refused the certificate
 * with the TLS error.
 */
describe(
  'verify-full verifies: node-postgres against a TLS endpoint, through the pool, the failover class and a LISTEN connection',
  { skip: !hasOpenssl() },
  () => {
    let dir = '';
    let server: net.Server;
    let port = 0;
    before(async () => {
      dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vidorch-pg-tls-'));
      makeCertificates(dir);
      const key = fs.readFileSync(path.join(dir, 'server.key'));
      const cert = fs.readFileSync(path.join(dir, 'server.pem'));
      server = net.createServer((socket) => {
        socket.on('error', () => undefined);
        socket.once('data', () => {
          socket.write('S');
          const secure = new tls.TLSSocket(socket, { isServer: true, key, cert });
          secure.on('error', () => undefined);
          secure.once('secure', () => secure.destroy());
        });
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      port = (server.address() as AddressInfo).port;
    });
    after(async () => {
      await new Promise((resolve) => server.close(resolve));
      fs.rmSync(dir, { recursive: true, force: true });
    });

    const url = (host: string, query: string) => `postgres://vidorch:s3cret@${host}:${port}/vidorch?${query}`;
    async function poolError(u: string): Promise<Error & { code?: string }> {
      const database = createDatabase({ url: u, max: 1 });
      try {
        await database.pool.query('SELECT 1');
      } catch (err) {
        return err as Error;
      } finally {
        await database.close().catch(() => undefined);
      }
      assert.fail('the fake server never answers a query');
    }
    const REACHED = /Connection terminated/;

    test("the CA's certificate for the name connected to is accepted; the same certificate reached by another name is refused", async () => {
      const ca = path.join(dir, 'ca.pem');
      assert.match((await poolError(url('localhost', `sslmode=verify-full&sslrootcert=${ca}`))).message, REACHED);
      assert.equal((await poolError(url('127.0.0.1', `sslmode=verify-full&sslrootcert=${ca}`))).code, 'ERR_TLS_CERT_ALTNAME_INVALID');
      // verify-ca does not check the name; require checks nothing.
      assert.match((await poolError(url('127.0.0.1', `sslmode=verify-ca&sslrootcert=${ca}`))).message, REACHED);
      assert.match((await poolError(url('127.0.0.1', 'sslmode=require'))).message, REACHED);
    });

    test("without the CA (the system's), verify-full refuses a certificate no public CA signed", async () => {
      const err = await poolError(url('localhost', 'sslmode=verify-full'));
      assert.match(err.code ?? err.message, /SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER/);
    });

    test('each failover candidate is checked under its own name: the pool moves past the one whose name the certificate lacks', async () => {
      const ca = path.join(dir, 'ca.pem');
      const database = createDatabase({ url: url('127.0.0.1', `sslmode=verify-full&sslrootcert=${ca}`), max: 1, failoverHosts: [{ host: 'localhost', port }] });
      try {
        const first = await database.pool.query('SELECT 1').catch((err: Error & { code?: string }) => err);
        assert.equal((first as { code?: string }).code, 'ERR_TLS_CERT_ALTNAME_INVALID');
        const second = await database.pool.query('SELECT 1').catch((err: Error) => err);
        assert.match((second as Error).message, REACHED);
      } finally {
        await database.close().catch(() => undefined);
      }
    });

    test('a LISTEN connection takes the same TLS', async () => {
      const ca = path.join(dir, 'ca.pem');
      const client = listenClients({ url: url('127.0.0.1', `sslmode=verify-full&sslrootcert=${ca}`), applicationName: 'tls-test', timeoutMs: 5_000 })();
      client.on('error', () => undefined);
      const err = await client.connect().then(
        () => null,
        (e: Error & { code?: string }) => e,
      );
      assert.equal(err?.code, 'ERR_TLS_CERT_ALTNAME_INVALID');
    });
  },
);

function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A throwaway CA and a server certificate it signed for DNS:localhost only. */
function makeCertificates(dir: string): void {
  const run = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-subj', '/CN=vidorch test CA', '-days', '2');
  run('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost');
  fs.writeFileSync(path.join(dir, 'san.ext'), 'subjectAltName=DNS:localhost\n');
  run('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'san.ext');
}
