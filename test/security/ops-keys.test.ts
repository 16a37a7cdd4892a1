// API keys at the edge (README.md "Deploying", "At the edge"), the operator side, through the real ops CLI: a key that belongs to another
// tenant is refused (and the refusal audited), keys never travel on argv, and `ops key
// list|rotate|revoke` work against the real API with ids and hashes only in ops_audit.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { configToEnv } from '../../config/env';
import { apiKey, opsAudit, tenant } from '../../db/schema';
import { hashApiKey } from '../../db/tenants';
import { REPO_ROOT, nodeBinary } from '../../harness';
import { createGenerationFacade } from '../../temporal/facade';
import { createTestDatabase, http, startApi, testConfig, type RunningApi, type TestDatabase } from '../support/stack';

let tdb: TestDatabase;
let api: RunningApi;
let env: Record<string, string>;
const config = testConfig();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vidorch-keys-'));

before(async () => {
  tdb = await createTestDatabase(config);
  api = await startApi(config, tdb.database, {
    facade: createGenerationFacade(async () => {
      throw new Error('no Temporal here');
    }, 'unused'),
  });
  env = { ...configToEnv(config), DATABASE_URL: tdb.url, OPS_OPERATOR: 'alice', LOG_LEVEL: 'warn' };
});
after(async () => {
  await api?.close();
  await tdb?.drop();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** The real CLI; `stdin` is written to it and closed. */
function ops(args: string[], stdin = ''): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(nodeBinary(), ['--import', 'tsx', path.join(REPO_ROOT, 'ops/cli.ts'), ...args], { cwd: REPO_ROOT, env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(stdin);
  });
}
const json = (out: string) => JSON.parse(out.trim().split('\n').pop() ?? 'null');
const keyFile = (key: string) => {
  const file = path.join(dir, `key-${Math.random().toString(36).slice(2)}`);
  fs.writeFileSync(file, `${key}\n`, { mode: 0o600 });
  return file;
};
const tenantsNamed = (name: string) => tdb.database.db.select().from(tenant).where(eq(tenant.name, name));
const keyRows = (key: string) =>
  tdb.database.db
    .select()
    .from(apiKey)
    .where(eq(apiKey.key_hash, hashApiKey(key)));
const asTenant = (key: string) => http(api.baseUrl, 'GET', '/v1/tasks', { apiKey: key });
const auditText = async () => JSON.stringify(await tdb.database.db.select().from(opsAudit));

let victimKey = '';
let victimId = '';

describe('a key that belongs to another tenant', () => {
  before(async () => {
    const r = await ops(['tenant', 'create', '--name', 'victim', '--credits', '10', '--json']);
    assert.equal(r.code, 0, r.stderr);
    ({ api_key: victimKey, tenant_id: victimId } = json(r.stdout));
    assert.ok(victimKey.length >= 24);
  });

  test('tenant create --api-key-file with it is refused for a new tenant: no tenant, no key row, the refusal audited without the key', async () => {
    const r = await ops(['tenant', 'create', '--name', 'attacker', '--if-missing', '--json', '--api-key-file', keyFile(victimKey)]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /already issued to another tenant; refused \(the refusal is audited\)/);
    assert.doesNotMatch(r.stdout + r.stderr, new RegExp(victimKey));
    assert.equal((await tenantsNamed('attacker')).length, 0);
    assert.deepEqual(
      (await keyRows(victimKey)).map((k) => k.tenant_id),
      [victimId],
    );
    const [refusal] = await tdb.database.db.select().from(opsAudit).where(eq(opsAudit.action, 'tenant.create.refused'));
    assert.equal(refusal?.actor, 'operator:alice');
    assert.equal((refusal?.detail as { owner_tenant_id: string }).owner_tenant_id, victimId);
    assert.doesNotMatch(await auditText(), new RegExp(victimKey));
  });

  test('--if-missing on an existing tenant with it is refused too: nothing attached, nothing reported as attached', async () => {
    assert.equal((await ops(['tenant', 'create', '--name', 'bystander'])).code, 0);
    const r = await ops(['tenant', 'create', '--name', 'bystander', '--if-missing', '--json', '--api-key-file', '-'], `${victimKey}\n`);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /already issued to another tenant/);
    assert.equal(r.stdout.trim(), '');
    assert.deepEqual(
      (await keyRows(victimKey)).map((k) => k.tenant_id),
      [victimId],
    );
    assert.equal((await asTenant(victimKey)).status, 200, 'the key still works for its own tenant');
  });

  test('a key on argv (--api-key) is refused before anything is written, and is not echoed', async () => {
    const key = 'vo_live_argvkeyargvkeyargvkeyargvkey';
    const r = await ops(['tenant', 'create', '--name', 'argv', '--api-key', key]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /--api-key-file/);
    assert.doesNotMatch(r.stderr + r.stdout, new RegExp(key));
    assert.equal((await tenantsNamed('argv')).length, 0);
    assert.equal((await keyRows(key)).length, 0);
  });

  test('a key read from stdin is stored for a new tenant and works, and is not printed back', async () => {
    const key = 'vo_live_fromstdinfromstdinfromstdin0';
    const r = await ops(['tenant', 'create', '--name', 'stdin-tenant', '--json', '--api-key-file', '-'], key);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(json(r.stdout).api_key, null);
    assert.doesNotMatch(r.stdout, new RegExp(key));
    assert.equal((await asTenant(key)).status, 200);
  });
});

