// System mode and active region, as stored in region_write_fence (docs/design.md §7). Changing
// either locks the fence row FOR UPDATE, so it waits for every fact transaction that holds the
// row FOR SHARE (holdFence) and none can straddle the change; it is audited in the same
// transaction and announced with NOTIFY on FENCE_CHANNEL (delivered at commit), which every
// worker's fence watcher LISTENs to.
import { randomUUID } from 'node:crypto';
import { and, desc, eq, getTableColumns, sql } from 'drizzle-orm';
import { alias } from 'drizzle-orm/pg-core';
import { modeForbids, type ModeAction } from '../domain/modes';
import type { SystemMode } from '../domain/states';
import type { Db, DbOrTx, Tx } from './client';
import { checkFenceRow, type FenceRowRead, type FenceState, type FenceToken } from './fence';
import { regionFailover, regionFailoverEvent, regionWriteFence } from './schema';
import { recordAudit } from './audit';

/** The LISTEN/NOTIFY channel for fence changes; the payload is the scope's JSON state. */
export const FENCE_CHANNEL = 'vidorch_fence';

/** The mode forbids this step now. Retryable: the caller waits and tries again. */
export class ModePausedError extends Error {
  constructor(
    readonly mode: SystemMode,
    readonly action: ModeAction,
  ) {
    super(modeForbids(mode, action) ?? `system mode is ${mode}`);
    this.name = 'ModePausedError';
  }
}

interface FenceRow {
  resource_scope: string;
  active_region: string;
  write_epoch: string | number;
  mode: string;
  updated_at: Date | string;
}

const toState = (r: FenceRow): FenceState => ({
  scope: r.resource_scope,
  activeRegion: r.active_region,
  epoch: Number(r.write_epoch),
  mode: r.mode as SystemMode,
  updatedAt: new Date(r.updated_at),
});

async function lockFenceRow(tx: DbOrTx, scope: string): Promise<FenceState> {
  const { rows } = await tx.execute(sql`
    SELECT resource_scope, active_region, write_epoch, mode, updated_at FROM region_write_fence
    WHERE resource_scope = ${scope} FOR UPDATE`);
  const row = rows[0] as FenceRow | undefined;
  if (!row) throw new Error(`no region fence for scope ${scope}; run migrations`);
  return toState(row);
}

async function notifyFence(tx: DbOrTx, state: FenceState): Promise<void> {
  const payload = JSON.stringify({ scope: state.scope, region: state.activeRegion, epoch: state.epoch, mode: state.mode });
  await tx.execute(sql`SELECT pg_notify(${FENCE_CHANNEL}, ${payload})`);
}

/**
 * The mode `assertModeAllows` saw, as a transaction-local setting: the provider guard reads it
 * in the same claim transaction (with its provider_control row, no extra round trip) to apply
 * the mode's provider gate (DEGRADED_PROVIDER).
 */
export const MODE_SETTING = 'vidorch.system_mode';

/**
 * Inside a fact transaction that already holds the fence row (holdFence): throws
 * ModePausedError when the current mode forbids `action`. Because the row is share-locked, a
 * concurrent `mode set` either committed before (and is seen here) or waits for this commit.
 * Leaves the mode in the transaction's MODE_SETTING.
 */
export async function assertModeAllows(tx: DbOrTx, scope: string, action: ModeAction): Promise<SystemMode> {
  const { rows } = await tx.execute(sql`
    SELECT mode, set_config(${MODE_SETTING}, mode, true) FROM region_write_fence WHERE resource_scope = ${scope}`);
  const mode = ((rows[0] as { mode: string } | undefined)?.mode ?? 'MAINTENANCE') as SystemMode;
  if (modeForbids(mode, action)) throw new ModePausedError(mode, action);
  return mode;
}

/**
 * holdFence and the mode check of a fact write in one step, for a write whose token (or mode) was
 * read before its transaction — after a provider call, or by an API process that caches the
 * mode: the epoch alone does not move when an operator narrows the mode (setMode changes the
 * mode under the same epoch), so a token still valid may belong to a mode that forbids the write
 * now. `action` is what the write is (a cancel is checked as `cancel`). Throws
 * FenceRejectedError or ModePausedError.
 */
