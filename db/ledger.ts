// The credit ledger: every movement is a row with a unique business key, and the account row
// moves only when its ledger row was actually inserted. A retried settle changes nothing.
import { randomUUID } from 'node:crypto';
import { and, eq, inArray, sql, type SQL } from 'drizzle-orm';
import type { LedgerEntryType } from '../domain/states';
import { compareMoney, subMoney } from '../domain/money';
import type { DbOrTx } from './client';
import type { FenceToken } from './fence';
import { creditAccount, creditLedger } from './schema';

export const ledgerKey = (taskId: string, kind: 'reserve' | 'settle' | 'release' | 'refund'): string => `task:${taskId}:${kind}`;

interface Entry {
  readonly tenantId: string;
  readonly taskId: string | null;
  readonly businessKey: string;
  readonly type: LedgerEntryType;
  readonly amount: string;
  readonly note?: string;
}

/** The row of a ledger entry, under the writer's region and epoch. */
const entryRow = (token: Pick<FenceToken, 'region' | 'epoch'>, e: Entry): typeof creditLedger.$inferInsert => ({
  entry_id: randomUUID(),
  tenant_id: e.tenantId,
  task_id: e.taskId,
  business_key: e.businessKey,
  entry_type: e.type,
  amount: e.amount,
  region: token.region,
  write_epoch: token.epoch,
  note: e.note ?? null,
});

/** Inserts the ledger row unless its business key exists; true when inserted. */
async function insertEntry(tx: DbOrTx, token: Pick<FenceToken, 'region' | 'epoch'>, e: Entry): Promise<boolean> {
  const inserted = await tx
    .insert(creditLedger)
    .values(entryRow(token, e))
    .onConflictDoNothing({ target: creditLedger.business_key })
    .returning({ id: creditLedger.entry_id });
  return inserted.length > 0;
}

/** Grants credits to a tenant (creates the account when missing). */
export async function grantCredits(
  tx: DbOrTx,
  token: Pick<FenceToken, 'region' | 'epoch'>,
  args: { tenantId: string; amount: string; businessKey: string; note?: string },
): Promise<boolean> {
  await tx.insert(creditAccount).values({ tenant_id: args.tenantId }).onConflictDoNothing();
  const inserted = await insertEntry(tx, token, {
    tenantId: args.tenantId,
    taskId: null,
    businessKey: args.businessKey,
    type: 'GRANT',
    amount: args.amount,
    ...(args.note ? { note: args.note } : {}),
  });
  if (inserted) {
    await tx
      .update(creditAccount)
      .set({
        balance: sql`${creditAccount.balance} + ${args.amount}`,
        version: sql`${creditAccount.version} + 1`,
        updated_at: sql`now()`,
      })
      .where(eq(creditAccount.tenant_id, args.tenantId));
  }
  return inserted;
}

/**
 * Holds `amount` of the tenant's available credits for a task. Returns false when the
 * account cannot cover it: the caller must roll back (its ledger row is already written) and answer 402.
 */
export async function reserveCredits(tx: DbOrTx, token: FenceToken, args: { tenantId: string; taskId: string; amount: string }): Promise<boolean> {
  const entry = tx.$with('entry').as(
    tx
      .insert(creditLedger)
      .values(
        entryRow(token, { tenantId: args.tenantId, taskId: args.taskId, businessKey: ledgerKey(args.taskId, 'reserve'), type: 'RESERVE', amount: args.amount }),
      )
      .onConflictDoNothing({ target: creditLedger.business_key })
      .returning({ id: creditLedger.entry_id }),
  );
  // The account CAS, in the same statement, moves only with its ledger row. Its row lock is held
  // until COMMIT, so the caller makes this its last write. On false the caller rolls back.
  const moved = tx.$with('moved').as(
    tx
      .update(creditAccount)
      .set({
        reserved: sql`${creditAccount.reserved} + ${args.amount}`,
        version: sql`${creditAccount.version} + 1`,
        updated_at: sql`now()`,
      })
      .where(
        and(
          eq(creditAccount.tenant_id, args.tenantId),
          sql`${creditAccount.balance} - ${creditAccount.reserved} >= ${args.amount}`,
          sql`EXISTS (SELECT 1 FROM ${entry})`,
        ),
      )
      .returning({ version: creditAccount.version }),
  );
  const [row] = await tx
    .with(entry, moved)
    .select({ entry: entry.id, version: moved.version })
    .from(entry)
    .leftJoin(moved, sql`true`);
  if (!row) throw new Error(`reserve for task ${args.taskId} already exists`);
  return row.version !== null;
}

/**
 * The creating statement's reserve (db/task-admission.ts), as reserveCredits writes it, as two CTE
 * bodies: `entry`, the ledger row for each row of `from.task` (the task row just written), deduped
 * by its business key, returning `entry_id`; `account`, the CAS, which moves only when the CTE
 * named `from.entry` (the entry's) inserted its row and the account covers the amount, returning
 * `version`. The caller rolls back unless both returned a row.
 */
