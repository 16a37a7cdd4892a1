// A transition and its webhook event are one write (docs/decisions/0018-tenant-webhooks.md):
// the trigger on task_transition records the event and its deliveries in the transition's own
// transaction, so a failing event write rolls the transition back, and every transition to a
// status tenants hear about has exactly one event. Also the secret box and the schedule.
import assert from 'node:assert/strict';
import { createCipheriv, createHash, randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { changeEndpoint, createEndpoint } from '../../api/webhooks.service';
import { ModePausedError, setMode } from '../../db/modes';
import { createTask } from '../support/deps';
import { FenceRejectedError, holdFence } from '../../db/fence';
import { generationTask, taskTransition, webhookDelivery, webhookEndpoint, webhookEvent } from '../../db/schema';
import { casTaskStatus } from '../../db/tasks';
import { createSecretBox } from '../../db/webhook-secrets';
import { claimDueDeliveries, insertEndpoint, recordAttempt, redeliver, type ClaimedDelivery, type ClaimLimits } from '../../db/webhooks';
import { ALLOWED_TRANSITIONS } from '../../domain/task-machine';
import type { TaskStatus } from '../../domain/states';
import { afterFailure, delayBeforeStep, shouldDisable } from '../../domain/webhook-schedule';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let tenantId = '';
const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
const body = { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p' as const, priority: 0 };

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '100'));
  await insertEndpoint(tdb.database.db, { tenantId, url: 'https://hooks.example.com/a', description: null, events: null });
  await insertEndpoint(tdb.database.db, { tenantId, url: 'https://hooks.example.com/failed-only', description: null, events: ['task.failed'] });
});
after(async () => {
  await tdb?.drop();
});

const db = () => tdb.database.db;
/** One claim with the tenant caps out of the way (their own tests: test/db/webhook-claim.test.ts). */
const claim = async (limits: Pick<ClaimLimits, 'limit' | 'perTarget' | 'leaseMs'>, fence = token) =>
  (await claimDueDeliveries(db(), fence, { perTenant: 100_000, perTenantPass: 100_000, afterTenant: null, ...limits })).claimed;
const health = { disableAfterMs: 1e9, timeoutBackoff: { baseMs: 30_000, maxMs: 600_000 } };
const newTask = async (key: string) => (await createTask(db(), token, { tenantId, idempotencyKey: key, body })).task.task_id;
const eventsOf = (taskId: string) => db().select().from(webhookEvent).where(eq(webhookEvent.task_id, taskId));
const deliveriesOf = (eventId: string) => db().select().from(webhookDelivery).where(eq(webhookDelivery.event_id, eventId));

test('a cancel records its task.cancelled event and one delivery per subscribed endpoint, in the same transaction', async () => {
  const id = await newTask('atom-1');
  assert.deepEqual(await eventsOf(id), [], 'QUEUED makes no event');
  const task = await cancelTask(db(), token, tenantId, id);
  const [ev, ...more] = await eventsOf(id);
  assert.equal(more.length, 0);
  assert.equal(ev!.event_type, 'task.cancelled');
  assert.equal(ev!.status_version, task.status_version);
  assert.equal(ev!.data['status'], 'CANCELLED');
  assert.equal(ev!.data['task_id'], id);
  const ds = await deliveriesOf(ev!.event_id);
  assert.equal(ds.length, 1, 'the failed-only endpoint is not subscribed to task.cancelled');
  assert.equal(ds[0]!.state, 'pending');
});

test('a failing event write rolls the transition back: no transition without its event', async () => {
  const id = await newTask('atom-2');
  await db().execute(sql`ALTER TABLE webhook_delivery ADD CONSTRAINT sabotage CHECK (false) NOT VALID`);
  try {
    await assert.rejects(cancelTask(db(), token, tenantId, id), (err: Error) => /sabotage/.test(String((err.cause as Error | undefined)?.message)));
  } finally {
    await db().execute(sql`ALTER TABLE webhook_delivery DROP CONSTRAINT sabotage`);
  }
  const [task] = await db().select().from(generationTask).where(eq(generationTask.task_id, id));
  assert.equal(task!.status, 'QUEUED');
  assert.equal(task!.status_version, 0);
  const transitions = await db().select().from(taskTransition).where(eq(taskTransition.task_id, id));
  assert.deepEqual(
    transitions.map((t) => t.to_status),
    ['QUEUED'],
  );
  assert.deepEqual(await eventsOf(id), []);
});