export async function holdFenceForFacts(tx: DbOrTx, token: FenceToken, action: ModeAction = 'factWrites'): Promise<void> {
  // holdFence's row lock and assertModeAllows' read (and its setting for the triggers) in one round trip.
  const { rows } = await tx.execute(sql`
    SELECT active_region, write_epoch, mode, set_config(${MODE_SETTING}, mode, true)
    FROM region_write_fence WHERE resource_scope = ${token.scope} FOR SHARE`);
  const row = rows[0] as (FenceRowRead & { mode: SystemMode }) | undefined;
  await checkFenceRow(tx, token, row);
  if (modeForbids(row!.mode, action)) throw new ModePausedError(row!.mode, action);
}

/** Runs `work` in one transaction that holds the fence and the mode's check for `action` first (inFence, with the mode). */
export async function inFenceForFacts<T>(db: Db, token: FenceToken, action: ModeAction, work: (tx: Tx) => Promise<T>): Promise<T> {
  return db.transaction(async (tx) => {
    await holdFenceForFacts(tx, token, action);
    return work(tx);
  });
}

export interface ModeChange {
  readonly from: FenceState;
  readonly to: FenceState;
  readonly auditId: string;
}

/** Sets the scope's mode (audited, announced). Setting the current mode again is recorded too. */
export async function setMode(db: Db, args: { scope: string; mode: SystemMode; actor: string; reason: string }): Promise<ModeChange> {
  return db.transaction(async (tx) => {
    const from = await lockFenceRow(tx, args.scope);
    const [row] = await tx
      .update(regionWriteFence)
      .set({ mode: args.mode, updated_at: sql`now()` })
      .where(eq(regionWriteFence.resource_scope, args.scope))
      .returning();
    const to = toState(row as unknown as FenceRow);
    const auditId = await recordAudit(tx, {
      actor: args.actor,
      action: 'mode.set',
      targetType: 'fence',
      targetId: args.scope,
      reason: args.reason,
      detail: { from: from.mode, to: to.mode, region: to.activeRegion, epoch: to.epoch },
    });
    await notifyFence(tx, to);
    return { from, to, auditId };
  });
}

/**
 * A failover as operators read it: its row plus the facts learnt later (region_failover_event),
 * null until recorded. The record is append-only (docs/runbooks/failover.md).
 */
export type FailoverRecord = typeof regionFailover.$inferSelect & {
  readonly first_successful_write_time: Date | null;
  readonly reconciliation_result: unknown;
};

const firstWrite = alias(regionFailoverEvent, 'first_write');
const reconciliation = alias(regionFailoverEvent, 'reconciliation');

/** Failover records with their later facts; add `.where(…)` on regionFailover's columns. */
export function selectFailoverRecords(db: DbOrTx) {
  return db
    .select({
      ...getTableColumns(regionFailover),
      first_successful_write_time: firstWrite.first_successful_write_time,
      reconciliation_result: reconciliation.reconciliation_result,
    })
    .from(regionFailover)
    .leftJoin(firstWrite, and(eq(firstWrite.failover_id, regionFailover.failover_id), eq(firstWrite.kind, 'first_write')))
    .leftJoin(reconciliation, and(eq(reconciliation.failover_id, regionFailover.failover_id), eq(reconciliation.kind, 'reconciliation')))
    .$dynamic();
}

async function failoverRecord(db: DbOrTx, failoverId: string): Promise<FailoverRecord | null> {
  const [rec] = await selectFailoverRecords(db).where(eq(regionFailover.failover_id, failoverId));
  return rec ?? null;
}

/**
 * The fencing step of a failover, in one transaction: bump the epoch (every token of the old
 * holders is void from this commit on), make `toRegion` the active one, write the failover
 * record (docs/design.md §7) and the audit row, announce it.
 */
