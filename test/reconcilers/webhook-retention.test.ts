// The retention reconciler prunes the webhook tables (reconcilers/retention.ts,
// RETENTION_WEBHOOK_DAYS): a delivery that ended and had no attempt inside the window goes with
// its attempts, then an event left without deliveries; a pending delivery, a recent one and one
// redelivered inside the window stay, with their events; a target's back-off untouched for the
// window goes. A run deletes at most its limit per kind.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { after, before, test } from 'node:test';
import { inArray } from 'drizzle-orm';
import { webhookAttempt, webhookDelivery, webhookEvent, webhookTarget, type WebhookDeliveryState } from '../../db/schema';
import { retentionReconciler } from '../../reconcilers/retention';
import type { ReconcileDeps, ReconcileSettings } from '../../reconcilers/types';
import { createTask } from '../support/deps';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let tenantId: string;
let taskId: string;
const db = () => tdb.database.db;

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '100'));
  const created = await createTask(
    db(),
    { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 },
    {
      tenantId,
      idempotencyKey: `webhook-retention-${randomUUID()}`,
      body: { model: 'minimax/video-01', prompt: 'webhook retention', duration_seconds: 6, resolution: '720p', priority: 0 },
    },
  );
  taskId = created.task.task_id;
});
after(() => tdb?.drop());

const settings: ReconcileSettings = {
  graceSeconds: 0,
  longRunningSeconds: 3600,
  retention: { inboxDays: 14, outboxHours: 24, spoolDeadLetterDays: 30, reconcileRunDays: 7, webhookDays: 30, batch: 2 },
  spoolDir: os.tmpdir(),
  outputRetentionDays: 0,
};
const run = (limit: number) =>
  retentionReconciler.run({ db: db(), fence: { scope: config.FENCE_SCOPE, region: config.REGION }, settings } as unknown as ReconcileDeps, {
    dryRun: false,
    limit,
  });

const daysAgo = (d: number) => new Date(Date.now() - d * 86_400_000);
let version = 100;

async function event(ageDays: number): Promise<string> {
  const eventId = randomUUID();
  version += 1;
  await db()
    .insert(webhookEvent)
    .values({
      event_id: eventId,
      tenant_id: tenantId,
      task_id: taskId,
      event_type: 'task.failed',
      status: 'FAILED',
      status_version: version,
      data: {},
      created_at: daysAgo(ageDays),
    });
  return eventId;
}

async function delivery(eventId: string, state: WebhookDeliveryState, ageDays: number, attemptAgesDays: number[]): Promise<string> {
  const deliveryId = randomUUID();
  await db()
    .insert(webhookDelivery)
    .values({
      delivery_id: deliveryId,
      event_id: eventId,
      tenant_id: tenantId,
      url: 'https://hooks.example.com/x',
      target_key: `task-url:${tenantId}:https://hooks.example.com`,
      state,
      created_at: daysAgo(ageDays),
    });
  for (const [i, age] of attemptAgesDays.entries()) {
    await db()
      .insert(webhookAttempt)
      .values({
        delivery_id: deliveryId,
        attempt_no: i + 1,
        url: 'https://hooks.example.com/x',
        started_at: daysAgo(age),
        latency_ms: 5,
        succeeded: state === 'succeeded',
      });
  }
  return deliveryId;
}

test('ended deliveries past RETENTION_WEBHOOK_DAYS go with their attempts, then their events and idle target back-offs; what is owed or recent stays; a run is bounded', async () => {
  const oldEvent = await event(40);
  const delivered = await delivery(oldEvent, 'succeeded', 40, [40, 40]);
  const failed = await delivery(oldEvent, 'failed', 40, [40, 39, 38]);
  const cancelled = await delivery(oldEvent, 'cancelled', 40, []);
  const pendingEvent = await event(40);
  const pending = await delivery(pendingEvent, 'pending', 40, [40]);
  const recentEvent = await event(1);
  const recent = await delivery(recentEvent, 'succeeded', 1, [1]);
  const redeliveredEvent = await event(40);
  const redelivered = await delivery(redeliveredEvent, 'failed', 40, [40, 2]);
  const orphanEvent = await event(40);
  const recentOrphanEvent = await event(1);
  const idleTarget = `endpoint:${randomUUID()}`;
  const recentTarget = `endpoint:${randomUUID()}`;
  await db()
    .insert(webhookTarget)
    .values([
      { target_key: idleTarget, tenant_id: tenantId, timeouts: 3, blocked_until: daysAgo(39), updated_at: daysAgo(40) },
      { target_key: recentTarget, tenant_id: tenantId, timeouts: 1, blocked_until: daysAgo(1), updated_at: daysAgo(1) },
    ]);

  // Bounded: one row of each kind a run at most.
  const first = await run(1);
  const remaining = async () => ({
    deliveries: (
      await db()
        .select()
        .from(webhookDelivery)
        .where(inArray(webhookDelivery.delivery_id, [delivered, failed, cancelled, pending, recent, redelivered]))
    ).map((d) => d.delivery_id),
    attempts: (
      await db()
        .select()
        .from(webhookAttempt)
        .where(inArray(webhookAttempt.delivery_id, [delivered, failed, cancelled, pending, recent, redelivered]))
    ).map((a) => a.delivery_id),
    events: (
      await db()
        .select()
        .from(webhookEvent)
        .where(inArray(webhookEvent.event_id, [oldEvent, pendingEvent, recentEvent, redeliveredEvent, orphanEvent, recentOrphanEvent]))
    ).map((e) => e.event_id),
    targets: (
      await db()
        .select()
        .from(webhookTarget)
        .where(inArray(webhookTarget.target_key, [idleTarget, recentTarget]))
    ).map((t) => t.target_key),
  });
  const afterFirst = await remaining();
  assert.equal(afterFirst.deliveries.length, 5, 'one delivery deleted by a run of limit 1');
  assert.ok(first.findings.some((f) => f.kind === 'webhook-delivery-expired'));

  await run(100);
  const end = await remaining();
  assert.deepEqual(new Set(end.deliveries), new Set([pending, recent, redelivered]));
  assert.deepEqual(new Set(end.attempts), new Set([pending, recent, redelivered]), 'attempts go with their delivery');
  assert.deepEqual(new Set(end.events), new Set([pendingEvent, recentEvent, redeliveredEvent, recentOrphanEvent]));
  assert.deepEqual(end.targets, [recentTarget]);

  const again = await run(100);
  assert.ok(!again.findings.some((f) => f.kind.startsWith('webhook-')), 'a second run finds nothing more');
});
