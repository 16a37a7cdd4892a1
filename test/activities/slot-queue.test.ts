// The slot queue at the submit claim (db/slot-queue.ts, docs/providers.md "The slot queue"),
// against real Postgres and the simulator: waiting is a fact, a freed slot is granted in the
// transaction that frees it, and the provider's limit and a tenant's cap hold exactly under
// concurrency, counted at the simulator.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { eq, inArray } from 'drizzle-orm';
import pg from 'pg';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { createTask, testActivityDeps } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import { recordProviderEvent } from '../../db/inbox';
import { generationTask, opsAudit, providerControl, slotWait, taskAttempt, tenantCapacity } from '../../db/schema';
import { SLOT_GRANTED_CHANNEL, providerQueue, releaseTaskSlots, takeSlot, type SlotRequest } from '../../db/slot-queue';
import { changeProviderControl } from '../../ops/providers';
import { setTenantLimit } from '../../ops/capacity';
import { startFactSampler } from '../../observability/facts';
import { createMetrics } from '../../observability/metrics';
import { createTestDatabase, createTestTenant, startSimulator, testConfig, testLogger, type RunningSimulator, type TestDatabase } from '../support/stack';

let sim: RunningSimulator;
let tdb: TestDatabase;
let acts: TaskActivities;
let config: ReturnType<typeof testConfig>;
let tenantA: string;
let tenantB: string;
const DEFAULTS = { perProvider: null, total: null, weight: 1 };

before(async () => {
  sim = await startSimulator(testConfig(), { generationMs: 600_000 });
  config = testConfig({
    PROVIDER_REPLICATE_BASE_URL: `${sim.baseUrl}/replicate`,
    PROVIDER_FAL_BASE_URL: `${sim.baseUrl}/fal`,
    PROVIDER_FAL_JWKS_URL: `${sim.baseUrl}/fal/.well-known/jwks.json`,
    PROVIDER_RUNWAY_BASE_URL: `${sim.baseUrl}/runway`,
    PROVIDER_KLING_BASE_URL: `${sim.baseUrl}/kling`,
    BULKHEAD_RAMP_MS: '0',
    SLOT_QUEUE_AGING_MS: '0',
    // The slot queue alone: these claims come back at once, not after a paced sleep, so the
    // account's create pace (docs/decisions/0069, test/activities/create-pace.test.ts) is raised out of the way.
    PROVIDER_CREATE_QUOTAS: 'replicate=100000',
  });
  tdb = await createTestDatabase(config);
  acts = createTaskActivities(testActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) }));
  ({ tenantId: tenantA } = await createTestTenant(tdb.database, config, '100000'));
  ({ tenantId: tenantB } = await createTestTenant(tdb.database, config, '100000'));
});
after(async () => {
  await sim?.close();
  await tdb?.drop();
});
beforeEach(async () => {
  // Every test starts with nothing in flight and nobody waiting.
  await tdb.database.db.delete(slotWait);
  await tdb.database.db
    .update(taskAttempt)
    .set({ submit_state: 'SUCCEEDED' })
    .where(inArray(taskAttempt.submit_state, ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN']));
  await tdb.database.db.delete(providerControl);
  await tdb.database.db.delete(tenantCapacity);
});

const run = <K extends keyof TaskActivities>(name: K, ...args: Parameters<TaskActivities[K]>) =>
  new MockActivityEnvironment().run(acts[name] as never, ...(args as unknown as never[])) as ReturnType<TaskActivities[K]>;

let seq = 0;
/** A model pinned to fal (the other tasks go to replicate). */
const AT_FAL = { model: 'fal-ai/kling-video/v2/master/text-to-video', duration_seconds: 5, resolution: '720p' } as const;
async function prepared(
  tenantId: string,
  priority = 0,
  deadlineSeconds?: number,
  route: { model: string; duration_seconds: number; resolution: '480p' | '720p' } = { model: 'minimax/video-01', duration_seconds: 6, resolution: '720p' },
): Promise<{ taskId: string; attemptId: string; tenantId: string }> {
  seq += 1;
  const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
  const { task } = await createTask(tdb.database.db, token, {
    tenantId,
    idempotencyKey: `slot-${seq}`,
    body: {
      ...route,
      prompt: `slot ${seq}`,
      priority,
      ...(deadlineSeconds ? { deadline_seconds: deadlineSeconds } : {}),
    },
  });
  await run('dispatchTask', task.task_id);
  const facts = await run('prepareAttempt', task.task_id);
  return { taskId: task.task_id, attemptId: facts.activeAttemptId!, tenantId };
}

/** Ends a job the way production does: the provider's terminal event in the inbox, applied by the task's activity. */
async function finishJob(t: { taskId: string; attemptId: string }) {
  await reportEnd(t);
  await run('applyInbox', t.taskId);
}

/** The provider's terminal event, in the inbox and not yet applied: the job holds no slot, and no transition has handed it on. */
async function reportEnd(t: { taskId: string; attemptId: string }) {
  const [attempt] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, t.attemptId));
  await recordProviderEvent(tdb.database.db, {
    provider: attempt!.provider,
    job: {
      jobId: attempt!.provider_job_id!,
      state: 'failed',
      rawStatus: 'failed',
      updatedAt: new Date(),
      outputUrl: null,
      error: 'done',
      correlationToken: null,
      metrics: null,
    },
    providerEventId: `end-${t.attemptId}`,
    source: 'callback',
    attemptId: t.attemptId,
    taskId: t.taskId,
    receivedRegion: config.REGION,
    signatureValid: true,
    raw: {},
  });
}

