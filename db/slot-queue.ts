// The slot queue's facts (docs/providers.md "The slot queue"): the one module that writes
// `slot_wait`. A provider's slots are counted from attempt facts plus grants not yet used, under
// the provider's `provider_control` row lock, and handed out by domain/slot-queue.ts in the same
// transaction that freed them. A granted attempt's workflow is woken after the commit by a
// NOTIFY on SLOT_GRANTED_CHANNEL (workers/slot-grant-waker.ts); a long fallback timer covers a
// lost notification.
import { and, eq, isNull, sql } from 'drizzle-orm';
import type { DbOrTx } from './client';
import { providerControl, slotWait, tenantCapacity, type SlotWaitRow, type TenantCapacityRow } from './schema';
import { chooseGrants, queueOrder, takesFreeSlot, type QueuePolicy, type WaitReason, type Waiter } from '../domain/slot-queue';
import { FINISHED_PROVIDER_JOB_STATES, TERMINAL_TASK_STATES, type TaskStatus } from '../domain/states';

/** pg_notify channel carrying the task id of each granted waiter (delivered on commit only). */
export const SLOT_GRANTED_CHANNEL = 'vidorch_slot_granted';
/**
 * pg_notify channel carrying a provider whose slots a transaction freed while it held another
 * provider's control row (the one lock order: grantFreeSlotsAt): the pass runs after the commit.
 */
export const SLOT_FREED_CHANNEL = 'vidorch_slot_freed';

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

/** Slots taken at `provider` (attempts holding one + unused grants), in total and per tenant: O(slots), not O(waiting). */
async function countSlots(tx: DbOrTx, provider: string): Promise<{ inFlight: number; tenantAtProvider: Map<string, number> }> {
  const { rows } = await tx.execute(sql`
    SELECT t.tenant_id::text AS tenant, count(*)::int AS n
    FROM task_attempt a JOIN generation_task t ON t.task_id = a.task_id
    WHERE a.provider = ${provider} AND ${holdsSlot}
    GROUP BY t.tenant_id
    UNION ALL
    SELECT w.tenant_id::text, count(*)::int FROM slot_wait w
    WHERE w.provider = ${provider} AND w.granted_at IS NOT NULL
    GROUP BY w.tenant_id`);
  const tenantAtProvider = new Map<string, number>();
  let inFlight = 0;
  for (const r of rows as { tenant: string; n: number }[]) {
    tenantAtProvider.set(r.tenant, (tenantAtProvider.get(r.tenant) ?? 0) + r.n);
    inFlight += r.n;
  }
  return { inFlight, tenantAtProvider };
}

