// The slot queue's facts (docs/providers.md "The slot queue"): the one module that writes
// `slot_wait`. A provider's slots are counted from attempt facts plus grants not yet used, under
// the provider's `provider_control` row lock, and handed out by domain/slot-queue.ts in the same
// transaction that freed them. A granted attempt's workflow is woken after the commit by a
// NOTIFY on SLOT_GRANTED_CHANNEL (workers/slot-grant-waker.ts); a long fallback timer covers a
// lost notification.
import { and, eq, inArray, isNull, sql } from 'drizzle-orm';
import type { DbOrTx } from './client';
import { providerControl, slotWait, tenantCapacity, type SlotWaitRow, type TenantCapacityRow } from './schema';
import { chooseGrants, queueOrder, type QueuePolicy, type SlotLoad, type WaitReason, type Waiter } from '../domain/slot-queue';
import { FINISHED_PROVIDER_JOB_STATES, TERMINAL_TASK_STATES, type TaskStatus } from '../domain/states';

/** pg_notify channel carrying the task id of each granted waiter (delivered on commit only). */
export const SLOT_GRANTED_CHANNEL = 'vidorch_slot_granted';

/** Attempt states that hold a job at the provider (or may): what the bulkhead counts. */
export const IN_FLIGHT_SUBMIT_STATES = ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN'] as const;
const inFlightStates = sql.raw(IN_FLIGHT_SUBMIT_STATES.map((s) => `'${s}'`).join(', '));
/** Task states whose attempts hold no slot: finished, or parked for a person (docs/decisions/0012). */
const SLOT_FREE_TASK_STATES = sql.raw([...TERMINAL_TASK_STATES, 'MANUAL_REVIEW'].map((s) => `'${s}'`).join(', '));
const FINISHED_JOB_STATES = sql.raw(FINISHED_PROVIDER_JOB_STATES.map((s) => `'${s}'`).join(', '));
/**
 * An attempt `a` that holds one of its provider's slots: in flight by its state, of a task we are
 * still driving, unless the provider already reported the job finished and that report waits in
 * the inbox. Such a job no longer runs at the provider; our own rescue and media steps are not its
 * concurrency. A task in MANUAL_REVIEW gives its slot back: it got there because its job is gone,
 * ran past the provider's maximum run time, or stayed unknown past its deadline, and counting it
 * would let parked tasks block the provider for everyone.
 */
export const holdsSlot = sql`a.submit_state IN (${inFlightStates})
  AND EXISTS (SELECT 1 FROM generation_task t WHERE t.task_id = a.task_id AND t.status NOT IN (${SLOT_FREE_TASK_STATES}))
  AND NOT EXISTS (
  SELECT 1 FROM callback_inbox i
  WHERE i.task_id = a.task_id AND i.attempt_id = a.attempt_id AND i.processed_at IS NULL
    AND i.event_type IN (${FINISHED_JOB_STATES}))`;

/** Task states whose active attempt holds (or is about to take) a slot. */
const SLOT_TASK_STATES: readonly TaskStatus[] = ['SUBMITTING', 'SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED', 'SUBMIT_UNKNOWN'];
/** Whether a task transition may free a slot (or leave the queue): out of the slot-holding states. */
export const transitionFreesSlot = (from: TaskStatus, to: TaskStatus): boolean => SLOT_TASK_STATES.includes(from) && !SLOT_TASK_STATES.includes(to);

interface Counted {
  readonly load: Omit<SlotLoad, 'limit'>;
}

/** Slots taken at `provider` (attempts holding one + unused grants), in total and per tenant. */
async function countSlots(tx: DbOrTx, provider: string, totalsFor: readonly string[]): Promise<Counted> {
  const { rows } = await tx.execute(sql`
    SELECT t.tenant_id::text AS tenant, count(*)::int AS n
    FROM task_attempt a JOIN generation_task t ON t.task_id = a.task_id
    WHERE a.provider = ${provider} AND ${holdsSlot}
    GROUP BY t.tenant_id
    UNION ALL
    SELECT w.tenant_id::text, count(*)::int FROM slot_wait w
    WHERE w.provider = ${provider} AND w.granted_at IS NOT NULL
    GROUP BY w.tenant_id`);
  const atProvider = new Map<string, number>();
  let inFlight = 0;
  for (const r of rows as { tenant: string; n: number }[]) {
    atProvider.set(r.tenant, (atProvider.get(r.tenant) ?? 0) + r.n);
    inFlight += r.n;
  }
  const total = new Map<string, number>();
  if (totalsFor.length > 0) {
    const { rows: totals } = await tx.execute(sql`
      SELECT tenant, sum(n)::int AS n FROM (
        SELECT t.tenant_id::text AS tenant, count(*)::int AS n
        FROM task_attempt a JOIN generation_task t ON t.task_id = a.task_id
        WHERE t.tenant_id = ANY(${sql.param(totalsFor)}::uuid[]) AND ${holdsSlot}
        GROUP BY t.tenant_id
        UNION ALL
        SELECT w.tenant_id::text, count(*)::int FROM slot_wait w
        WHERE w.tenant_id = ANY(${sql.param(totalsFor)}::uuid[]) AND w.granted_at IS NOT NULL
        GROUP BY w.tenant_id) x
      GROUP BY tenant`);
    for (const r of totals as { tenant: string; n: number }[]) total.set(r.tenant, r.n);
  }
  return { load: { inFlight, tenantAtProvider: atProvider, tenantTotal: total } };
}

