// Spend budgets (issue #52, docs/billing.md "Budgets"): a limit per tenant and per API key on what
// its tasks reserve in a calendar period (UTC), counted from the ledger. This module owns the
// writes of spend_budget and budget_threshold_crossing. A create holds its budgets' rows FOR UPDATE
// from before it counts the spend until it commits (holdBudgets), so creates of one tenant or key
// are serialised on them and concurrent creates can never pass a limit together.
import { randomUUID } from 'node:crypto';
import { and, asc, eq, isNull, sql } from 'drizzle-orm';
import { addMoney, compareMoney, scaleMoney, subMoney } from '../domain/money';
import type { DbOrTx } from './client';
import { budgetThresholdCrossing, spendBudget, type BudgetPeriod, type SpendBudgetRow } from './schema';
import { recordTenantEvent } from './webhooks';

/** A budget with its period now and what was spent in it (before the create that reads it). */
export interface BudgetState {
  readonly budget: SpendBudgetRow;
  readonly limit: string;
  readonly periodStart: Date;
  readonly periodEnd: Date;
  /** Reserved in the period by the budget's tasks, less what was released of those reservations. */
  readonly spent: string;
}

/** The period containing the transaction's now() (UTC): [start, end). */
const periodBounds = (period: BudgetPeriod) => {
  const unit = sql.raw(`'${period}'`);
  return {
    start: sql`(date_trunc(${unit}, now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')`,
    end: sql`((date_trunc(${unit}, now() AT TIME ZONE 'UTC') + ${sql.raw(`interval '1 ${period}'`)}) AT TIME ZONE 'UTC')`,
  };
};

/**
 * Spent in the period by a tenant (keyId null) or one of its keys: the RESERVE rows written in the
 * period, less the RELEASE rows of those same tasks whenever written (a task is counted in the
 * period it was created in; what it was charged stays counted, what was released is not).
 */
async function spentInPeriod(db: DbOrTx, b: SpendBudgetRow): Promise<{ spent: string; start: Date; end: Date }> {
  const { start, end } = periodBounds(b.period);
  const tasks =
    b.key_id === null
      ? sql`SELECT r.task_id, r.amount FROM credit_ledger r
            WHERE r.tenant_id = ${b.tenant_id} AND r.entry_type = 'RESERVE' AND r.created_at >= ${start} AND r.created_at < ${end}`
      : sql`SELECT r.task_id, r.amount FROM generation_task g
            JOIN credit_ledger r ON r.business_key = 'task:' || g.task_id || ':reserve'
            WHERE g.api_key_id = ${b.key_id} AND g.created_at >= ${start} AND g.created_at < ${end}`;
  const { rows } = await db.execute<{ spent: string; start: string; end: string }>(sql`
    WITH reserved AS (${tasks})
    SELECT (COALESCE((SELECT sum(amount) FROM reserved), 0)
          - COALESCE((SELECT sum(rel.amount) FROM reserved JOIN credit_ledger rel ON rel.business_key = 'task:' || reserved.task_id || ':release'), 0)
           )::numeric(18, 6)::text AS spent,
           ${start} AS start, ${end} AS end`);
  const r = rows[0]!;
  return { spent: r.spent, start: new Date(r.start), end: new Date(r.end) };
}

async function stateOf(db: DbOrTx, b: SpendBudgetRow): Promise<BudgetState | null> {
  if (b.limit_amount === null) return null;
  const s = await spentInPeriod(db, b);
  return { budget: b, limit: b.limit_amount, periodStart: s.start, periodEnd: s.end, spent: s.spent };
}

/**
 * Locks the budgets that apply to a create by `keyId` of `tenantId` (the tenant's, then the key's:
 * one order for every create, so two never wait on each other crosswise) and counts their spend
 * under the lock. Inside the create's transaction, before its writes.
 */
export async function holdBudgets(tx: DbOrTx, tenantId: string, keyId: string | null): Promise<BudgetState[]> {
  const rows = await tx
    .select()
    .from(spendBudget)
    .where(
      and(
        eq(spendBudget.tenant_id, tenantId),
        keyId === null ? isNull(spendBudget.key_id) : sql`(${spendBudget.key_id} IS NULL OR ${spendBudget.key_id} = ${keyId})`,
        sql`${spendBudget.limit_amount} IS NOT NULL`,
      ),
    )
    .orderBy(sql`${spendBudget.key_id} NULLS FIRST`)
    .for('update');
  const out: BudgetState[] = [];
  for (const b of rows) {
    const s = await stateOf(tx, b);
    if (s) out.push(s);
  }
  return out;
}