const statusOf = async (taskId: string) => (await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId)))[0]!.status;

test('exactness: 50 concurrent claims against 5 slots and a tenant cap of 2 never put more than 5 jobs at the provider, nor more than 2 of that tenant, until all are served', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 5 });
  await setTenantLimit(
    tdb.database.db,
    { name: await tenantName(tenantA), provider: 'replicate', maxInFlight: 2, weight: null, actor: 'test', reason: 'exactness' },
    DEFAULTS,
  );
  const tasks = [
    ...(await Promise.all(Array.from({ length: 25 }, () => prepared(tenantA)))),
    ...(await Promise.all(Array.from({ length: 25 }, () => prepared(tenantB)))),
  ];
  const ended = new Set<string>();
  // Jobs at the simulator for tasks not yet ended: what the provider runs for us right now.
  const atProvider = (of?: string) => tasks.filter((t) => !ended.has(t.taskId) && (!of || t.tenantId === of)).reduce((n, t) => n + sim.jobsFor(t.attemptId), 0);
  let peak = 0;
  let peakA = 0;
  const check = () => {
    peak = Math.max(peak, atProvider());
    peakA = Math.max(peakA, atProvider(tenantA));
    assert.ok(atProvider() <= 5, `${atProvider()} jobs at the provider`);
    assert.ok(atProvider(tenantA) <= 2, `${atProvider(tenantA)} jobs of tenant A`);
  };
  let rounds = 0;
  while (ended.size < tasks.length) {
    rounds += 1;
    assert.ok(rounds < 200, 'the queue drains');
    // Every task not yet at the provider claims at once (a woken workflow, or its fallback timer).
    const open = [];
    for (const t of tasks) if (!ended.has(t.taskId) && (await statusOf(t.taskId)) === 'SUBMITTING') open.push(t);
    await Promise.all(open.map((t) => run('submitAttempt', t.taskId)));
    check();
    // Then the provider finishes two of its jobs (each frees a slot in its own transaction).
    const running = tasks.filter((t) => !ended.has(t.taskId) && sim.jobsFor(t.attemptId) > 0);
    assert.ok(running.length > 0, 'someone holds a slot while others wait');
    for (const t of running.slice(0, 2)) {
      await finishJob(t);
      ended.add(t.taskId);
      check();
    }
  }
  assert.equal(peak, 5, 'the limit was reached');
  assert.equal(peakA, 2, "tenant A's cap was reached");
  assert.equal(
    tasks.reduce((n, t) => n + sim.jobsFor(t.attemptId), 0),
    50,
    'every task got exactly one job',
  );
  assert.equal((await tdb.database.db.select().from(slotWait)).length, 0, 'no wait or grant left behind');
});