/** Slots taken by each of `tenants` over every provider (attempts holding one + unused grants). */
async function tenantTotals(tx: DbOrTx, tenants: readonly string[]): Promise<Map<string, number>> {
  const total = new Map<string, number>();
  if (tenants.length === 0) return total;
  const { rows } = await tx.execute(sql`
    SELECT tenant, sum(n)::int AS n FROM (
      SELECT t.tenant_id::text AS tenant, count(*)::int AS n
      FROM task_attempt a JOIN generation_task t ON t.task_id = a.task_id
      WHERE t.tenant_id = ANY(${sql.param(tenants)}::uuid[]) AND ${holdsSlot}
      GROUP BY t.tenant_id
      UNION ALL
      SELECT w.tenant_id::text, count(*)::int FROM slot_wait w
      WHERE w.tenant_id = ANY(${sql.param(tenants)}::uuid[]) AND w.granted_at IS NOT NULL
      GROUP BY w.tenant_id) x
    GROUP BY tenant`);
  for (const r of rows as { tenant: string; n: number }[]) total.set(r.tenant, r.n);
  return total;
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

/**
 * The providers whose control rows this transaction holds, kept in a transaction-local setting
 * (Postgres forgets it at commit or rollback): the one lock order (docs/providers.md "The slot
 * queue") lets a transaction that holds a provider's row take no other provider's row.
 */
export const HELD_SETTING = 'vidorch.slot_providers';
const heldAfter = (held: string | null, provider: string) => [...new Set([...(held ? held.split(',') : []), provider])].sort().join(',');

async function lockProvider(tx: DbOrTx, provider: string): Promise<ProviderQueueConfig> {
  type Locked = { queue_limit: number | null; max_in_flight: number | null; queue_policy: QueuePolicy['mode'] | null; queue_aging_ms: number | null };
  const lock = async () => {
    const { rows } = await tx.execute<Locked>(sql`
      WITH control AS (
        SELECT queue_limit, max_in_flight, queue_policy, queue_aging_ms FROM provider_control WHERE provider = ${provider} FOR UPDATE)
      SELECT control.*, set_config(${HELD_SETTING}, ${provider}::text, true) AS held FROM control`);
    return rows[0];
  };
  // Created on the provider's first claim; after that one round trip, not two.
  let row = await lock();
  if (!row) {
    await tx.insert(providerControl).values({ provider }).onConflictDoNothing();
    row = await lock();
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
  /** Why each waiter the pass looked at and did not grant still waits (the heads of each tenant's lines, not everyone). */
  readonly waiting: ReadonlyMap<string, WaitReason>;
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
  return grantPass(tx, provider, await lockProvider(tx, provider), now);
}

/**
 * Grant passes at several providers in one transaction, in the one lock order every slot writer
 * keeps (docs/providers.md "The slot queue"): providers' control rows (sorted), then tenants' cap
 * locks (sorted), and a transaction that already holds a provider's row takes no other. So every
 * provider is locked first, `between` runs (writes to those providers' queue rows), every capped
 * tenant waiting at any of them is locked, and only then do the passes run; their own tenant
 * locks are already held. In a transaction that already holds a provider's row (a claim), a pass
 * at any other provider is not run here but after the commit, in a transaction of its own
 * (a NOTIFY on SLOT_FREED_CHANNEL that workers/slot-grant-waker.ts answers). A row `between`
 * deletes at such a provider without its lock cannot deadlock: this transaction waits for nothing
 * a pass there holds, and a pass that chose the row grants nothing once it is gone.
 */
export async function grantFreeSlotsAt(tx: DbOrTx, providers: readonly string[], now: Date, between?: () => Promise<void>): Promise<void> {
  const { rows: h } = await tx.execute<{ held: string | null }>(sql`SELECT nullif(current_setting(${HELD_SETTING}, true), '') AS held`);
  const held = h[0]?.held ? h[0].held.split(',') : [];
  const wanted = [...new Set(providers)].sort();
  const sorted = held.length === 0 ? wanted : wanted.filter((p) => held.includes(p));
  const later = wanted.filter((p) => !sorted.includes(p));
  if (later.length > 0) await tx.execute(sql`SELECT pg_notify(${SLOT_FREED_CHANNEL}, p) FROM unnest(${sql.param(later)}::text[]) AS p`);
  const configs: ProviderQueueConfig[] = [];
  for (const provider of sorted) configs.push(await lockProvider(tx, provider));
  if (sorted.length > 1) await tx.execute(sql`SELECT set_config(${HELD_SETTING}, ${sorted.reduce((a, p) => heldAfter(a, p), '')}::text, true)`);
  await between?.();
  if (sorted.length > 1) {
    const { rows } = await tx.execute(sql`
      SELECT DISTINCT tenant_id::text AS tenant FROM slot_wait
      WHERE provider = ANY(${sql.param(sorted)}::text[]) AND granted_at IS NULL AND tenant_total_cap IS NOT NULL`);
    const tenants = (rows as { tenant: string }[]).map((r) => r.tenant).sort();
    for (const tenant of tenants) await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`tenant-slots:${tenant}`}))`);
  }
  for (const [i, provider] of sorted.entries()) await grantPass(tx, provider, configs[i]!, now);
}

/**
 * The waiters a pass may grant `free` slots to: the first `free` of each (tenant, priority) line,
 * oldest first, read from idx_slot_wait_lines (a skip scan over the lines, then `free` rows of
 * each). The chooser only ever grants a line's oldest ungranted waiter (within a tenant and a
 * priority the older one has the same or a higher effective priority and is older; caps are per
 * tenant), so these rows give the same grants as every waiter would: O(lines × free) rows, not
 * O(waiting).
 */
async function candidates(tx: DbOrTx, provider: string, free: number): Promise<SlotWaitRow[]> {
  const { rows } = await tx.execute(sql`
    WITH RECURSIVE line AS (
      (SELECT tenant_id, priority FROM slot_wait
       WHERE provider = ${provider} AND granted_at IS NULL ORDER BY tenant_id, priority LIMIT 1)
      UNION ALL
      SELECT n.tenant_id, n.priority FROM line CROSS JOIN LATERAL (
        SELECT w.tenant_id, w.priority FROM slot_wait w
        WHERE w.provider = ${provider} AND w.granted_at IS NULL AND (w.tenant_id, w.priority) > (line.tenant_id, line.priority)
        ORDER BY w.tenant_id, w.priority LIMIT 1) n)
    SELECT w.* FROM line CROSS JOIN LATERAL (
      SELECT * FROM slot_wait w
      WHERE w.provider = ${provider} AND w.granted_at IS NULL AND w.tenant_id = line.tenant_id AND w.priority = line.priority
      ORDER BY w.since, w.attempt_id LIMIT ${free}) w`);
  // A raw statement's timestamps arrive as strings.
  return (rows as (SlotWaitRow & { since: Date | string })[]).map((r) => ({ ...r, since: new Date(r.since), granted_at: null }));
}

/** The grant pass, the provider's control row lock held and its rules (`config`) known. */
async function grantPass(tx: DbOrTx, provider: string, config: ProviderQueueConfig, now: Date): Promise<GrantPass> {
  if (config.limit === null) {
    // No finite ceiling (any more): everyone waiting may go.
    const rows = await tx
      .select()
      .from(slotWait)
      .where(and(eq(slotWait.provider, provider), isNull(slotWait.granted_at)));
    const granted = await markGranted(
      tx,
      rows,
      rows.map((r) => r.attempt_id),
      new Map(),
    );
    return { granted, waiting: new Map(), inFlight: granted.length, limit: null };
  }
  const load = await countSlots(tx, provider);
  const free = config.limit - load.inFlight;
  // Full: nobody can go, and nobody needs to be read.
  if (free <= 0) return { granted: [], waiting: new Map(), inFlight: load.inFlight, limit: config.limit };
  const rows = await candidates(tx, provider, free);
  if (rows.length === 0) return { granted: [], waiting: new Map(), inFlight: load.inFlight, limit: config.limit };
  const capped = [...new Set(rows.filter((r) => r.tenant_total_cap !== null).map((r) => r.tenant_id))].sort();
  for (const tenant of capped) await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${`tenant-slots:${tenant}`}))`);
  const tenantTotal = await tenantTotals(tx, capped);
  const choice = chooseGrants(rows.map(toWaiter), { ...load, tenantTotal, limit: config.limit }, config.policy, now.getTime());
  const granted = await markGranted(tx, rows, choice.granted, choice.waiting);
  return { granted, waiting: choice.waiting, inFlight: load.inFlight + granted.length, limit: config.limit };
}