const toWaiter = (r: SlotWaitRow): Waiter => ({
  id: r.attempt_id,
  tenant: r.tenant_id,
  priority: r.priority,
  sinceMs: r.since.getTime(),
  weight: r.weight,
  tenantProviderCap: r.tenant_provider_cap,
  tenantTotalCap: r.tenant_total_cap,
});

interface ProviderQueueConfig {
  readonly limit: number | null;
  readonly policy: QueuePolicy;
}

async function lockProvider(tx: DbOrTx, provider: string): Promise<ProviderQueueConfig> {
  const lock = () => tx.select().from(providerControl).where(eq(providerControl.provider, provider)).for('update');
  // Created on the provider's first claim; after that one round trip, not two.
  let [row] = await lock();
  if (!row) {
    await tx.insert(providerControl).values({ provider }).onConflictDoNothing();
    [row] = await lock();
  }
  return {
    // The ceiling the last claim used (it ramps after a rebuild), else the operator's limit.
    limit: row?.queue_limit ?? row?.max_in_flight ?? null,
    policy: { mode: row?.queue_policy ?? 'fair', agingMs: row?.queue_aging_ms ?? 0 },
  };
}

export interface GrantPass {
  /** Attempt ids granted in this pass. */
  readonly granted: readonly string[];
  /** Slots taken after the pass, and the ceiling. */
  readonly inFlight: number;
  readonly limit: number | null;
}

/**
 * Hands the provider's free slots to its waiters, in this transaction: locks the provider's
 * control row (the bulkhead's lock), counts from facts, chooses, marks the chosen granted and
 * queues a wake for each (NOTIFY, sent on commit). Tenants with an overall cap are also locked
 * (advisory, sorted), so the cap is exact across providers.
 */