test('a slot freed by a task is granted in the same transaction to the next waiter, and its workflow is notified on commit', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 2 });
  const listener = new pg.Client({ connectionString: tdb.database.url });
  await listener.connect();
  const notified: string[] = [];
  listener.on('notification', (n) => notified.push(n.payload ?? ''));
  await listener.query(`LISTEN ${SLOT_GRANTED_CHANNEL}`);
  try {
    const [a, a2, b, c] = [await prepared(tenantA), await prepared(tenantA), await prepared(tenantA), await prepared(tenantB)];
    assert.equal((await run('submitAttempt', a.taskId)).facts.status, 'SUBMITTED');
    assert.equal((await run('submitAttempt', a2.taskId)).facts.status, 'SUBMITTED');
    const waitB = await run('submitAttempt', b.taskId);
    assert.equal(waitB.facts.status, 'SUBMITTING');
    assert.ok(waitB.waitMs !== null && waitB.waitMs !== undefined && waitB.waitMs >= 1_000, 'b sleeps, with a fallback timer');
    await run('submitAttempt', c.taskId);
    const queue = await providerQueue(tdb.database.db, 'replicate', new Date());
    assert.deepEqual(
      queue.entries.map((e) => [e.taskId, e.position, e.reason]),
      [
        [c.taskId, 1, 'provider_full'],
        [b.taskId, 2, 'provider_full'],
      ],
      "fair: tenant B (none in flight) goes before A's second task",
    );
    await finishJob(a);
    const [grant] = await tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, c.taskId));
    assert.ok(grant?.granted_at, 'granted in the transaction that freed the slot');
    await eventuallyTrue(() => notified.includes(c.taskId));
    assert.ok(!notified.includes(b.taskId), 'only the granted waiter is woken');
    assert.equal((await run('submitAttempt', b.taskId)).facts.status, 'SUBMITTING', "b still waits: the grant is c's");
    assert.equal((await run('submitAttempt', c.taskId)).facts.status, 'SUBMITTED');
    assert.equal(sim.jobsFor(b.attemptId), 0);
  } finally {
    await listener.end();
  }
});

test('an operator raising the provider limit grants the waiters in the same transaction', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1 });
  const ts = [await prepared(tenantA), await prepared(tenantA), await prepared(tenantB)];
  for (const t of ts) await run('submitAttempt', t.taskId);
  assert.equal((await tdb.database.db.select().from(slotWait)).filter((r) => r.granted_at === null).length, 2);
  await changeProviderControl(tdb.database.db, { provider: 'replicate', change: { kind: 'limit', maxInFlight: 3 }, actor: 'test', reason: 'more capacity' });
  assert.equal((await tdb.database.db.select().from(slotWait)).filter((r) => r.granted_at !== null).length, 2, 'both granted by the limit change');
  for (const t of ts.slice(1)) assert.equal((await run('submitAttempt', t.taskId)).facts.status, 'SUBMITTED');
});