/** Marks `granted` granted and queues their wakes; keeps the others' reasons fresh. Returns the ids it granted. */
async function markGranted(tx: DbOrTx, rows: readonly SlotWaitRow[], granted: readonly string[], waiting: ReadonlyMap<string, WaitReason>): Promise<string[]> {
  let marked: string[] = [];
  if (granted.length > 0) {
    // Only rows still waiting are granted, and only they are woken.
    const { rows: done } = await tx.execute<{ attempt_id: string; task_id: string }>(sql`
      WITH g AS (
        UPDATE slot_wait SET granted_at = now(), reason = NULL
        WHERE attempt_id = ANY(${sql.param([...granted])}::uuid[]) AND granted_at IS NULL
        RETURNING attempt_id::text, task_id::text)
      SELECT g.attempt_id, g.task_id, pg_notify(${SLOT_GRANTED_CHANNEL}, g.task_id) FROM g`);
    const order = new Map(granted.map((id, i) => [id, i]));
    marked = done.map((r) => r.attempt_id).sort((a, b) => order.get(a)! - order.get(b)!);
  }
  // Keep the reason fresh only when it changed (a read of the queue says why each one waits).
  const changed = rows.filter((r) => waiting.has(r.attempt_id) && waiting.get(r.attempt_id) !== r.reason);
  if (changed.length > 0) {
    await tx.execute(sql`
      UPDATE slot_wait AS w SET reason = v.reason
      FROM unnest(${sql.param(changed.map((r) => r.attempt_id))}::uuid[], ${sql.param(changed.map((r) => waiting.get(r.attempt_id)!))}::text[]) AS v(id, reason)
      WHERE w.attempt_id = v.id AND w.granted_at IS NULL`);
  }
  return marked;
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
  /** The tenant's caps and weight where it has no tenant_capacity row. */
  readonly tenantDefaults: TenantSlotDefaults;
  /** The claim already holds the provider's control row lock (guard.admit read it so). */
  readonly locked: boolean;
}