test('every status tenants hear about makes exactly one event of its type; the others none', async () => {
  const walk: TaskStatus[] = [
    'QUEUED',
    'DISPATCHING',
    'SUBMITTING',
    'SUBMITTED',
    'RUNNING',
    'PROVIDER_SUCCEEDED',
    'FETCHING_OUTPUT',
    'OUTPUT_AT_RISK',
    'MANUAL_REVIEW',
    'FAILED',
  ];
  const id = await newTask('atom-3');
  for (let i = 1; i < walk.length; i += 1) {
    const [from, to] = [walk[i - 1]!, walk[i]!];
    assert.ok(ALLOWED_TRANSITIONS[from].includes(to), `${from} → ${to} is a transition`);
    await db().transaction(async (tx) => {
      await holdFence(tx, token);
      assert.equal(await casTaskStatus(tx, token, { taskId: id, from, expectedVersion: i - 1, to, sourceEvent: 'test', actor: 'test' }), i);
    });
  }
  const events = (await eventsOf(id)).sort((a, b) => a.status_version! - b.status_version!);
  assert.deepEqual(
    events.map((e) => [e.status, e.event_type, e.status_version]),
    [
      ['OUTPUT_AT_RISK', 'task.output_at_risk', 7],
      ['MANUAL_REVIEW', 'task.needs_attention', 8],
      ['FAILED', 'task.failed', 9],
    ],
  );
  // The failed-only endpoint got task.failed; the all-events endpoint got all three.
  const counts = await Promise.all(events.map(async (e) => (await deliveriesOf(e.event_id)).length));
  assert.deepEqual(counts, [1, 1, 2]);
});

test('the relay claims and records only under the region fence: a fenced-off relay takes no lease and records nothing', async () => {
  const id = await newTask('fence-1');
  await cancelTask(db(), token, tenantId, id);
  const [ev] = await eventsOf(id);
  const stale = { ...token, region: 'region-elsewhere' };
  await assert.rejects(claim({ limit: 10, perTarget: 4, leaseMs: 30_000 }, stale), FenceRejectedError);
  for (const d of await deliveriesOf(ev!.event_id)) assert.equal(d.lease_until, null, 'no lease taken by the fenced-off relay');

  const claimed = (await claim({ limit: 50, perTarget: 50, leaseMs: 30_000 })).filter((c) => c.event_id === ev!.event_id);
  assert.ok(claimed.length >= 1, 'the active region claims it');
  const attempt = { url: 'https://example.com/h', startedAt: new Date(), ok: true, status: 200, latencyMs: 5, error: null, excerpt: null, timedOut: false };
  await assert.rejects(recordAttempt(db(), stale, claimed[0]!, attempt, { kind: 'delivered' }, health), FenceRejectedError);
  const [still] = await db().select().from(webhookDelivery).where(eq(webhookDelivery.delivery_id, claimed[0]!.delivery_id));
  assert.equal(still!.state, 'pending', 'nothing recorded by the fenced-off relay');
  assert.equal(still!.attempt_count, 0);
});

test('a record from a claim that no longer holds the lease (expired and taken again) keeps the new claim and sets no step', async () => {
  const id = await newTask('lease-owner-1');
  await cancelTask(db(), token, tenantId, id);
  const [ev] = await eventsOf(id);
  const mine = (cs: ClaimedDelivery[]) => cs.filter((c) => c.event_id === ev!.event_id);
  const [first] = mine(await claim({ limit: 50, perTarget: 50, leaseMs: 1 }));
  await new Promise((r) => setTimeout(r, 20));
  const [second] = mine(await claim({ limit: 50, perTarget: 50, leaseMs: 30_000 })).filter((c) => c.delivery_id === first!.delivery_id);
  assert.ok(second, 'the expired lease is claimed again');
  const failed = {
    url: 'https://example.com/h',
    startedAt: new Date(),
    ok: false,
    status: 500,
    latencyMs: 5,
    error: 'answered 500',
    excerpt: null,
    timedOut: false,
  };
  await recordAttempt(db(), token, first!, failed, { kind: 'failed' }, health);
  const [after1] = await db().select().from(webhookDelivery).where(eq(webhookDelivery.delivery_id, first!.delivery_id));
  assert.equal(after1!.state, 'pending', "the stale claim's outcome is not the delivery's");
  assert.equal(after1!.attempt_count, 1, 'its attempt is counted');
  assert.ok(after1!.lease_until && after1!.lease_until > new Date(), 'the second claim keeps its lease');
  await recordAttempt(db(), token, second, { ...failed, ok: true, status: 200, error: null }, { kind: 'delivered' }, health);
  const [after2] = await db().select().from(webhookDelivery).where(eq(webhookDelivery.delivery_id, first!.delivery_id));
  assert.equal(after2!.state, 'succeeded');
  assert.equal(after2!.lease_until, null);
});