test('ops tenant limit is audited and a tenant at its cap waits while others go', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 10 });
  const change = await setTenantLimit(
    tdb.database.db,
    { name: await tenantName(tenantA), provider: '*', maxInFlight: 1, weight: 2, actor: 'operator:test', reason: 'noisy tenant' },
    DEFAULTS,
  );
  const [row] = await tdb.database.db.select().from(opsAudit).where(eq(opsAudit.audit_id, change.auditId));
  assert.equal(row?.action, 'tenant.limit');
  assert.deepEqual(row?.detail, { provider: '*', from: { max_in_flight: null, weight: null }, to: { max_in_flight: 1, weight: 2 } });
  const [a1, a2, b1] = [await prepared(tenantA), await prepared(tenantA), await prepared(tenantB)];
  assert.equal((await run('submitAttempt', a1.taskId)).facts.status, 'SUBMITTED');
  assert.equal((await run('submitAttempt', a2.taskId)).facts.status, 'SUBMITTING', 'at its overall cap');
  assert.equal((await run('submitAttempt', b1.taskId)).facts.status, 'SUBMITTED', 'another tenant is not held up');
  const [w] = await tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, a2.taskId));
  assert.equal(w?.reason, 'tenant_total_cap');
  await setTenantLimit(
    tdb.database.db,
    { name: await tenantName(tenantA), provider: '*', maxInFlight: null, weight: null, actor: 'operator:test', reason: 'lifted' },
    DEFAULTS,
  );
  assert.equal(
    (await tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, a2.taskId)))[0]?.granted_at instanceof Date,
    true,
    'lifting the cap grants it',
  );
});

test('a waiting attempt past its deadline fails DEADLINE_EXCEEDED with its credits released and leaves the queue', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1 });
  const first = await prepared(tenantA);
  assert.equal((await run('submitAttempt', first.taskId)).facts.status, 'SUBMITTED');
  const late = await prepared(tenantB, 0, 60);
  const waited = await run('submitAttempt', late.taskId);
  assert.ok((waited.waitMs ?? 0) <= 60_000 - config.PROVIDER_HTTP_TIMEOUT_MS + 100, 'it sleeps no longer than its deadline allows');
  await tdb.database.db
    .update(generationTask)
    .set({ deadline_at: new Date(Date.now() - 1_000) })
    .where(eq(generationTask.task_id, late.taskId));
  const r = await run('submitAttempt', late.taskId);
  assert.equal(r.facts.status, 'FAILED');
  const [t] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, late.taskId));
  assert.equal(t?.failure_code, 'DEADLINE_EXCEEDED');
  assert.equal(t?.settled_amount, '0.000000');
  assert.equal((await tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, late.taskId))).length, 0);
  assert.equal(sim.jobsFor(late.attemptId), 0);
});

test('waiting attempts are metrics: per provider and tenant, and the oldest wait', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1 });
  const ts = [await prepared(tenantA), await prepared(tenantA), await prepared(tenantA), await prepared(tenantB)];
  for (const t of ts) await run('submitAttempt', t.taskId);
  await tdb.database.db
    .update(slotWait)
    .set({ since: new Date(Date.now() - 90_000) })
    .where(eq(slotWait.task_id, ts[1]!.taskId));
  const sampler = startFactSampler({ databaseUrl: tdb.url, intervalMs: 60_000, logger: testLogger, applicationName: 'slot-metrics-test' });
  await sampler.refresh();
  const text = await createMetrics({ service: 'slot-metrics-test', facts: sampler.latest }).registry.metrics();
  await sampler.stop();
  const shown = text
    .split('\n')
    .filter((l) => l.startsWith('vidorch_slot'))
    .join('\n');
  assert.match(shown, new RegExp(`vidorch_slot_waiting\\{provider="replicate",tenant="${tenantA}",service="slot-metrics-test"\\} 2`));
  assert.match(shown, new RegExp(`vidorch_slot_waiting\\{provider="replicate",tenant="${tenantB}",service="slot-metrics-test"\\} 1`));
  const oldest = Number(/vidorch_slot_oldest_wait_seconds\{provider="replicate",service="slot-metrics-test"\} ([\d.]+)/.exec(text)?.[1]);
  assert.ok(oldest >= 90 && oldest < 120, `oldest wait ${oldest} s`);
});