export type SlotDecision =
  | { readonly kind: 'granted' }
  | { readonly kind: 'waiting'; readonly reason: WaitReason; readonly since: Date; readonly inFlight: number; readonly limit: number };

/** What the claim found at its provider (checkClaim), under the provider's lock. */
type ClaimCheck = {
  /** Its own grant at this provider, used: the check deleted the row. */
  readonly used: boolean;
  /** The provider its slot_wait row names (before the check), or null: it has none. */
  readonly queuedAt: string | null;
  /** Someone else waits (not granted) at the provider. */
  readonly othersWait: boolean;
  /** Slots taken at the provider (as countSlots counts, grants past their TTL left out), and the tenant's share of them. */
  readonly taken: number;
  readonly tenantTaken: number;
  readonly weight: number;
  readonly tenantProviderCap: number | null;
  readonly tenantTotalCap: number | null;
  /** The tenant's overall-cap lock was taken (after the provider's), for the count that follows. */
  readonly totalLocked: boolean;
};

/**
 * In the claim transaction (task and attempt locked), before PREPARED → SUBMITTING: takes a slot
 * for the attempt (its own grant, or a free slot it wins in a grant pass), or leaves it waiting.
 * A granted row is deleted here, in the transaction that moves the attempt into a counted state.
 * Fast path (docs/providers.md "The slot queue"): with no row of its own and nobody waiting at
 * the provider, a claim with room takes its slot from the check alone, writing no row.
 */
export async function takeSlot(tx: DbOrTx, req: SlotRequest, now: Date): Promise<SlotDecision> {
  if (!req.locked) await lockProvider(tx, req.provider);
  const claim = await checkClaim(tx, req, now);
  if (claim.used) return { kind: 'granted' };
  if (claim.queuedAt === null && !claim.othersWait) {
    // Nobody to jump ahead of: the chooser would pass this claimant alone, so decide as it would.
    const me = waiterOf(req, claim, now);
    const load = {
      inFlight: claim.taken,
      limit: req.ceiling,
      tenantAtProvider: new Map([[req.tenantId, claim.tenantTaken]]),
      tenantTotal: new Map<string, number>(),
    };
    if (takesFreeSlot(me, load)) {
      if (me.tenantTotalCap === null) return { kind: 'granted' };
      if (claim.totalLocked && takesFreeSlot(me, { ...load, tenantTotal: await tenantTotals(tx, [req.tenantId]) })) return { kind: 'granted' };
    }
  }
  return queueForSlot(tx, req, claim, now);
}

const waiterOf = (req: SlotRequest, claim: ClaimCheck, now: Date): Waiter => ({
  id: req.attemptId,
  tenant: req.tenantId,
  priority: req.priority,
  sinceMs: now.getTime(),
  weight: claim.weight,
  tenantProviderCap: claim.tenantProviderCap,
  tenantTotalCap: claim.tenantTotalCap,
});

/**
 * One statement, under the provider's lock: keeps the rules the grant passes of other
 * transactions use (the ceiling with the ramp, the policy) on the control row when they changed,
 * drops the grants nobody came for, uses the attempt's own grant, and reads what the decision
 * needs: its row, whether anyone else waits, the slots taken and the tenant's terms. A tenant
 * with an overall cap and nobody waiting here has its cap's lock taken last (the grant pass's
 * order: the provider, then the tenant), so the count that follows sees every claim before it.
 */