test('a redeliver while an attempt is in flight: that attempt failing on its last step does not fail the delivery, which is due again at once', async () => {
  const id = await newTask('lease-owner-2');
  await cancelTask(db(), token, tenantId, id);
  const [ev] = await eventsOf(id);
  const [claimed] = (await claim({ limit: 50, perTarget: 50, leaseMs: 30_000 })).filter((c) => c.event_id === ev!.event_id);
  assert.ok(claimed?.endpoint_id);
  assert.ok(await redeliver(db(), claimed.endpoint_id, claimed.delivery_id));
  const failed = {
    url: 'https://example.com/h',
    startedAt: new Date(),
    ok: false,
    status: 500,
    latencyMs: 5,
    error: 'answered 500',
    excerpt: null,
    timedOut: false,
  };
  await recordAttempt(db(), token, claimed, failed, { kind: 'failed' }, health);
  const [d] = await db().select().from(webhookDelivery).where(eq(webhookDelivery.delivery_id, claimed.delivery_id));
  assert.equal(d!.state, 'pending', 'the redeliver stands');
  assert.equal(d!.schedule_step, 0);
  const again = (await claim({ limit: 50, perTarget: 50, leaseMs: 30_000 })).filter((c) => c.delivery_id === claimed.delivery_id);
  assert.equal(again.length, 1, 'claimed again at once');
});

test("a task's own webhook_url is capped per tenant and origin: another tenant's tasks to the same host share no target", async () => {
  const other = await createTestTenant(tdb.database, config);
  await insertEndpoint(db(), { tenantId: other.tenantId, url: 'https://hooks.example.com/other', events: null, description: null });
  const withUrl = { ...body, webhook_url: 'https://shared.example.com/hook?task=1' };
  const mine = (await createTask(db(), token, { tenantId, idempotencyKey: 'url-1', body: withUrl })).task.task_id;
  const theirs = (await createTask(db(), token, { tenantId: other.tenantId, idempotencyKey: 'url-1', body: withUrl })).task.task_id;
  await cancelTask(db(), token, tenantId, mine);
  await cancelTask(db(), token, other.tenantId, theirs);
  const keyOf = async (taskId: string) => {
    const [ev] = await eventsOf(taskId);
    return (await deliveriesOf(ev!.event_id)).find((d) => d.endpoint_id === null)!.target_key;
  };
  assert.equal(await keyOf(mine), `task-url:${tenantId}:https://shared.example.com`);
  assert.equal(await keyOf(theirs), `task-url:${other.tenantId}:https://shared.example.com`);
});

test('sealed signing secrets open only for their own endpoint and only with the key', () => {
  const box = createSecretBox('k'.repeat(40));
  const sealed = box.seal('endpoint-a', 'whsec_abc');
  assert.ok(!sealed.includes('whsec_abc'));
  assert.equal(box.open('endpoint-a', sealed), 'whsec_abc');
  assert.throws(() => box.open('endpoint-b', sealed));
  assert.throws(() => createSecretBox('j'.repeat(40)).open('endpoint-a', sealed));
});

test('the sealing key rotates: a retired key still opens, only the current one seals, values of before this change open, a cut tag is refused', () => {
  const oldKey = 'o'.repeat(40);
  const newKey = 'n'.repeat(40);
  const sealedOld = createSecretBox(oldKey).seal('endpoint-a', 'whsec_old');
  // A value sealed by the code before rotation existed (the same format, built here by hand).
  const key = createHash('sha256').update(`vidorch-webhook-secret:${oldKey}`).digest();
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from('endpoint-a'));
  const body = Buffer.concat([cipher.update('whsec_before', 'utf8'), cipher.final()]);
  const tag = cipher.getAuthTag();
  const sealedBefore = `v1.${iv.toString('base64url')}.${body.toString('base64url')}.${tag.toString('base64url')}`;

  const rotated = createSecretBox(newKey, [oldKey]);
  assert.equal(rotated.open('endpoint-a', sealedOld), 'whsec_old');
  assert.equal(rotated.open('endpoint-a', sealedBefore), 'whsec_before');
  assert.ok(rotated.isStale('endpoint-a', sealedOld) && rotated.isStale('endpoint-a', sealedBefore));
  const resealed = rotated.seal('endpoint-a', 'whsec_old');
  assert.ok(!rotated.isStale('endpoint-a', resealed));
  assert.equal(createSecretBox(newKey).open('endpoint-a', resealed), 'whsec_old', 'the current key alone opens it');
  assert.equal(createSecretBox(oldKey).open('endpoint-a', sealedBefore), 'whsec_before', 'and the old code path still reads the old ones');
  assert.throws(() => createSecretBox(newKey).open('endpoint-a', sealedOld), /neither WEBHOOK_SECRET_KEY nor WEBHOOK_SECRET_KEY_PREVIOUS/);
  assert.throws(() => rotated.open('endpoint-b', sealedOld), 'the endpoint stays bound in');
  // GCM would verify a truncated tag if asked to: the box refuses anything but 16 bytes.
  const cut = `v1.${iv.toString('base64url')}.${body.toString('base64url')}.${tag.subarray(0, 4).toString('base64url')}`;
  assert.throws(() => createSecretBox(oldKey).open('endpoint-a', cut), /not a sealed webhook secret/);
  assert.ok(!sealedOld.includes(oldKey) && !resealed.includes(newKey));
});