test('a waiting attempt never sent moves to another provider of its family with room; never after an unknown outcome', async () => {
  const body = (n: number) => ({ model: 'kling-v2', prompt: `family ${n}`, duration_seconds: 5, resolution: '720p' as const, priority: 0 });
  const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
  const prepare = async (n: number) => {
    seq += 1;
    const { task } = await createTask(tdb.database.db, token, { tenantId: tenantA, idempotencyKey: `family-${seq}`, body: body(n) });
    await run('dispatchTask', task.task_id);
    const f = await run('prepareAttempt', task.task_id);
    const [a] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, f.activeAttemptId!));
    return { taskId: task.task_id, attemptId: a!.attempt_id, provider: a!.provider };
  };
  const first = await prepare(1);
  // Its provider has one slot, which it takes; the other providers of the family have room.
  await tdb.database.db.insert(providerControl).values({ provider: first.provider, max_in_flight: 1 });
  const firstSubmit = await run('submitAttempt', first.taskId);
  const [fa] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, first.attemptId));
  assert.equal(firstSubmit.facts.status, 'SUBMITTED', `${first.provider}: ${fa?.last_error}`);
  const second = await prepare(2);
  const third = await prepare(3);
  assert.equal(second.provider, first.provider, "routed to the same provider (its slot is not the router's concern)");
  // The third task had an unknown outcome before (its attempt carries the fact): it must not move.
  await tdb.database.db.update(taskAttempt).set({ unknown_since: new Date() }).where(eq(taskAttempt.attempt_id, third.attemptId));
  const moved = await run('submitAttempt', second.taskId);
  assert.equal(moved.facts.status, 'SUBMITTING');
  assert.equal(moved.waitMs ?? null, null, 're-routed: claim again at once');
  const [a2] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, second.attemptId));
  assert.notEqual(a2?.provider, first.provider, 'moved within the family');
  assert.equal(await waitRowOf(second.taskId), undefined, 'it left the old queue');
  const secondSubmit = await run('submitAttempt', second.taskId);
  const [sa] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, second.attemptId));
  assert.equal(secondSubmit.facts.status, 'SUBMITTED', `${sa?.provider} ${sa?.provider_model}: ${sa?.last_error}`);
  assert.equal(sim.jobsFor(second.attemptId), 1);
  const stayed = await run('submitAttempt', third.taskId);
  assert.ok((stayed.waitMs ?? 0) > 0, 'the task with an unknown outcome waits for its own provider');
  const [a3] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, third.attemptId));
  assert.equal(a3?.provider, first.provider);
  assert.equal(sim.jobsFor(third.attemptId), 0);
});

/** Listens on the grant channel: the task ids notified, as they arrive. */
async function grantWakes(): Promise<{ notified: string[]; close: () => Promise<void> }> {
  const listener = new pg.Client({ connectionString: tdb.database.url });
  await listener.connect();
  const notified: string[] = [];
  listener.on('notification', (n) => notified.push(n.payload ?? ''));
  await listener.query(`LISTEN ${SLOT_GRANTED_CHANNEL}`);
  return { notified, close: () => listener.end() };
}

test('fast path: a claim with room and nobody waiting takes its slot without a queue row or a wake', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 2 });
  const wakes = await grantWakes();
  try {
    const first = await prepared(tenantA);
    const second = await prepared(tenantB);
    assert.equal((await run('submitAttempt', first.taskId)).facts.status, 'SUBMITTED');
    assert.equal((await run('submitAttempt', second.taskId)).facts.status, 'SUBMITTED');
    assert.equal((await tdb.database.db.select().from(slotWait)).length, 0, 'no queue row written');
    // The channel works: the slot the first one frees is granted to the third, which is woken.
    const third = await prepared(tenantA);
    assert.equal((await run('submitAttempt', third.taskId)).facts.status, 'SUBMITTING');
    const [control] = await tdb.database.db.select().from(providerControl).where(eq(providerControl.provider, 'replicate'));
    assert.equal(control?.queue_limit, 2, "the claim's ceiling is left on the control row for other transactions' grant passes");
    await finishJob(first);
    await eventuallyTrue(() => wakes.notified.includes(third.taskId));
    assert.deepEqual(wakes.notified, [third.taskId], 'the slot-free claims sent no wake');
  } finally {
    await wakes.close();
  }
});