async function checkClaim(tx: DbOrTx, req: SlotRequest, now: Date): Promise<ClaimCheck> {
  const cutoff = new Date(now.getTime() - req.grantTtlMs);
  // Grants nobody came for (a terminated workflow) are dropped: put back in the queue, the dead
  // waiter would be granted again in this very pass (it is queued; a live newcomer is not yet) and
  // the slot would never reach a live claimant. A live but slow workflow queues again when it
  // claims (a new row, at the end), so nothing that still runs is lost. Deleted in this same
  // statement, so the count leaves them out by the same condition.
  const { rows } = await tx.execute<ClaimCheck>(sql`
    WITH rules AS (
      UPDATE provider_control SET queue_limit = ${req.ceiling}, queue_policy = ${req.policy.mode}, queue_aging_ms = ${req.policy.agingMs}
      WHERE provider = ${req.provider}
        AND (queue_limit, queue_policy, queue_aging_ms) IS DISTINCT FROM (${req.ceiling}::int, ${req.policy.mode}::text, ${req.policy.agingMs}::int)),
    expired AS (
      DELETE FROM slot_wait WHERE provider = ${req.provider} AND granted_at < ${cutoff} AND attempt_id <> ${req.attemptId}),
    used AS (
      DELETE FROM slot_wait WHERE attempt_id = ${req.attemptId} AND provider = ${req.provider} AND granted_at IS NOT NULL RETURNING attempt_id),
    held AS (
      SELECT t.tenant_id FROM task_attempt a JOIN generation_task t ON t.task_id = a.task_id
      WHERE a.provider = ${req.provider} AND ${holdsSlot}
      UNION ALL
      SELECT w.tenant_id FROM slot_wait w WHERE w.provider = ${req.provider} AND w.granted_at >= ${cutoff}),
    claim AS (
      SELECT EXISTS (SELECT 1 FROM used) AS used,
        (SELECT provider FROM slot_wait WHERE attempt_id = ${req.attemptId}) AS "queuedAt",
        EXISTS (SELECT 1 FROM slot_wait w WHERE w.provider = ${req.provider} AND w.granted_at IS NULL AND w.attempt_id <> ${req.attemptId}) AS "othersWait",
        (SELECT count(*)::int FROM held) AS taken,
        (SELECT count(*)::int FROM held WHERE tenant_id = ${req.tenantId}) AS "tenantTaken",
        terms.*
      FROM (${termsOf(req.tenantId, req.provider, req.tenantDefaults)}) terms)
    SELECT claim.*,
      CASE WHEN claim."queuedAt" IS NULL AND NOT claim."othersWait" AND claim."tenantTotalCap" IS NOT NULL
        THEN (SELECT true FROM pg_advisory_xact_lock(hashtext(${`tenant-slots:${req.tenantId}`})))
        ELSE false END AS "totalLocked",
      set_config(${HELD_SETTING}, ${req.provider}::text, true) AS held
    FROM claim`);
  return rows[0]!;
}

/** The queue's way: the attempt joins (or keeps its place in) the queue, and a grant pass decides. */
async function queueForSlot(tx: DbOrTx, req: SlotRequest, claim: ClaimCheck, now: Date): Promise<SlotDecision> {
  // Re-routed while waiting: the place in the old provider's queue is given up.
  if (claim.queuedAt !== null && claim.queuedAt !== req.provider) await leaveQueue(tx, req.attemptId);
  const values = {
    attempt_id: req.attemptId,
    task_id: req.taskId,
    provider: req.provider,
    tenant_id: req.tenantId,
    priority: Math.min(9, Math.max(0, req.priority)),
    weight: claim.weight,
    tenant_provider_cap: claim.tenantProviderCap,
    tenant_total_cap: claim.tenantTotalCap,
  };
  const [row] = await tx
    .insert(slotWait)
    .values({ ...values, since: now })
    .onConflictDoUpdate({
      target: slotWait.attempt_id,
      set: { weight: values.weight, tenant_provider_cap: values.tenant_provider_cap, tenant_total_cap: values.tenant_total_cap },
    })
    .returning();
  // The check left the claim's rules on the control row; the lock is still held.
  const pass = await grantPass(tx, req.provider, { limit: req.ceiling, policy: req.policy }, now);
  if (pass.granted.includes(req.attemptId)) {
    await leaveQueue(tx, req.attemptId);
    return { kind: 'granted' };
  }
  const reason = pass.waiting.get(req.attemptId) ?? (pass.inFlight >= req.ceiling ? 'provider_full' : 'queued_behind');
  // The pass only looked at the heads of the lines; a row it did not look at says why it waits now.
  if (!pass.waiting.has(req.attemptId) && row!.reason !== reason) {
    await tx
      .update(slotWait)
      .set({ reason })
      .where(and(eq(slotWait.attempt_id, req.attemptId), isNull(slotWait.granted_at)));
  }
  return { kind: 'waiting', reason, since: row!.since, inFlight: pass.inFlight, limit: pass.limit ?? req.ceiling };
}

