// provider_control (docs/design.md §6): the operator's per-provider breaker switch and bulkhead
// limit, and the row whose lock serialises a provider's submit claims. The slot queue's columns of
// the row are db/slot-queue.ts's. Also the count every bulkhead agrees on: a provider's jobs in
// flight by the attempt facts.
import { eq, sql, type SQL } from 'drizzle-orm';
import type { DbOrTx } from './client';
import { MODE_SETTING } from './modes';
import { providerControl } from './schema';
import { HELD_SETTING, holdsSlot } from './slot-queue';

export type ProviderControlRow = typeof providerControl.$inferSelect;

/** Creates the provider's control row (automatic breaker, the adapter's limit) if it has none. */
export async function ensureProviderControl(tx: DbOrTx, provider: string): Promise<void> {
  await tx.insert(providerControl).values({ provider }).onConflictDoNothing();
}

/** What a submit claim reads of its provider's control row (readClaimControl). */
export type ClaimControl = Pick<ProviderControlRow, 'breaker_force' | 'max_in_flight' | 'create_tat'> & {
  /** The system mode assertModeAllows left in the transaction; null: unset. */
  readonly mode: string | null;
  /** The database's clock at the read: the create pace's clock, one for every worker process (domain/create-pace.ts). */
  readonly db_now: Date;
};

/**
 * What a submit claim reads of its provider (activities/provider-guard.ts admit): the operator's
 * switch and limit, the create pace's TAT, and the system mode assertModeAllows left in the
 * transaction (null: unset). With `lock`, the read takes the row's lock, the bulkhead's and the
 * pace's (docs/providers.md "The slot queue", "Create pacing"): the claim's slot and its moment in
 * the pace are then taken without another round trip for the lock.
 */
export async function readClaimControl(tx: DbOrTx, provider: string, opts: { readonly lock: boolean }): Promise<ClaimControl | undefined> {
  const read = async () => {
    // The clock is read after the row (and its lock) is had: read beside it, it would be as old
    // as the wait for the lock, and the pace would run behind by that much.
    const { rows } = await tx.execute<ClaimControl>(sql`
      WITH control AS (
        SELECT breaker_force, max_in_flight, create_tat
        FROM provider_control WHERE provider = ${provider}${opts.lock ? sql` FOR UPDATE` : sql``})
      SELECT control.*, current_setting(${MODE_SETTING}, true) AS mode, clock_timestamp() AS db_now${
        // A locked read holds the provider's row: recorded, so this transaction takes no other
        // provider's row after it (the one lock order, db/slot-queue.ts grantFreeSlotsAt).
        opts.lock ? sql`, set_config(${HELD_SETTING}, ${provider}::text, true) AS held` : sql``
      } FROM control`);
    const row = rows[0];
    // A raw statement's timestamps arrive as strings: the row's type promises dates.
    return row && { ...row, create_tat: row.create_tat === null ? null : new Date(row.create_tat), db_now: new Date(row.db_now) };
  };
  // The row exists after the provider's first claim: create it only when the read finds none
  // (one round trip per claim instead of two).
  const row = await read();
  if (row) return row;
  await ensureProviderControl(tx, provider);
  return read();
}

/**
 * The statement that moves a provider's create pace to `tat` (domain/create-pace.ts), as a CTE of
 * the claim's last write (db/attempts.ts claimForSubmit), under the row's lock the claim holds.
 */
export function moveCreatePace(provider: string, tat: Date): SQL {
  return sql`UPDATE provider_control SET create_tat = ${tat}::timestamptz WHERE provider = ${provider}`;
}

/**
 * How many of the provider's attempts created before this one (ties by attempt id) are still unsent
 * (PREPARED): the claims a claim that waits for the create pace lets go first (domain/create-pace.ts paceWaitMs).
 */
export async function unsentBefore(
  tx: DbOrTx,
  attempt: { readonly provider: string; readonly created_at: Date; readonly attempt_id: string },
): Promise<number> {
  const { rows } = await tx.execute<{ n: number }>(sql`
    SELECT count(*)::int AS n FROM task_attempt
    WHERE provider = ${attempt.provider} AND submit_state = 'PREPARED'
      AND (created_at, attempt_id) < (${attempt.created_at}::timestamptz, ${attempt.attempt_id}::uuid)`);
  return rows[0]?.n ?? 0;
}

/** Every provider's control row. */
export async function providerControls(db: DbOrTx): Promise<ProviderControlRow[]> {
  return db.select().from(providerControl);
}

/** Locks the provider's control row (creating it first) and returns it: what an operator's change starts from. */
export async function lockProviderControl(tx: DbOrTx, provider: string): Promise<ProviderControlRow> {
  const lock = () => tx.select().from(providerControl).where(eq(providerControl.provider, provider)).for('update');
  let [row] = await lock();
  if (!row) {
    await ensureProviderControl(tx, provider);
    [row] = await lock();
  }
  if (!row) throw new Error(`provider_control row of ${provider} vanished under its lock`);
  return row;
}

/**
 * An operator's switch and limit for the provider, with who and why. A new limit also becomes the
 * slot queue's ceiling at once (docs/providers.md "The slot queue"); the caller grants freed slots.
 */
export async function setProviderControl(
  tx: DbOrTx,
  provider: string,
  to: { readonly force: ProviderControlRow['breaker_force']; readonly max_in_flight: number | null; readonly reason: string; readonly actor: string },
  opts: { readonly queueLimit: boolean },
): Promise<void> {
  await tx
    .update(providerControl)
    .set({ breaker_force: to.force, max_in_flight: to.max_in_flight, reason: to.reason, updated_by: to.actor, updated_at: sql`now()` })
    .where(eq(providerControl.provider, provider));
  if (opts.queueLimit && to.max_in_flight !== null) {
    await tx.update(providerControl).set({ queue_limit: to.max_in_flight }).where(eq(providerControl.provider, provider));
  }
}

/** Jobs in flight per provider according to the attempt facts (what every worker's bulkhead counts). */
export async function inFlightByProvider(db: DbOrTx): Promise<Record<string, number>> {
  const { rows } = await db.execute<{ provider: string; n: number }>(sql`
    SELECT a.provider, count(*)::int AS n FROM task_attempt a WHERE ${holdsSlot} GROUP BY a.provider`);
  return Object.fromEntries(rows.map((r) => [r.provider, r.n]));
}