test('fast path: a newcomer never takes a free slot ahead of a waiter; the pass hands it to the one who waited', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1 });
  const holder = await prepared(tenantA);
  assert.equal((await run('submitAttempt', holder.taskId)).facts.status, 'SUBMITTED');
  const waiter = await prepared(tenantA);
  assert.equal((await run('submitAttempt', waiter.taskId)).facts.status, 'SUBMITTING');
  // The holder's job ended at the provider; its report waits in the inbox: the slot is free, and
  // no transition has granted it yet.
  await reportEnd(holder);
  const newcomer = await prepared(tenantB);
  const r = await run('submitAttempt', newcomer.taskId);
  assert.equal(r.facts.status, 'SUBMITTING', 'the newcomer waits');
  assert.equal(sim.jobsFor(newcomer.attemptId), 0);
  assert.ok((await waitRowOf(waiter.taskId))?.granted_at, "the newcomer's pass granted the slot to the earlier waiter");
  assert.equal((await waitRowOf(newcomer.taskId))?.reason, 'provider_full');
  assert.equal((await run('submitAttempt', waiter.taskId)).facts.status, 'SUBMITTED');
});

test('fast path: the last free slot claimed by eight at once goes to exactly one; the others wait in the queue', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 3 });
  for (const t of [await prepared(tenantA), await prepared(tenantB)]) assert.equal((await run('submitAttempt', t.taskId)).facts.status, 'SUBMITTED');
  const claimants = await Promise.all(Array.from({ length: 8 }, (_, i) => prepared(i % 2 ? tenantA : tenantB)));
  const results = await Promise.all(claimants.map((t) => run('submitAttempt', t.taskId)));
  assert.equal(results.filter((r) => r.facts.status === 'SUBMITTED').length, 1);
  assert.equal(
    claimants.reduce((n, t) => n + sim.jobsFor(t.attemptId), 0),
    1,
    'one job at the provider',
  );
  const rows = await tdb.database.db.select().from(slotWait);
  assert.equal(rows.filter((w) => w.granted_at === null).length, 7, 'the seven others wait');
});

test('fast path: an expired grant neither counts nor blocks a claim with room, and is cleaned up', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 1 });
  // A dead waiter's grant past SLOT_GRANT_TTL_MS: its workflow never came for it.
  const dead = await prepared(tenantA);
  await tdb.database.db.insert(slotWait).values({
    attempt_id: dead.attemptId,
    task_id: dead.taskId,
    provider: 'replicate',
    tenant_id: tenantA,
    priority: 0,
    since: new Date(Date.now() - 20 * 60_000),
    granted_at: new Date(Date.now() - 10 * 60_000),
  });
  const wakes = await grantWakes();
  try {
    const live = await prepared(tenantB);
    assert.equal((await run('submitAttempt', live.taskId)).facts.status, 'SUBMITTED');
    assert.equal(await waitRowOf(dead.taskId), undefined, 'the expired grant is dropped');
    assert.equal(await waitRowOf(live.taskId), undefined, 'the live claim wrote no row');
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(wakes.notified, [], 'and woke nobody');
  } finally {
    await wakes.close();
  }
});

test('fast path: a tenant at its provider cap waits though the provider has room; another tenant goes', async () => {
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', max_in_flight: 10 });
  await setTenantLimit(
    tdb.database.db,
    { name: await tenantName(tenantA), provider: 'replicate', maxInFlight: 1, weight: null, actor: 'test', reason: 'cap' },
    DEFAULTS,
  );
  const [a1, b1, a2] = [await prepared(tenantA), await prepared(tenantB), await prepared(tenantA)];
  assert.equal((await run('submitAttempt', a1.taskId)).facts.status, 'SUBMITTED');
  assert.equal((await run('submitAttempt', b1.taskId)).facts.status, 'SUBMITTED');
  assert.equal((await run('submitAttempt', a2.taskId)).facts.status, 'SUBMITTING', 'at its cap');
  assert.equal((await waitRowOf(a2.taskId))?.reason, 'tenant_provider_cap');
  assert.equal(sim.jobsFor(a2.attemptId), 0);
});