export async function switchActiveRegion(
  db: Db,
  args: {
    scope: string;
    toRegion: string;
    incidentId: string;
    operator: string;
    reason: string;
    replicationPosition: string;
    acceptedRpoSeconds: number;
    startedAt: Date;
  },
): Promise<FailoverRecord> {
  return db.transaction(async (tx) => {
    const from = await lockFenceRow(tx, args.scope);
    if (from.activeRegion === args.toRegion) throw new Error(`${args.toRegion} is already the active region (epoch ${from.epoch})`);
    const [row] = await tx
      .update(regionWriteFence)
      .set({ active_region: args.toRegion, write_epoch: sql`${regionWriteFence.write_epoch} + 1`, updated_at: sql`clock_timestamp()` })
      .where(eq(regionWriteFence.resource_scope, args.scope))
      .returning();
    const to = toState(row as unknown as FenceRow);
    const [record] = await tx
      .insert(regionFailover)
      .values({
        failover_id: randomUUID(),
        resource_scope: args.scope,
        incident_id: args.incidentId,
        operator: args.operator,
        reason: args.reason,
        old_region: from.activeRegion,
        new_region: to.activeRegion,
        old_epoch: from.epoch,
        new_epoch: to.epoch,
        replication_position: args.replicationPosition,
        accepted_rpo_seconds: args.acceptedRpoSeconds,
        started_at: args.startedAt,
        traffic_switch_time: to.updatedAt,
      })
      .returning();
    await recordAudit(tx, {
      actor: args.operator,
      action: 'failover.switch',
      targetType: 'fence',
      targetId: args.scope,
      reason: args.reason,
      detail: { incident_id: args.incidentId, old_region: from.activeRegion, new_region: to.activeRegion, old_epoch: from.epoch, new_epoch: to.epoch },
    });
    await notifyFence(tx, to);
    return { ...record!, first_successful_write_time: null, reconciliation_result: null };
  });
}

/** The fact source's current WAL position (what a replica must have replayed to lose nothing). */
export async function currentWalPosition(db: DbOrTx): Promise<string> {
  const { rows } = await db.execute(sql`SELECT pg_current_wal_lsn()::text AS lsn`);
  return (rows[0] as { lsn: string }).lsn;
}

/** The time of the first fact (transition, ledger entry, outbox row) written under `epoch`, or null. */
export async function firstWriteUnderEpoch(db: DbOrTx, epoch: number): Promise<Date | null> {
  const { rows } = await db.execute(sql`
    SELECT least(
      (SELECT min(created_at) FROM task_transition WHERE write_epoch = ${epoch}),
      (SELECT min(created_at) FROM credit_ledger WHERE write_epoch = ${epoch}),
      (SELECT min(created_at) FROM outbox_event WHERE write_epoch = ${epoch})
    ) AS first`);
  const first = (rows[0] as { first: Date | string | null }).first;
  return first ? new Date(first) : null;
}

/**
 * Records a failover's first successful write (a new event row) once a write under its epoch
 * exists; the first recorder wins, a later call changes nothing.
 */
export async function recordFirstWrite(db: Db, failoverId: string): Promise<FailoverRecord | null> {
  const rec = await failoverRecord(db, failoverId);
  if (!rec || rec.first_successful_write_time) return rec;
  const first = await firstWriteUnderEpoch(db, rec.new_epoch);
  if (!first) return rec;
  await db.insert(regionFailoverEvent).values({ failover_id: failoverId, kind: 'first_write', first_successful_write_time: first }).onConflictDoNothing();
  return failoverRecord(db, failoverId);
}

/** Records the failover's reconciliation result (a new event row; once per failover). */
export async function recordReconciliationResult(db: Db, failoverId: string, result: unknown): Promise<void> {
  await db.insert(regionFailoverEvent).values({ failover_id: failoverId, kind: 'reconciliation', reconciliation_result: result }).onConflictDoNothing();
}

export async function recentFailovers(db: DbOrTx, scope: string, limit = 5): Promise<FailoverRecord[]> {
  return selectFailoverRecords(db).where(eq(regionFailover.resource_scope, scope)).orderBy(desc(regionFailover.traffic_switch_time)).limit(limit);
}
