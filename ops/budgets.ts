// `ops tenant budget` and `ops key budget` (issue #52, docs/billing.md "Budgets"): set or lift the
// spend limit of a tenant or of one of its API keys, under the fence, audited with the limit before
// and after. Registered on the CLI's `tenant` and `key` commands by registerBudgetCommands.
import { InvalidArgumentError, type Command } from 'commander';
import { and, eq } from 'drizzle-orm';
import type { Db } from '../db/client';
import { recordAudit } from '../db/audit';
import { budgetsOf, setBudget } from '../db/budgets';
import { acquireFence, holdFence } from '../db/fence';
import { apiKey, BUDGET_PERIODS, type BudgetPeriod } from '../db/schema';
import { findTenantByName } from '../db/tenants';
import { normalize, toMicros } from '../domain/money';
import type { FenceScope } from './tenants';

const DEFAULT_THRESHOLDS = [50, 80, 100];

export interface BudgetChange {
  readonly tenant: string;
  /** Null: the tenant's own budget. */
  readonly keyId: string | null;
  /** Null lifts the budget. */
  readonly limit: string | null;
  readonly period: BudgetPeriod;
  readonly thresholds: number[];
  readonly reason: string;
  readonly actor: string;
  readonly fence: FenceScope;
}

export async function changeBudget(db: Db, c: BudgetChange) {
  const t = await findTenantByName(db, c.tenant);
  if (!t) throw new Error(`no tenant named ${c.tenant}`);
  const { token } = await acquireFence(db, c.fence.scope, c.fence.region);
  return db.transaction(async (tx) => {
    await holdFence(tx, token);
    if (c.keyId !== null) {
      const [key] = await tx
        .select({ id: apiKey.key_id })
        .from(apiKey)
        .where(and(eq(apiKey.key_id, c.keyId), eq(apiKey.tenant_id, t.tenantId)));
      if (!key) throw new Error(`tenant ${c.tenant} has no key ${c.keyId}`);
    }
    const { before, after } = await setBudget(tx, { ...c, tenantId: t.tenantId, limit: c.limit === null ? null : normalize(c.limit) });
    const auditId = await recordAudit(tx, {
      actor: c.actor,
      action: c.keyId === null ? 'tenant.budget' : 'key.budget',
      targetType: 'tenant',
      targetId: t.tenantId,
      reason: c.reason,
      detail: {
        key_id: c.keyId,
        before: before && { limit: before.limit_amount, period: before.period, thresholds: before.thresholds },
        after: { limit: after.limit_amount, period: after.period, thresholds: after.thresholds },
      },
    });
    return { tenant_id: t.tenantId, key_id: c.keyId, limit: after.limit_amount, period: after.period, thresholds: after.thresholds, audit_id: auditId };
  });
}

const limitArg = (v: string): string | null => {
  if (v === 'none') return null;
  try {
    if (toMicros(v) < 0n) throw new Error();
  } catch {
    throw new InvalidArgumentError('a non-negative decimal amount of credits, or none to lift the budget');
  }
  return v;
};
const periodArg = (v: string): BudgetPeriod => {
  if (!(BUDGET_PERIODS as readonly string[]).includes(v)) throw new InvalidArgumentError(`one of ${BUDGET_PERIODS.join(', ')}`);
  return v as BudgetPeriod;
};
const thresholdsArg = (v: string): number[] => {
  const list = v === 'none' ? [] : v.split(',').map((x) => Number(x.trim()));
  if (list.some((n) => !Number.isInteger(n) || n < 1 || n > 100) || new Set(list).size !== list.length) {
    throw new InvalidArgumentError('distinct whole percentages 1-100, comma-separated (e.g. 50,80,100), or none');
  }
  return list;
};

interface BudgetOptions {
  limit: string | null;
  period: BudgetPeriod;
  thresholds: number[];
  reason: string;
  json: boolean;
}

/** Adds `budget` to the CLI's `tenant` and `key` commands. */
export function registerBudgetCommands(
  tenant: Command,
  key: Command,
  deps: { withDb: <T>(work: (db: Db) => Promise<T>) => Promise<T>; actor: string; fence: FenceScope },
): void {
  const options = (c: Command) =>
    c
      .requiredOption('--limit <credits|none>', 'spend limit per period (none lifts it)', limitArg)
      .option('--period <period>', `calendar period in UTC: ${BUDGET_PERIODS.join(', ')}`, periodArg, 'month')
      .option('--thresholds <percents>', 'percentages that emit tenant.budget_threshold once per period', thresholdsArg, DEFAULT_THRESHOLDS)
      .requiredOption('--reason <text>', 'why (audited)')
      .option('--json', 'print one JSON line', false);
  const run = async (tenantName: string, keyId: string | null, o: BudgetOptions) => {
    const r = await deps.withDb(async (db) => {
      const changed = await changeBudget(db, { tenant: tenantName, keyId, ...o, actor: deps.actor, fence: deps.fence });
      const now = (await budgetsOf(db, changed.tenant_id)).find((b) => b.budget.key_id === keyId);
      return { ...changed, spent: now?.spent ?? null };
    });
    const what = keyId === null ? tenantName : `key ${keyId} of ${tenantName}`;
    console.log(
      o.json
        ? JSON.stringify(r)
        : r.limit === null
          ? `${what}: budget lifted; audit ${r.audit_id}`
          : `${what}: ${r.limit} credits per ${r.period} (spent ${r.spent}), thresholds ${r.thresholds.join(', ') || 'none'} %; audit ${r.audit_id}`,
    );
  };
  options(
    tenant.command('budget').description("set or lift the tenant's spend limit per calendar period (audited)").requiredOption('--name <name>', 'tenant name'),
  ).action((o: BudgetOptions & { name: string }) => run(o.name, null, o));
  options(
    key
      .command('budget')
      .description("set or lift one API key's spend limit per calendar period, besides the tenant's (audited)")
      .requiredOption('--tenant <name>', 'tenant name')
      .requiredOption('--key-id <id>', 'the key (ops key list)'),
  ).action((o: BudgetOptions & { tenant: string; keyId: string }) => run(o.tenant, o.keyId, o));
}