test("fast path: a tenant's overall cap counts its slots at every provider, exactly, under concurrent claims at two providers", async () => {
  await setTenantLimit(
    tdb.database.db,
    { name: await tenantName(tenantA), provider: '*', maxInFlight: 2, weight: null, actor: 'test', reason: 'cap' },
    DEFAULTS,
  );
  const tasks = await Promise.all([
    ...Array.from({ length: 3 }, () => prepared(tenantA)),
    ...Array.from({ length: 3 }, () => prepared(tenantA, 0, undefined, AT_FAL)),
  ]);
  const results = await Promise.all(tasks.map((t) => run('submitAttempt', t.taskId)));
  assert.equal(results.filter((r) => r.facts.status === 'SUBMITTED').length, 2, 'two slots over both providers');
  assert.equal(
    tasks.reduce((n, t) => n + sim.jobsFor(t.attemptId), 0),
    2,
  );
  const waiting = (await tdb.database.db.select().from(slotWait)).filter((w) => w.granted_at === null);
  assert.equal(waiting.length, 4);
  assert.ok(
    waiting.every((w) => w.reason === 'tenant_total_cap'),
    waiting.map((w) => w.reason).join(),
  );
  // At a provider with nobody waiting, the claim still waits: its slots elsewhere count.
  await tdb.database.db.delete(slotWait).where(eq(slotWait.provider, 'fal'));
  const late = await prepared(tenantA, 0, undefined, AT_FAL);
  assert.equal((await run('submitAttempt', late.taskId)).facts.status, 'SUBMITTING');
  assert.equal((await waitRowOf(late.taskId))?.reason, 'tenant_total_cap');
});

test("fast path: a tenant's overall cap is exact across providers: a claim elsewhere waits for the one in progress, then counts it", async () => {
  await setTenantLimit(
    tdb.database.db,
    { name: await tenantName(tenantA), provider: '*', maxInFlight: 1, weight: null, actor: 'test', reason: 'cap' },
    DEFAULTS,
  );
  const atReplicate = await prepared(tenantA);
  const atFal = await prepared(tenantA, 0, undefined, AT_FAL);
  const request = (t: { taskId: string; attemptId: string }, provider: string): SlotRequest => ({
    attemptId: t.attemptId,
    taskId: t.taskId,
    provider,
    tenantId: tenantA,
    priority: 0,
    ceiling: 10,
    policy: { mode: 'fair', agingMs: 0 },
    grantTtlMs: 300_000,
    tenantDefaults: DEFAULTS,
    locked: false,
  });
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let took!: () => void;
  const taken = new Promise<void>((resolve) => (took = resolve));
  // The first claim takes its slot at replicate and has not committed yet.
  const first = tdb.database.db.transaction(async (tx) => {
    assert.equal((await takeSlot(tx, request(atReplicate, 'replicate'), new Date())).kind, 'granted');
    await tx.update(taskAttempt).set({ submit_state: 'SUBMITTING' }).where(eq(taskAttempt.attempt_id, atReplicate.attemptId));
    took();
    await held;
  });
  await taken;
  const second = tdb.database.db.transaction((tx) => takeSlot(tx, request(atFal, 'fal'), new Date()));
  const early = await Promise.race([second.then(() => 'decided'), new Promise((r) => setTimeout(() => r('blocked'), 300))]);
  assert.equal(early, 'blocked', "the claim at fal waits for the tenant's cap lock");
  release();
  await first;
  const decision = await second;
  assert.equal(decision.kind, 'waiting');
  assert.equal(decision.kind === 'waiting' && decision.reason, 'tenant_total_cap', 'it counted the slot taken at replicate');
});