export async function grantFreeSlots(tx: DbOrTx, provider: string, now: Date): Promise<GrantPass> {
  const config = await lockProvider(tx, provider);
  const rows = await tx
    .select()
    .from(slotWait)
    .where(and(eq(slotWait.provider, provider), isNull(slotWait.granted_at)));
  if (config.limit === null) {
    // No finite ceiling (any more): everyone waiting may go.
    return markGranted(
      tx,
      rows,
      rows.map((r) => r.attempt_id),
      new Map(),
      { inFlight: rows.length, limit: null },
    );
  }
  if (rows.length === 0) return { granted: [], inFlight: 0, limit: config.limit };
  const capped = [...new Set(rows.filter((r) => r.tenant_total_cap !== null).map((r) => r.tenant_id))].sort();
  for (const tenant of capped) await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`tenant-slots:${tenant}`}))`);
  const { load } = await countSlots(tx, provider, capped);
  const choice = chooseGrants(rows.map(toWaiter), { ...load, limit: config.limit }, config.policy, now.getTime());
  return markGranted(tx, rows, choice.granted, choice.waiting, { inFlight: load.inFlight + choice.granted.length, limit: config.limit });
}

async function markGranted(
  tx: DbOrTx,
  rows: readonly SlotWaitRow[],
  granted: readonly string[],
  waiting: ReadonlyMap<string, WaitReason>,
  after: { inFlight: number; limit: number | null },
): Promise<GrantPass> {
  if (granted.length > 0) {
    const byId = new Map(rows.map((r) => [r.attempt_id, r]));
    await tx.execute(sql`
      UPDATE slot_wait SET granted_at = now(), reason = NULL
      WHERE attempt_id = ANY(${sql.param([...granted])}::uuid[]) AND granted_at IS NULL`);
    const tasks = granted.map((id) => byId.get(id)!.task_id);
    await tx.execute(sql`SELECT pg_notify(${SLOT_GRANTED_CHANNEL}, t) FROM unnest(${sql.param(tasks)}::text[]) AS t`);
  }
  // Keep the reason fresh only when it changed (a read of the queue says why each one waits).
  const changed = rows.filter((r) => waiting.has(r.attempt_id) && waiting.get(r.attempt_id) !== r.reason);
  if (changed.length > 0) {
    await tx.execute(sql`
      UPDATE slot_wait AS w SET reason = v.reason
      FROM unnest(${sql.param(changed.map((r) => r.attempt_id))}::uuid[], ${sql.param(changed.map((r) => waiting.get(r.attempt_id)!))}::text[]) AS v(id, reason)
      WHERE w.attempt_id = v.id AND w.granted_at IS NULL`);
  }
  return { granted, ...after };
}

export interface SlotRequest {
  readonly attemptId: string;
  readonly taskId: string;
  readonly provider: string;
  readonly tenantId: string;
  readonly priority: number;
  /** This claim's ceiling for the provider (the bulkhead's, ramp included). */
  readonly ceiling: number;
  readonly policy: QueuePolicy;
  /** Grants older than this go back to the queue (their workflow never came for them). */
  readonly grantTtlMs: number;
  /** The tenant's caps and weight (tenant_capacity rows, else the configured defaults). */
  readonly weight: number;
  readonly tenantProviderCap: number | null;
  readonly tenantTotalCap: number | null;
}

export type SlotDecision =
  | { readonly kind: 'granted' }
  | { readonly kind: 'waiting'; readonly reason: WaitReason; readonly since: Date; readonly inFlight: number; readonly limit: number };

/**
 * In the claim transaction (task and attempt locked), before PREPARED → SUBMITTING: takes a slot
 * for the attempt (its own grant, or a free slot it wins in a grant pass), or leaves it waiting.
 * A granted row is deleted here, in the transaction that moves the attempt into a counted state.
 */
export async function takeSlot(tx: DbOrTx, req: SlotRequest, now: Date): Promise<SlotDecision> {
  await lockProvider(tx, req.provider);
  await tx
    .update(providerControl)
    .set({ queue_limit: req.ceiling, queue_policy: req.policy.mode, queue_aging_ms: req.policy.agingMs })
    .where(
      and(
        eq(providerControl.provider, req.provider),
        sql`(${providerControl.queue_limit}, ${providerControl.queue_policy}, ${providerControl.queue_aging_ms})
          IS DISTINCT FROM (${req.ceiling}::int, ${req.policy.mode}::text, ${req.policy.agingMs}::int)`,
      ),
    );
  // Grants nobody came for (a terminated workflow) are dropped: put back in the queue, the dead
  // waiter would be granted again in this very pass (it is queued; a live newcomer is not yet) and
  // the slot would never reach a live claimant. A live but slow workflow queues again when it
  // claims (a new row, at the end), so nothing that still runs is lost.
  await tx.execute(sql`
    DELETE FROM slot_wait
    WHERE provider = ${req.provider} AND granted_at < ${new Date(now.getTime() - req.grantTtlMs)} AND attempt_id <> ${req.attemptId}`);
  const [mine] = await tx.select().from(slotWait).where(eq(slotWait.attempt_id, req.attemptId));
  if (mine && mine.provider !== req.provider) {
    // Re-routed while waiting: the place in the old provider's queue is given up.
    await tx.delete(slotWait).where(eq(slotWait.attempt_id, req.attemptId));
  }
  if (mine?.granted_at && mine.provider === req.provider) {
    await tx.delete(slotWait).where(eq(slotWait.attempt_id, req.attemptId));
    return { kind: 'granted' };
  }
  const values = {
    attempt_id: req.attemptId,
    task_id: req.taskId,
    provider: req.provider,
    tenant_id: req.tenantId,
    priority: Math.min(9, Math.max(0, req.priority)),
    weight: req.weight,
    tenant_provider_cap: req.tenantProviderCap,
    tenant_total_cap: req.tenantTotalCap,
  };
  const [row] = await tx
    .insert(slotWait)
    .values({ ...values, since: now })
    .onConflictDoUpdate({
      target: slotWait.attempt_id,
      set: { weight: values.weight, tenant_provider_cap: values.tenant_provider_cap, tenant_total_cap: values.tenant_total_cap },
    })
    .returning();
  const pass = await grantFreeSlots(tx, req.provider, now);
  if (pass.granted.includes(req.attemptId)) {
    await tx.delete(slotWait).where(eq(slotWait.attempt_id, req.attemptId));
    return { kind: 'granted' };
  }
  const [after] = await tx.select({ reason: slotWait.reason }).from(slotWait).where(eq(slotWait.attempt_id, req.attemptId));
  return {
    kind: 'waiting',
    reason: (after?.reason ?? 'provider_full') as WaitReason,
    since: row!.since,
    inFlight: pass.inFlight,
    limit: pass.limit ?? req.ceiling,
  };
}

/**
 * A task left the slot-holding states (db/tasks.ts casTaskStatus): its place in any queue is
 * given up, and each provider it used hands its free slots on in this same transaction.
 */
export async function releaseTaskSlots(tx: DbOrTx, taskId: string, now: Date): Promise<void> {
  await tx.delete(slotWait).where(eq(slotWait.task_id, taskId));
  const { rows } = await tx.execute(sql`
    SELECT DISTINCT a.provider FROM task_attempt a
    WHERE a.task_id = ${taskId}
      AND EXISTS (SELECT 1 FROM slot_wait w WHERE w.provider = a.provider AND w.granted_at IS NULL)
    ORDER BY a.provider`);
  for (const r of rows as { provider: string }[]) await grantFreeSlots(tx, r.provider, now);
}

/** Providers with someone waiting that `tenantId` takes part in (after an operator changed its caps). */
export async function providersWithWaiters(tx: DbOrTx, tenantId?: string): Promise<string[]> {
  const { rows } = await tx.execute(sql`
    SELECT DISTINCT provider FROM slot_wait
    WHERE granted_at IS NULL ${tenantId ? sql`AND tenant_id = ${tenantId}` : sql``}
    ORDER BY provider`);
  return (rows as { provider: string }[]).map((r) => r.provider);
}

export interface QueueEntry {
  readonly attemptId: string;
  readonly taskId: string;
  readonly tenantId: string;
  readonly priority: number;
  readonly since: Date;
  /** 1-based place in the grant order; null once granted. */
  readonly position: number | null;
  readonly grantedAt: Date | null;
  readonly reason: string | null;
}

/** Who waits at `provider`, in the order they would be granted (ops provider queue, GET /v1/tasks/:id). */
export async function providerQueue(
  db: DbOrTx,
  provider: string,
  now: Date,
): Promise<{ entries: QueueEntry[]; inFlight: number; limit: number | null; policy: QueuePolicy }> {
  const [control] = await db.select().from(providerControl).where(eq(providerControl.provider, provider));
  const policy: QueuePolicy = { mode: control?.queue_policy ?? 'fair', agingMs: control?.queue_aging_ms ?? 0 };
  const rows = await db.select().from(slotWait).where(eq(slotWait.provider, provider));
  const { load } = await countSlots(db, provider, []);
  const waiting = rows.filter((r) => r.granted_at === null);
  const order = queueOrder(waiting.map(toWaiter), load, policy, now.getTime());
  const place = new Map(order.map((id, i) => [id, i + 1]));
  const entry = (r: SlotWaitRow): QueueEntry => ({
    attemptId: r.attempt_id,
    taskId: r.task_id,
    tenantId: r.tenant_id,
    priority: r.priority,
    since: r.since,
    position: place.get(r.attempt_id) ?? null,
    grantedAt: r.granted_at,
    reason: r.reason,
  });
  const entries = rows.map(entry).sort((a, b) => (a.position ?? 0) - (b.position ?? 0));
  return { entries, inFlight: load.inFlight, limit: control?.queue_limit ?? control?.max_in_flight ?? null, policy };
}

/** The task's place in its provider's queue, or null when it does not wait. */
export async function taskSlotWait(db: DbOrTx, taskId: string, now: Date): Promise<(QueueEntry & { provider: string; waiting: number }) | null> {
  const [row] = await db.select().from(slotWait).where(eq(slotWait.task_id, taskId));
  if (!row) return null;
  const queue = await providerQueue(db, row.provider, now);
  const mine = queue.entries.find((e) => e.attemptId === row.attempt_id);
  if (!mine) return null;
  return { ...mine, provider: row.provider, waiting: queue.entries.filter((e) => e.grantedAt === null).length };
}

/** Waiting attempts per provider and tenant, and each provider's oldest wait (fact gauges). */
export async function waitingSummary(db: DbOrTx): Promise<{ provider: string; tenantId: string; waiting: number; oldestSince: Date }[]> {
  const { rows } = await db.execute(sql`
    SELECT provider, tenant_id::text AS tenant_id, count(*)::int AS waiting, min(since) AS oldest
    FROM slot_wait WHERE granted_at IS NULL GROUP BY provider, tenant_id`);
  return (rows as { provider: string; tenant_id: string; waiting: number; oldest: string | Date }[]).map((r) => ({
    provider: r.provider,
    tenantId: r.tenant_id,
    waiting: r.waiting,
    oldestSince: new Date(r.oldest),
  }));
}

export interface TenantSlotDefaults {
  /** In-flight cap per tenant per provider; null: none. */
  readonly perProvider: number | null;
  /** In-flight cap per tenant over every provider; null: none. */
  readonly total: number | null;
  readonly weight: number;
}

/** A tenant's caps and weight at `provider`: its tenant_capacity rows (provider, then '*'), else the defaults. */
export async function tenantSlotTerms(tx: DbOrTx, tenantId: string, provider: string, defaults: TenantSlotDefaults) {
  const rows = await tx
    .select()
    .from(tenantCapacity)
    .where(and(eq(tenantCapacity.tenant_id, tenantId), inArray(tenantCapacity.provider, [provider, '*'])));
  const exact = rows.find((r) => r.provider === provider);
  const all = rows.find((r) => r.provider === '*');
  return {
    tenantProviderCap: exact ? exact.max_in_flight : defaults.perProvider,
    tenantTotalCap: all ? all.max_in_flight : defaults.total,
    weight: exact?.weight ?? all?.weight ?? defaults.weight,
  };
}

/**
 * Sets a tenant's cap and weight (`provider = '*'`: over every provider) and carries them onto its
 * waiting rows, then grants what the change frees. Returns the row before (for the audit).
 */
export async function setTenantCapacity(
  tx: DbOrTx,
  input: { tenantId: string; provider: string; maxInFlight: number | null; weight: number | null; actor: string; reason: string },
  defaults: TenantSlotDefaults,
  now: Date,
): Promise<{ before: TenantCapacityRow | null }> {
  const [before] = await tx
    .select()
    .from(tenantCapacity)
    .where(and(eq(tenantCapacity.tenant_id, input.tenantId), eq(tenantCapacity.provider, input.provider)))
    .for('update');
  const set = { max_in_flight: input.maxInFlight, weight: input.weight, reason: input.reason, updated_by: input.actor, updated_at: now };
  await tx
    .insert(tenantCapacity)
    .values({ tenant_id: input.tenantId, provider: input.provider, ...set })
    .onConflictDoUpdate({ target: [tenantCapacity.tenant_id, tenantCapacity.provider], set });
  const providers = await providersWithWaiters(tx, input.tenantId);
  for (const provider of providers) {
    const terms = await tenantSlotTerms(tx, input.tenantId, provider, defaults);
    await tx
      .update(slotWait)
      .set({ weight: terms.weight, tenant_provider_cap: terms.tenantProviderCap, tenant_total_cap: terms.tenantTotalCap })
      .where(and(eq(slotWait.tenant_id, input.tenantId), eq(slotWait.provider, provider)));
    await grantFreeSlots(tx, provider, now);
  }
  return { before: before ?? null };
}

/**
 * Whether `provider` has a free slot nobody waits for (a waiting attempt of another provider may
 * move there: docs/providers.md "The slot queue"). A read without the provider's lock: the claim
 * that follows takes the slot under it, or waits in that provider's queue.
 */
export async function hasFreeSlot(tx: DbOrTx, provider: string, limit: number): Promise<boolean> {
  if (!Number.isFinite(limit)) return true;
  const { rows } = await tx.execute(sql`
    SELECT (SELECT count(*)::int FROM task_attempt a WHERE a.provider = ${provider} AND ${holdsSlot})
         + (SELECT count(*)::int FROM slot_wait w WHERE w.provider = ${provider} AND w.granted_at IS NOT NULL) AS taken,
           EXISTS (SELECT 1 FROM slot_wait w WHERE w.provider = ${provider} AND w.granted_at IS NULL) AS queued`);
  const r = rows[0] as { taken: number; queued: boolean };
  return !r.queued && r.taken < limit;
}

/** Leaves the queue (the attempt moved to another provider before it was sent). */
export async function leaveQueue(tx: DbOrTx, attemptId: string): Promise<void> {
  await tx.delete(slotWait).where(eq(slotWait.attempt_id, attemptId));
}
