// Region write fence (docs/design.md §7). A process reads the fence once per unit of work and
// carries the token into every write; the write's SQL re-checks region and epoch under a
// share lock on the fence row, so a failover (which updates that row) cannot interleave.
import { eq, sql } from 'drizzle-orm';
import type { SystemMode } from '../domain/states';
import type { Db, DbOrTx, Tx } from './client';
import { regionWriteFence } from './schema';

export interface FenceToken {
  readonly scope: string;
  readonly region: string;
  readonly epoch: number;
}

export interface FenceState {
  readonly scope: string;
  readonly activeRegion: string;
  readonly epoch: number;
  readonly mode: SystemMode;
  readonly updatedAt: Date;
}

export class FenceRejectedError extends Error {
  constructor(
    readonly token: Pick<FenceToken, 'scope' | 'region'> & { epoch?: number },
    readonly current: FenceState | null,
  ) {
    super(
      current
        ? `region ${token.region} (epoch ${token.epoch ?? '?'}) does not own writes: active ${current.activeRegion} epoch ${current.epoch}`
        : `no fence row for scope ${token.scope}`,
    );
    this.name = 'FenceRejectedError';
  }
}

export async function readFence(db: DbOrTx, scope: string): Promise<FenceState | null> {
  const [row] = await db.select().from(regionWriteFence).where(eq(regionWriteFence.resource_scope, scope));
  if (!row) return null;
  return {
    scope: row.resource_scope,
    activeRegion: row.active_region,
    epoch: row.write_epoch,
    mode: row.mode as SystemMode,
    updatedAt: row.updated_at,
  };
}

/** The token for a unit of work in `region`, or FenceRejectedError when the region is not active. */
export async function acquireFence(db: DbOrTx, scope: string, region: string): Promise<{ token: FenceToken; state: FenceState }> {
  const state = await readFence(db, scope);
  if (!state || state.activeRegion !== region) throw new FenceRejectedError({ scope, region }, state);
  return { token: { scope, region, epoch: state.epoch }, state };
}

/**
 * Locks the fence row for share inside a transaction and checks the token against it.
 * Writes that follow in the same transaction commit under this epoch or not at all.
 */
export async function holdFence(tx: DbOrTx, token: FenceToken): Promise<void> {
  const result = await tx.execute(sql`
    SELECT active_region, write_epoch FROM region_write_fence
    WHERE resource_scope = ${token.scope} FOR SHARE`);
  await checkFenceRow(tx, token, result.rows[0] as FenceRowRead | undefined);
}

/** The fence row as a holding read sees it (FOR SHARE). */
export interface FenceRowRead {
  readonly active_region: string;
  readonly write_epoch: string | number;
}

/** Refuses `token` unless the held row is its region at its epoch (FenceRejectedError, with the fence as it is now). */
export async function checkFenceRow(tx: DbOrTx, token: FenceToken, row: FenceRowRead | undefined): Promise<void> {
  if (!row || row.active_region !== token.region || Number(row.write_epoch) !== token.epoch) {
    throw new FenceRejectedError(token, await readFence(tx, token.scope));
  }
}

/** Runs `work` in one transaction that holds the fence first: its writes commit under `token` or not at all. */
export async function inFence<T>(db: Db, token: FenceToken, work: (tx: Tx) => Promise<T>): Promise<T> {
  return db.transaction(async (tx) => {
    await holdFence(tx, token);
    return work(tx);
  });
}