test('a task leaving two providers hands their slots on without a deadlock against a claim at the second (the lock order: providers, then tenants)', async () => {
  // The leaving task used replicate and then fal (its second attempt); a capped tenant waits at
  // both, so the release runs a grant pass at each: fal's first (sorted), which takes the
  // tenant's lock, then replicate's.
  const leaving = await prepared(tenantB);
  await tdb.database.pool.query(
    `INSERT INTO task_attempt SELECT (jsonb_populate_record(NULL::task_attempt, to_jsonb(a) || jsonb_build_object('attempt_id', gen_random_uuid(), 'provider', 'fal', 'attempt_no', a.attempt_no + 1))).*
     FROM task_attempt a WHERE a.attempt_id = $1`,
    [leaving.attemptId],
  );
  const waiters = [await prepared(tenantA), await prepared(tenantA, 0, undefined, AT_FAL)];
  for (const [i, w] of waiters.entries()) {
    await tdb.database.db
      .insert(slotWait)
      .values({ attempt_id: w.attemptId, task_id: w.taskId, provider: i === 0 ? 'replicate' : 'fal', tenant_id: tenantA, priority: 0, tenant_total_cap: 1 });
  }
  await tdb.database.db.insert(providerControl).values([
    { provider: 'replicate', queue_limit: 0 },
    { provider: 'fal', queue_limit: 0 },
  ]);
  // A claim at replicate: it holds replicate's control row, then takes the tenant's cap lock (checkClaim's order).
  const claim = await tdb.database.pool.connect();
  try {
    await claim.query('BEGIN');
    await claim.query(`SELECT 1 FROM provider_control WHERE provider = 'replicate' FOR UPDATE`);
    const release = tdb.database.db.transaction((tx) => releaseTaskSlots(tx, leaving.taskId, new Date()));
    // The release has had time to lock fal and run its pass there (taking the tenant's lock, if
    // it takes it then), and waits for replicate.
    await new Promise((r) => setTimeout(r, 400));
    await claim.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`tenant-slots:${tenantA}`]);
    await claim.query('COMMIT');
    await release;
  } catch (err) {
    await claim.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    claim.release();
  }
  assert.deepEqual(
    (await tdb.database.db.select().from(slotWait)).map((w) => w.granted_at),
    [null, null],
    'a ceiling of 0 grants nothing',
  );
});

test("a waiting task leaving the queue waits for its provider's lock before it deletes its row, so a grant pass writing that row does not deadlock with it", async () => {
  // X and Z wait at replicate; a claim there holds the provider's row and its pass is about to
  // write X's queue row (grant it, or refresh why it waits) when X is cancelled.
  const [x, z] = [await prepared(tenantA), await prepared(tenantB)];
  for (const w of [x, z]) {
    await tdb.database.db.insert(slotWait).values({ attempt_id: w.attemptId, task_id: w.taskId, provider: 'replicate', tenant_id: w.tenantId, priority: 0 });
  }
  await tdb.database.db.insert(providerControl).values({ provider: 'replicate', queue_limit: 0 });
  const claim = await tdb.database.pool.connect();
  try {
    await claim.query('BEGIN');
    await claim.query(`SELECT 1 FROM provider_control WHERE provider = 'replicate' FOR UPDATE`);
    const release = tdb.database.db.transaction((tx) => releaseTaskSlots(tx, x.taskId, new Date()));
    await new Promise((r) => setTimeout(r, 400));
    await claim.query(`UPDATE slot_wait SET reason = 'provider_full' WHERE attempt_id = $1`, [x.attemptId]);
    await claim.query('COMMIT');
    await release;
  } catch (err) {
    await claim.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    claim.release();
  }
  assert.deepEqual(
    (await tdb.database.db.select().from(slotWait)).map((w) => w.task_id),
    [z.taskId],
    'X left the queue; Z still waits',
  );
});

const waitRowOf = async (taskId: string) => (await tdb.database.db.select().from(slotWait).where(eq(slotWait.task_id, taskId)))[0];

async function tenantName(tenantId: string): Promise<string> {
  const { rows } = await tdb.database.pool.query<{ name: string }>('SELECT name FROM tenant WHERE tenant_id = $1', [tenantId]);
  return rows[0]!.name;
}

async function eventuallyTrue(check: () => boolean, timeoutMs = 5_000) {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) assert.fail('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}