/** A waiter's own row, read without its provider's lock (recheckWait). */
export interface OwnWait {
  readonly since: Date;
  readonly reason: WaitReason;
  /** Slots taken at the provider (holding attempts + grants within their TTL), and by the waiter's tenant there and everywhere. */
  readonly taken: number;
  readonly tenantTaken: number;
  readonly tenantTotal: number;
  readonly tenantProviderCap: number | null;
  readonly tenantTotalCap: number | null;
  /** Grants nobody came for within their TTL: a claim drops them (checkClaim). */
  readonly expired: boolean;
  /** provider_control.max_in_flight (null: the adapter's). */
  readonly maxInFlight: number | null;
}

/**
 * The periodic look of an attempt that waits in `provider`'s queue (its fallback timer ran out):
 * its own row and the provider's count, read without the provider's lock, in one statement.
 * Null when it has no row there still waiting (granted, dropped, or never queued): then the
 * claim goes its usual way. The caller takes the lock and runs a pass only when a slot is free
 * that the waiter's tenant could take, or an expired grant should be dropped (`roomFor`);
 * otherwise the waiter keeps waiting for its grant's wake, at O(slots) and no lock.
 */
export async function recheckWait(tx: DbOrTx, attemptId: string, provider: string, now: Date, grantTtlMs: number): Promise<OwnWait | null> {
  const cutoff = new Date(now.getTime() - grantTtlMs);
  const { rows } = await tx.execute<Omit<OwnWait, 'since'> & { since: Date | string } & Record<string, unknown>>(sql`
    WITH held AS (
      SELECT t.tenant_id FROM task_attempt a JOIN generation_task t ON t.task_id = a.task_id
      WHERE a.provider = ${provider} AND ${holdsSlot}
      UNION ALL
      SELECT g.tenant_id FROM slot_wait g WHERE g.provider = ${provider} AND g.granted_at >= ${cutoff})
    SELECT w.since, coalesce(w.reason, 'provider_full') AS reason,
      (SELECT count(*)::int FROM held) AS taken,
      (SELECT count(*)::int FROM held WHERE held.tenant_id = w.tenant_id) AS "tenantTaken",
      CASE WHEN w.tenant_total_cap IS NULL THEN 0 ELSE (
        SELECT count(*)::int FROM task_attempt a JOIN generation_task t ON t.task_id = a.task_id
        WHERE t.tenant_id = w.tenant_id AND ${holdsSlot}) + (
        SELECT count(*)::int FROM slot_wait g WHERE g.tenant_id = w.tenant_id AND g.granted_at IS NOT NULL) END AS "tenantTotal",
      w.tenant_provider_cap AS "tenantProviderCap", w.tenant_total_cap AS "tenantTotalCap",
      EXISTS (SELECT 1 FROM slot_wait g WHERE g.provider = ${provider} AND g.granted_at < ${cutoff}) AS expired,
      (SELECT max_in_flight FROM provider_control WHERE provider = ${provider}) AS "maxInFlight"
    FROM slot_wait w WHERE w.attempt_id = ${attemptId} AND w.provider = ${provider} AND w.granted_at IS NULL`);
  const row = rows[0];
  return row ? { ...row, since: new Date(row.since) } : null;
}