test('the retry schedule: delays by step, exhausted after the last; disable after the failure window', () => {
  const svix = [0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];
  assert.equal(delayBeforeStep(svix, 0), 0);
  assert.deepEqual(afterFailure(svix, 0), { kind: 'retry', step: 1, delayMs: 5_000 });
  assert.deepEqual(afterFailure(svix, 6), { kind: 'retry', step: 7, delayMs: 36_000_000 });
  assert.deepEqual(afterFailure(svix, 7), { kind: 'exhausted' });
  assert.equal(delayBeforeStep(svix, -1), null);
  const t0 = new Date('2026-01-01T00:00:00Z');
  assert.equal(shouldDisable(null, t0, 1_000), false);
  assert.equal(shouldDisable(t0, new Date(t0.getTime() + 999), 1_000), false);
  assert.equal(shouldDisable(t0, new Date(t0.getTime() + 1_000), 1_000), true);
});

test('targets at their in-flight cap take no place in a claim: with more than 500 of them due first, a target with room is still claimed', async () => {
  const id = await newTask('starve-1');
  await cancelTask(db(), token, tenantId, id);
  const [ev] = await eventsOf(id);
  // 501 slow targets, each with one delivery leased (its one place, perTarget 1) and one more due,
  // all due before anything else; then one target with room, due a minute ago.
  await db().execute(sql`
    INSERT INTO webhook_delivery (delivery_id, event_id, tenant_id, url, target_key, next_attempt_at, lease_until)
    SELECT gen_random_uuid(), ${ev!.event_id}, ${tenantId}, 'https://slow-' || n || '.example.com/h', 'task-url:${sql.raw(tenantId)}:https://slow-' || n || '.example.com',
           now() - interval '1 hour', CASE WHEN leased THEN now() + interval '1 hour' END
    FROM generate_series(1, 501) AS n CROSS JOIN (VALUES (true), (false)) AS l(leased)`);
  const roomKey = `task-url:${tenantId}:https://room.example.com`;
  await db().execute(sql`
    INSERT INTO webhook_delivery (delivery_id, event_id, tenant_id, url, target_key, next_attempt_at)
    VALUES (gen_random_uuid(), ${ev!.event_id}, ${tenantId}, 'https://room.example.com/h', ${roomKey}, now() - interval '1 minute')`);
  const claimed = await claim({ limit: 10, perTarget: 1, leaseMs: 30_000 });
  assert.ok(
    claimed.some((c) => c.target_key === roomKey),
    `the target with room is claimed (claimed: ${claimed.map((c) => c.target_key).join(', ') || 'nothing'})`,
  );
  assert.ok(!claimed.some((c) => c.target_key.includes('://slow-')), 'no target past its cap gets a second delivery in flight');
});

test('an endpoint change after `mode set READ_ONLY` (its token read before: the admission caches the mode) is refused naming the mode and writes nothing', async () => {
  const rules = { allowPrivate: false, maxEndpoints: 25, secretOverlapMs: 60_000 };
  const box = createSecretBox('k'.repeat(40));
  const { endpoint } = await createEndpoint(db(), token, box, rules, tenantId, { url: 'https://hooks.example.com/frozen' });
  const scope = { scope: config.FENCE_SCOPE, actor: 'operator:test', reason: 'write freeze' };
  await setMode(db(), { ...scope, mode: 'READ_ONLY' });
  try {
    const paused = (err: unknown) => err instanceof ModePausedError && err.mode === 'READ_ONLY';
    await assert.rejects(createEndpoint(db(), token, box, rules, tenantId, { url: 'https://hooks.example.com/during-freeze' }), paused);
    await assert.rejects(changeEndpoint(db(), token, rules, tenantId, endpoint.endpoint_id, { url: 'https://hooks.example.com/moved' }), paused);
    const urls = (await db().select().from(webhookEndpoint).where(eq(webhookEndpoint.tenant_id, tenantId))).map((e) => e.url);
    assert.ok(!urls.includes('https://hooks.example.com/during-freeze'), 'no endpoint created');
    assert.ok(urls.includes('https://hooks.example.com/frozen') && !urls.includes('https://hooks.example.com/moved'), 'none changed');
  } finally {
    await setMode(db(), { ...scope, mode: 'NORMAL' });
  }
});
