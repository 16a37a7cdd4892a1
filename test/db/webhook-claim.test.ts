// The relay's claim is fair between tenants and bounded (docs/webhooks.md "Retries",
// docs/decisions/0019-webhook-delivery-leases.md): a tenant at its in-flight cap gets nothing
// while the others are served; a pass takes a few deliveries per tenant and the next goes on
// after the last tenant served; a target whose attempt timed out backs off as a whole; and a
// pass reads a bounded number of rows however large the backlog. Real Postgres, one database.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { createDatabase, type Database } from '../../db/client';
import { webhookDelivery, webhookEvent } from '../../db/schema';
import { claimDueDeliveries, insertEndpoint, recordAttempt, type ClaimedDelivery, type ClaimLimits } from '../../db/webhooks';
import { createTask } from '../support/deps';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
const body = { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p' as const, priority: 0 };
const backoff = { baseMs: 60_000, maxMs: 600_000 };
let tdb: TestDatabase;

before(async () => {
  tdb = await createTestDatabase(config);
});
after(async () => {
  await tdb?.drop();
});
// Each test starts with nothing pending.
beforeEach(async () => {
  await tdb.database.db.execute(sql`UPDATE webhook_delivery SET state = 'cancelled' WHERE state = 'pending'`);
});

const limits = (over: Partial<ClaimLimits> = {}): ClaimLimits => ({
  limit: 100,
  perTarget: 4,
  perTenant: 100,
  perTenantPass: 100,
  leaseMs: 60_000,
  afterTenant: null,
  ...over,
});

/** A tenant with `endpoints` endpoints and `events` task.cancelled events (one delivery per endpoint each). */
async function tenantWith(endpoints: number, events: number): Promise<{ tenantId: string; endpointIds: string[]; eventIds: string[] }> {
  const db = tdb.database.db;
  const { tenantId } = await createTestTenant(tdb.database, config, '1000');
  const endpointIds: string[] = [];
  for (let i = 0; i < endpoints; i += 1)
    endpointIds.push((await insertEndpoint(db, { tenantId, url: `https://hooks.example.com/${i}`, description: null, events: null })).endpoint_id);
  const eventIds: string[] = [];
  for (let i = 0; i < events; i += 1) {
    const { task } = await createTask(db, token, { tenantId, idempotencyKey: `e-${i}`, body });
    await cancelTask(db, token, tenantId, task.task_id);
    const [ev] = await db.select().from(webhookEvent).where(eq(webhookEvent.task_id, task.task_id));
    eventIds.push(ev!.event_id);
  }
  return { tenantId, endpointIds, eventIds };
}

const count = (claimed: readonly ClaimedDelivery[], tenantId: string) => claimed.filter((c) => c.tenant_id === tenantId).length;

test("a tenant at its in-flight cap is claimed nothing more, while another tenant's due delivery is claimed in the same pass", async () => {
  const a = await tenantWith(4, 10);
  const b = await tenantWith(1, 1);
  const first = await claimDueDeliveries(tdb.database.db, token, limits({ perTenant: 6 }));
  assert.equal(count(first.claimed, a.tenantId), 6, 'A up to its cap, across its endpoints');
  assert.equal(count(first.claimed, b.tenantId), 1);
  const second = await claimDueDeliveries(tdb.database.db, token, limits({ perTenant: 6 }));
  assert.equal(count(second.claimed, a.tenantId), 0, 'A holds its cap: nothing more until a lease ends');
});

test('a pass claims at most perTenantPass of a tenant, one target after another, and the next pass starts after the last tenant served', async () => {
  const tenants = [await tenantWith(2, 5), await tenantWith(2, 5), await tenantWith(2, 5)];
  const order = tenants.map((t) => t.tenantId).sort();
  const first = await claimDueDeliveries(tdb.database.db, token, limits({ limit: 4, perTenantPass: 2 }));
  // The budget (4) went to the first two tenants in turn, two each, one per endpoint.
  assert.deepEqual(
    order.map((t) => count(first.claimed, t)),
    [2, 2, 0],
  );
  for (const t of order.slice(0, 2)) assert.equal(new Set(first.claimed.filter((c) => c.tenant_id === t).map((c) => c.target_key)).size, 2);
  assert.equal(first.lastTenant, order[1]);
  assert.equal(first.more, true);
  const second = await claimDueDeliveries(tdb.database.db, token, limits({ limit: 4, perTenantPass: 2, afterTenant: first.lastTenant }));
  assert.deepEqual(
    order.map((t) => count(second.claimed, t)),
    [2, 0, 2],
    'the third tenant first, then round to the first',
  );
});

test('a timed-out attempt blocks its whole target for the back-off, doubling with each round of timeouts; an answered attempt ends it', async () => {
  const db = tdb.database.db;
  const a = await tenantWith(2, 4);
  const [slowTarget, otherTarget] = a.endpointIds.map((id) => `endpoint:${id}`) as [string, string];
  const claimed = (await claimDueDeliveries(db, token, limits({ perTarget: 1 }))).claimed;
  const slow = claimed.find((c) => c.target_key === slowTarget)!;
  const attempt = { url: 'https://hooks.example.com/0', startedAt: new Date(), ok: false, status: null, latencyMs: 15_000, error: 'timed out', excerpt: null };
  await recordAttempt(
    db,
    token,
    slow,
    { ...attempt, timedOut: true },
    { kind: 'retry', step: 1, delayMs: 0 },
    { disableAfterMs: 1e9, timeoutBackoff: backoff },
  );
  const blockedFor = async () => {
    const { rows } = await db.execute(
      sql`SELECT timeouts, EXTRACT(EPOCH FROM blocked_until - now()) * 1000 AS ms FROM webhook_target WHERE target_key = ${slowTarget}`,
    );
    const r = rows[0] as { timeouts: number; ms: number } | undefined;
    return r ? { timeouts: r.timeouts, ms: Number(r.ms) } : null;
  };
  const b1 = await blockedFor();
  assert.ok(b1 && b1.timeouts === 1 && b1.ms > 55_000 && b1.ms <= 60_000, JSON.stringify(b1));

  // Its deliveries are due (the retry had no delay) and the target has room, yet it is not claimed; the other target is.
  const next = (await claimDueDeliveries(db, token, limits({ perTarget: 1 }))).claimed;
  assert.equal(next.filter((c) => c.target_key === slowTarget).length, 0, 'the target backing off is left out');
  const [other] = next.filter((c) => c.target_key === otherTarget);
  assert.ok(!other, 'the other target still holds its one place');

  // Another attempt of the same round timing out inside the block does not lengthen it.
  const second = claimed.find((c) => c.target_key === otherTarget)!;
  await recordAttempt(
    db,
    token,
    { ...second, target_key: slowTarget },
    { ...attempt, timedOut: true },
    { kind: 'retry', step: 1, delayMs: 0 },
    {
      disableAfterMs: 1e9,
      timeoutBackoff: backoff,
    },
  );
  assert.equal((await blockedFor())!.timeouts, 1, 'one round, counted once');
  // A round after the block ended doubles it.
  await db.execute(sql`UPDATE webhook_target SET blocked_until = now() - interval '1 second' WHERE target_key = ${slowTarget}`);
  await recordAttempt(
    db,
    token,
    slow,
    { ...attempt, timedOut: true },
    { kind: 'retry', step: 1, delayMs: 0 },
    { disableAfterMs: 1e9, timeoutBackoff: backoff },
  );
  const b2 = await blockedFor();
  assert.ok(b2 && b2.timeouts === 2 && b2.ms > 115_000 && b2.ms <= 120_000, JSON.stringify(b2));

  // An answered attempt (any status) ends the back-off: the target is claimed again.
  await recordAttempt(
    db,
    token,
    slow,
    { ...attempt, status: 500, latencyMs: 5, error: 'answered 500', timedOut: false },
    { kind: 'retry', step: 1, delayMs: 0 },
    {
      disableAfterMs: 1e9,
      timeoutBackoff: backoff,
    },
  );
  assert.equal(await blockedFor(), null);
  const after = (await claimDueDeliveries(db, token, limits({ perTarget: 4 }))).claimed;
  assert.ok(
    after.some((c) => c.target_key === slowTarget),
    'claimed again once answered',
  );
});

test('a pass reads a bounded number of rows however large the backlog: 50,000 due deliveries of one tenant, a full target, another tenant', async (t) => {
  const db = tdb.database.db;
  const big = await tenantWith(1, 1);
  const small = await tenantWith(1, 1);
  const target = `endpoint:${big.endpointIds[0]}`;
  await db.execute(sql`
    INSERT INTO webhook_delivery (delivery_id, event_id, tenant_id, endpoint_id, target_key, next_attempt_at)
    SELECT gen_random_uuid(), ${big.eventIds[0]}, ${big.tenantId}, ${big.endpointIds[0]}, ${target}, now() - interval '1 hour' - n * interval '1 second'
    FROM generate_series(1, 50000) AS n`);
  // A task URL target of the same tenant with its every place taken (leased), and a backlog behind it.
  const full = `task-url:${big.tenantId}:https://full.example.com`;
  await db.execute(sql`
    INSERT INTO webhook_delivery (delivery_id, event_id, tenant_id, url, target_key, next_attempt_at, lease_until)
    SELECT gen_random_uuid(), ${big.eventIds[0]}, ${big.tenantId}, 'https://full.example.com/h', ${full}, now() - interval '2 hours',
           CASE WHEN n <= 4 THEN now() + interval '1 hour' END
    FROM generate_series(1, 10000) AS n`);
  await db.execute(sql`ANALYZE webhook_delivery`);

  // One connection, so the statistics of its own statements are the pass's.
  const one: Database = createDatabase({ url: tdb.url, max: 1, applicationName: 'claim-reads' });
  try {
    const readRows = async () => {
      await one.pool.query('SELECT pg_stat_force_next_flush()');
      const { rows } = await one.pool.query<{ n: string }>(`
        SELECT (SELECT COALESCE(seq_tup_read, 0) FROM pg_stat_user_tables WHERE relname = 'webhook_delivery')
             + (SELECT COALESCE(sum(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relname = 'webhook_delivery') AS n`);
      return Number(rows[0]!.n);
    };
    const before = await readRows();
    const pass = await claimDueDeliveries(one.db, token, limits({ limit: 16, perTarget: 4, perTenantPass: 8 }));
    const read = (await readRows()) - before;
    t.diagnostic(`the pass read ${read} rows of webhook_delivery`);
    assert.ok(read < 2_000, `the pass read ${read} rows of webhook_delivery (60,000 pending)`);
    const claimed = Array.isArray(pass) ? (pass as ClaimedDelivery[]) : pass.claimed;
    assert.equal(count(claimed, big.tenantId), 4, 'its endpoint up to its cap; the full target nothing');
    assert.ok(claimed.every((c) => c.target_key !== full));
    assert.equal(count(claimed, small.tenantId), 1);
  } finally {
    await one.close();
  }
  await db.update(webhookDelivery).set({ state: 'cancelled' }).where(eq(webhookDelivery.tenant_id, big.tenantId));
});