/** The first budget `cost` would take past its limit, or null. */
export function exceededBy(states: readonly BudgetState[], cost: string): BudgetState | null {
  return states.find((s) => compareMoney(addMoney(s.spent, cost), s.limit) > 0) ?? null;
}

export const remainingOf = (s: BudgetState): string => (compareMoney(s.spent, s.limit) >= 0 ? '0.000000' : subMoney(s.limit, s.spent));

export interface ThresholdCrossing {
  readonly budget: BudgetState;
  readonly threshold: number;
}

/**
 * Records each threshold a create of `cost` crossed (spent before < limit × threshold % ≤ spent
 * after), at most once per budget and period (the crossing row's key), and emits its
 * `tenant.budget_threshold` event in the same transaction. Returns the crossings recorded now.
 */
export async function recordCrossings(tx: DbOrTx, states: readonly BudgetState[], cost: string): Promise<ThresholdCrossing[]> {
  const out: ThresholdCrossing[] = [];
  for (const s of states) {
    const after = addMoney(s.spent, cost);
    for (const pct of [...s.budget.thresholds].sort((a, b) => a - b)) {
      const mark = scaleMoney(s.limit, BigInt(pct), 100n);
      if (!(compareMoney(s.spent, mark) < 0 && compareMoney(after, mark) >= 0)) continue;
      const eventId = randomUUID();
      const inserted = await tx
        .insert(budgetThresholdCrossing)
        .values({ budget_id: s.budget.budget_id, period_start: s.periodStart, threshold: pct, spent: after, event_id: eventId })
        .onConflictDoNothing()
        .returning({ id: budgetThresholdCrossing.event_id });
      if (inserted.length === 0) continue;
      await recordTenantEvent(tx, {
        eventId,
        tenantId: s.budget.tenant_id,
        type: 'tenant.budget_threshold',
        data: {
          scope: s.budget.key_id === null ? 'tenant' : 'key',
          key_id: s.budget.key_id,
          threshold_percent: pct,
          limit: s.limit,
          spent: after,
          remaining: compareMoney(after, s.limit) >= 0 ? '0.000000' : subMoney(s.limit, after),
          period: s.budget.period,
          period_start: s.periodStart.toISOString(),
          period_end: s.periodEnd.toISOString(),
        },
      });
      out.push({ budget: s, threshold: pct });
    }
  }
  return out;
}

/** The tenant's budgets with their spend now (GET /v1/budget, ops): the tenant's first, then each key's. */
export async function budgetsOf(db: DbOrTx, tenantId: string): Promise<BudgetState[]> {
  const rows = await db
    .select()
    .from(spendBudget)
    .where(and(eq(spendBudget.tenant_id, tenantId), sql`${spendBudget.limit_amount} IS NOT NULL`))
    .orderBy(sql`${spendBudget.key_id} NULLS FIRST`, asc(spendBudget.created_at));
  const out: BudgetState[] = [];
  for (const b of rows) {
    const s = await stateOf(db, b);
    if (s) out.push(s);
  }
  return out;
}

/** Sets (or, with limit null, lifts) the budget of a tenant or of one of its keys; returns the row before and after. */
export async function setBudget(
  tx: DbOrTx,
  args: { tenantId: string; keyId: string | null; limit: string | null; period: BudgetPeriod; thresholds: number[]; reason: string; actor: string },
): Promise<{ before: SpendBudgetRow | null; after: SpendBudgetRow }> {
  const which = and(eq(spendBudget.tenant_id, args.tenantId), args.keyId === null ? isNull(spendBudget.key_id) : eq(spendBudget.key_id, args.keyId));
  const [before] = await tx.select().from(spendBudget).where(which).for('update');
  const values = {
    limit_amount: args.limit,
    period: args.period,
    thresholds: args.thresholds,
    reason: args.reason,
    updated_by: args.actor,
    updated_at: sql`now()`,
  };
  const [after] = before
    ? await tx.update(spendBudget).set(values).where(eq(spendBudget.budget_id, before.budget_id)).returning()
    : await tx
        .insert(spendBudget)
        .values({ budget_id: randomUUID(), tenant_id: args.tenantId, key_id: args.keyId, ...values })
        .returning();
  return { before: before ?? null, after: after! };
}
