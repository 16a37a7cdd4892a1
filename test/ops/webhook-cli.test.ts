// `ops webhook list | deliveries | redeliver` as an operator runs them (node ops/cli.ts): the
// endpoints with their counts, the log (a task's own webhook_url too), and a redeliver that is
// due at once and audited in ops_audit. No secret is ever printed.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { createTask } from '../support/deps';
import { configToEnv } from '../../config/env';
import { opsAudit, webhookDelivery, webhookEndpointSecret } from '../../db/schema';
import { addSigningSecret, createSecretBox } from '../../db/webhook-secrets';
import { insertEndpoint } from '../../db/webhooks';
import { createTenant } from '../../ops/tenants';
import { runNodeScript } from '../../harness';
import { createTestDatabase, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let env: Record<string, string>;
const name = `wh_cli_${randomBytes(3).toString('hex')}`;
let endpointId = '';
let taskId = '';

before(async () => {
  tdb = await createTestDatabase(config);
  env = { ...configToEnv(config), DATABASE_URL: tdb.url, OPS_OPERATOR: 'alice', LOG_LEVEL: 'warn' };
  const db = tdb.database.db;
  const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
  const t = await createTenant(db, { name, credits: '100', ifMissing: false, actor: 'test', fence });
  const ep = await insertEndpoint(db, { tenantId: t.tenant_id, url: 'https://hooks.example.com/cli', description: null, events: null });
  endpointId = ep.endpoint_id;
  await addSigningSecret(db, createSecretBox(config.WEBHOOK_SECRET_KEY), endpointId);
  const token = { ...fence, epoch: 1 };
  const body = {
    model: 'minimax/video-01',
    prompt: 'a fox',
    duration_seconds: 6,
    resolution: '720p' as const,
    priority: 0,
    webhook_url: 'https://per-task.example.com/x',
  };
  taskId = (await createTask(db, token, { tenantId: t.tenant_id, idempotencyKey: 'cli-1', body })).task.task_id;
  await cancelTask(db, token, t.tenant_id, taskId);
});
after(async () => {
  await tdb?.drop();
});

const ops = (...args: string[]) => opsWith({}, ...args);

async function opsWith(extra: Record<string, string>, ...args: string[]) {
  const r = await runNodeScript('ops/cli.ts', args, { ...env, ...extra }, { timeoutMs: 60_000 });
  assert.equal(r.code, 0, r.stderr);
  assert.ok(!/whsec_/.test(r.stdout + r.stderr), 'no secret printed');
  return JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null');
}

test('ops webhook list and deliveries show the endpoint, its counts and both deliveries of the event', async () => {
  const list = await ops('webhook', 'list', '--tenant', name, '--json');
  assert.equal(list.endpoints.length, 1);
  assert.equal(list.endpoints[0].id, endpointId);
  assert.equal(list.endpoints[0].pending, 1);
  assert.equal(list.task_urls.pending, 1);
  const rows = await ops('webhook', 'deliveries', '--tenant', name, '--task', taskId, '--json');
  assert.equal(rows.length, 2);
  assert.deepEqual(rows.map((r: { target: string }) => r.target).sort(), [`endpoint ${endpointId}`, 'task webhook_url']);
  assert.ok(rows.every((r: { event_type: string; webhook_id: string }) => r.event_type === 'task.cancelled' && r.webhook_id === rows[0].webhook_id));
});

test('ops webhook redeliver makes the delivery due now and audits who and why', async () => {
  const db = tdb.database.db;
  const [d] = await db.select().from(webhookDelivery).where(eq(webhookDelivery.endpoint_id, endpointId));
  await db
    .update(webhookDelivery)
    .set({ state: 'failed', next_attempt_at: new Date(Date.now() + 3_600_000) })
    .where(eq(webhookDelivery.delivery_id, d!.delivery_id));
  const r = await ops('webhook', 'redeliver', d!.delivery_id, '--reason', 'tenant fixed their receiver', '--json');
  assert.equal(r.state, 'pending');
  const [after] = await db.select().from(webhookDelivery).where(eq(webhookDelivery.delivery_id, d!.delivery_id));
  assert.equal(after!.state, 'pending');
  assert.ok(after!.next_attempt_at.getTime() <= Date.now() + 1_000);
  const [audit] = await db.select().from(opsAudit).where(eq(opsAudit.audit_id, r.audit_id));
  assert.equal(audit!.action, 'webhook.redeliver');
  assert.equal(audit!.actor, 'operator:alice');
  assert.equal(audit!.reason, 'tenant fixed their receiver');
});

test('ops webhook reseal: after a key rotation every secret is sealed under the new key (audited), the retired key can go; a secret under no configured key fails the command', async () => {
  const oldKey = config.WEBHOOK_SECRET_KEY;
  const newKey = `rotated-${randomBytes(16).toString('hex')}`;
  const db = tdb.database.db;
  const rows = async () => db.select().from(webhookEndpointSecret).where(eq(webhookEndpointSecret.endpoint_id, endpointId));
  const plainBefore = (await rows()).map((r) => createSecretBox(oldKey).open(endpointId, r.sealed));
  const rotatedEnv = { WEBHOOK_SECRET_KEY: newKey, WEBHOOK_SECRET_KEY_PREVIOUS: oldKey };
  const first = await opsWith(rotatedEnv, 'webhook', 'reseal', '--reason', 'key rotation', '--json');
  assert.equal(first.resealed, plainBefore.length);
  assert.deepEqual(first.unreadable, []);
  // The new key alone opens every one now, to the same secret.
  assert.deepEqual(
    (await rows()).map((r) => createSecretBox(newKey).open(endpointId, r.sealed)),
    plainBefore,
  );
  const [audit] = await db.select().from(opsAudit).where(eq(opsAudit.audit_id, first.audit_id));
  assert.equal(audit?.action, 'webhook.reseal');
  assert.equal(audit?.actor, 'operator:alice');
  assert.equal((await opsWith(rotatedEnv, 'webhook', 'reseal', '--reason', 'again', '--json')).resealed, 0, 'a second run has nothing to do');

  // A key nobody listed: the secret is counted unreadable, left as it is, and the command fails.
  const stray = { WEBHOOK_SECRET_KEY: `other-${randomBytes(16).toString('hex')}` };
  const r = await runNodeScript('ops/cli.ts', ['webhook', 'reseal', '--reason', 'wrong key'], { ...env, ...stray }, { timeoutMs: 60_000 });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stdout, /secret [0-9a-f-]{36} of endpoint [0-9a-f-]{36} opens under no configured key/);
  assert.ok(!/whsec_/.test(r.stdout + r.stderr), 'no secret printed');
  assert.deepEqual(
    (await rows()).map((r2) => createSecretBox(newKey).open(endpointId, r2.sealed)),
    plainBefore,
  );
});