export function reserveCreditsFrom(
  from: { task: SQL; entry: SQL },
  token: FenceToken,
  args: { tenantId: string; taskId: string; amount: string },
): { entry: SQL; account: SQL } {
  return {
    entry: sql`INSERT INTO credit_ledger (entry_id, tenant_id, task_id, business_key, entry_type, amount, region, write_epoch, note)
      SELECT ${randomUUID()}::uuid, ${args.tenantId}::uuid, ${args.taskId}::uuid, ${ledgerKey(args.taskId, 'reserve')}::text, 'RESERVE', ${args.amount}::numeric, ${token.region}::text, ${token.epoch}::bigint, NULL
      FROM ${from.task}
      ON CONFLICT (business_key) DO NOTHING
      RETURNING entry_id`,
    account: sql`UPDATE credit_account SET reserved = reserved + ${args.amount}::numeric, version = version + 1, updated_at = now()
      WHERE tenant_id = ${args.tenantId}::uuid AND balance - reserved >= ${args.amount}::numeric AND EXISTS (SELECT 1 FROM ${from.entry})
      RETURNING version`,
  };
}

/**
 * The task's reservation is already closed with other amounts than this settlement asks for (a
 * task made live again after it was settled, e.g. by a repair): writing nothing would leave the
 * task's recorded charge disagreeing with its ledger, so the settlement is refused. Not
 * transient: a person decides (a correction is a new ledger row, docs/billing.md).
 */
export class SettlementConflictError extends Error {
  constructor(
    readonly taskId: string,
    readonly asked: { readonly charge: string; readonly release: string },
    readonly existing: { readonly charge: string | null; readonly release: string | null },
  ) {
    super(
      `task ${taskId}'s reservation is already closed with SETTLE ${existing.charge ?? 'none'} / RELEASE ${existing.release ?? 'none'}; ` +
        `a settlement charging ${asked.charge} (releasing ${asked.release}) is refused: correct it with an operator grant (docs/billing.md)`,
    );
    this.name = 'SettlementConflictError';
  }
}

/** The charge of the task's SETTLE row, when its reservation is closed already; null while it is open. */
export async function settledCharge(tx: DbOrTx, taskId: string): Promise<string | null> {
  const [row] = await tx
    .select({ amount: creditLedger.amount })
    .from(creditLedger)
    .where(eq(creditLedger.business_key, ledgerKey(taskId, 'settle')));
  return row?.amount ?? null;
}

/**
 * Closes a task's reservation: charges `charge` (≤ reserved) and releases the rest.
 * Idempotent by business key: a second call with the same amounts writes nothing and moves
 * nothing; one with other amounts than the rows already written throws SettlementConflictError.
 */
export async function settleReservation(
  tx: DbOrTx,
  token: FenceToken,
  args: { tenantId: string; taskId: string; reserved: string; charge: string; note?: string },
): Promise<void> {
  if (compareMoney(args.charge, '0') < 0 || compareMoney(args.charge, args.reserved) > 0) {
    throw new RangeError(`charge ${args.charge} outside [0, ${args.reserved}]`);
  }
  const release = subMoney(args.reserved, args.charge);
  const note = args.note ? { note: args.note } : {};
  const task = { tenantId: args.tenantId, taskId: args.taskId, ...note };
  // Both rows (docs/billing.md) and the account move are one statement: the account moves only
  // when both rows were inserted by it.
  const entries = tx.$with('entries').as(
    tx
      .insert(creditLedger)
      .values([
        entryRow(token, { ...task, businessKey: ledgerKey(args.taskId, 'settle'), type: 'SETTLE', amount: args.charge }),
        entryRow(token, { ...task, businessKey: ledgerKey(args.taskId, 'release'), type: 'RELEASE', amount: release }),
      ])
      .onConflictDoNothing({ target: creditLedger.business_key })
      .returning({ type: creditLedger.entry_type }),
  );
  const moved = tx.$with('moved').as(
    tx
      .update(creditAccount)
      .set({
        balance: sql`${creditAccount.balance} - ${args.charge}`,
        reserved: sql`${creditAccount.reserved} - ${args.reserved}`,
        version: sql`${creditAccount.version} + 1`,
        updated_at: sql`now()`,
      })
      .where(and(eq(creditAccount.tenant_id, args.tenantId), sql`(SELECT count(*) FROM ${entries}) = 2`))
      .returning({ version: creditAccount.version }),
  );
  // `moved` runs though the query does not read it (a data-modifying WITH always runs to completion).
  const rows = await tx.with(entries, moved).select({ type: entries.type }).from(entries);
  // One of the two existed already: the caller's transaction rolls back (the account did not move).
  if (rows.length === 1) throw new Error(`ledger for task ${args.taskId} is half settled`);
  if (rows.length === 0) {
    // Both existed: a rerun of this very settlement, or another one (which must not pass as done).
    const closes = await tx
      .select({ type: creditLedger.entry_type, amount: creditLedger.amount })
      .from(creditLedger)
      .where(inArray(creditLedger.business_key, [ledgerKey(args.taskId, 'settle'), ledgerKey(args.taskId, 'release')]));
    const existing = {
      charge: closes.find((c) => c.type === 'SETTLE')?.amount ?? null,
      release: closes.find((c) => c.type === 'RELEASE')?.amount ?? null,
    };
    const same = (a: string | null, b: string) => a !== null && compareMoney(a, b) === 0;
    if (!same(existing.charge, args.charge) || !same(existing.release, release)) {
      throw new SettlementConflictError(args.taskId, { charge: args.charge, release }, existing);
    }
  }
}