/** Whether a waiter's look (recheckWait) found a slot under `ceiling` its tenant could take, or an expired grant to drop. */
export function roomFor(w: OwnWait, ceiling: number): boolean {
  if (w.expired) return true;
  const load = { inFlight: w.taken, limit: ceiling, tenantAtProvider: new Map([['me', w.tenantTaken]]), tenantTotal: new Map([['me', w.tenantTotal]]) };
  const me: Waiter = { id: 'me', tenant: 'me', priority: 0, sinceMs: 0, weight: 1, tenantProviderCap: w.tenantProviderCap, tenantTotalCap: w.tenantTotalCap };
  return takesFreeSlot(me, load);
}

/**
 * A task left the slot-holding states (db/tasks.ts casTaskStatus): its place in any queue is
 * given up, and each provider it used hands its free slots on in this same transaction. One
 * statement when the task has no queue row and nobody else waits where it ran (the common case).
 * Otherwise every provider involved is locked first and only then are the task's rows deleted
 * (grantFreeSlotsAt's `between`): a grant pass holds its provider and writes that provider's rows,
 * so deleting a row before taking its provider's lock would deadlock with a pass choosing it.
 */
export async function releaseTaskSlots(tx: DbOrTx, taskId: string, now: Date): Promise<void> {
  const { rows } = await tx.execute(sql`
    SELECT a.provider FROM task_attempt a
    WHERE a.task_id = ${taskId}
      AND EXISTS (SELECT 1 FROM slot_wait w WHERE w.provider = a.provider AND w.granted_at IS NULL AND w.task_id <> ${taskId})
    UNION
    SELECT provider FROM slot_wait WHERE task_id = ${taskId}`);
  const providers = (rows as { provider: string }[]).map((r) => r.provider);
  if (providers.length === 0) return;
  await grantFreeSlotsAt(tx, providers, now, async () => {
    await tx.execute(sql`DELETE FROM slot_wait WHERE task_id = ${taskId}`);
  });
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
  const load = { ...(await countSlots(db, provider)), tenantTotal: new Map<string, number>() };
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

/**
 * A tenant's caps and weight at `provider`, one row: its tenant_capacity rows (provider, then
 * '*'), else the defaults. A row whose max_in_flight is null means no cap there.
 */
const termsOf = (tenantId: string, provider: string, d: TenantSlotDefaults) => sql`
  SELECT CASE WHEN e.tenant_id IS NULL THEN ${d.perProvider}::int ELSE e.max_in_flight END AS "tenantProviderCap",
    CASE WHEN s.tenant_id IS NULL THEN ${d.total}::int ELSE s.max_in_flight END AS "tenantTotalCap",
    coalesce(e.weight, s.weight, ${d.weight}::int) AS weight
  FROM (SELECT 1) one
  LEFT JOIN tenant_capacity e ON e.tenant_id = ${tenantId} AND e.provider = ${provider}
  LEFT JOIN tenant_capacity s ON s.tenant_id = ${tenantId} AND s.provider = '*'`;

type TenantSlotTerms = {
  readonly weight: number;
  readonly tenantProviderCap: number | null;
  readonly tenantTotalCap: number | null;
};

async function tenantSlotTerms(tx: DbOrTx, tenantId: string, provider: string, defaults: TenantSlotDefaults): Promise<TenantSlotTerms> {
  const { rows } = await tx.execute<TenantSlotTerms>(termsOf(tenantId, provider, defaults));
  return rows[0]!;
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
  // The waiting rows' terms change under their providers' locks (a claim writes them holding its
  // provider's), then the passes run: grantFreeSlotsAt keeps the lock order.
  const providers = await providersWithWaiters(tx, input.tenantId);
  await grantFreeSlotsAt(tx, providers, now, async () => {
    for (const provider of providers) {
      const terms = await tenantSlotTerms(tx, input.tenantId, provider, defaults);
      await tx
        .update(slotWait)
        .set({ weight: terms.weight, tenant_provider_cap: terms.tenantProviderCap, tenant_total_cap: terms.tenantTotalCap })
        .where(and(eq(slotWait.tenant_id, input.tenantId), eq(slotWait.provider, provider)));
    }
  });
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