describe('ops key list | rotate | revoke', () => {
  test('list shows ids and prefixes only; rotate prints the new key once and the old one stops working; revoke stops the new one; all audited with hashes only', async () => {
    const created = await ops(['tenant', 'create', '--name', 'rotating', '--json']);
    const { api_key: first, key_id: firstId } = json(created.stdout);
    const list = await ops(['key', 'list', '--tenant', 'rotating', '--json']);
    assert.equal(list.code, 0, list.stderr);
    assert.deepEqual(
      json(list.stdout).keys.map((k: { key_id: string }) => k.key_id),
      [firstId],
    );
    assert.doesNotMatch(list.stdout, new RegExp(`${first}|${hashApiKey(first)}`));

    const rotated = await ops(['key', 'rotate', '--tenant', 'rotating', '--key-id', firstId, '--reason', 'laptop lost']);
    assert.equal(rotated.code, 0, rotated.stderr);
    const second = /API key \(shown once\): (\S+)/.exec(rotated.stdout)?.[1] ?? '';
    assert.ok(second.length >= 24 && second !== first);
    assert.equal((await asTenant(first)).status, 401, 'the old key is revoked (no grace)');
    assert.equal((await asTenant(second)).status, 200);

    const again = await ops(['key', 'list', '--tenant', 'rotating']);
    assert.doesNotMatch(again.stdout, new RegExp(second), 'never shown again');
    assert.match(again.stdout, /revoked/);
    const secondId = json((await ops(['key', 'list', '--tenant', 'rotating', '--json'])).stdout).keys.find(
      (k: { revoked_at: string | null }) => !k.revoked_at,
    ).key_id;

    const revoked = await ops(['key', 'revoke', '--tenant', 'rotating', '--key-id', secondId, '--reason', 'offboarding']);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.equal((await asTenant(second)).status, 401);
    // Revoking it twice is refused (nothing valid to revoke).
    assert.notEqual((await ops(['key', 'revoke', '--tenant', 'rotating', '--key-id', secondId, '--reason', 'again'])).code, 0);

    const audits = await tdb.database.db.select().from(opsAudit);
    const rotation = audits.find((a) => a.action === 'key.rotate');
    assert.deepEqual([rotation?.reason, (rotation?.detail as { old_key_hash: string }).old_key_hash], ['laptop lost', hashApiKey(first)]);
    assert.equal(audits.find((a) => a.action === 'key.revoke')?.reason, 'offboarding');
    assert.doesNotMatch(JSON.stringify(audits), new RegExp(`${first}|${second}`), 'no key in ops_audit');
  });

  test('rotate --grace keeps the old key working until its grace ends', async () => {
    const { api_key: old, key_id: oldId } = json((await ops(['tenant', 'create', '--name', 'graceful', '--json'])).stdout);
    const r = await ops(['key', 'rotate', '--tenant', 'graceful', '--key-id', oldId, '--grace', '1h', '--reason', 'scheduled', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal((await asTenant(old)).status, 200, 'still valid during the grace period');
    assert.equal((await asTenant(json(r.stdout).api_key)).status, 200);
  });
});
