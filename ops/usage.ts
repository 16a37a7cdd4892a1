// `ops usage`: what tenants used in a window (the ledger's sums, as GET /v1/usage gives a tenant)
// beside what the provider jobs cost us and the margin, per group and per provider
// (docs/decisions/0071). Registered on the CLI by ops/cli.ts; reads only.
import { InvalidArgumentError, type Command } from 'commander';
import type { Db } from '../db/client';
import { findTenantByName } from '../db/tenants';
import { opsUsage, type OpsUsageGroup, type OpsUsageRow } from '../db/usage';
import { addMoney, fromMicros, subMoney, toMicros } from '../domain/money';
import { PROVIDER_COST_UNITS, type ProviderCostUnit } from '../domain/provider-cost';
import { table } from './format';

const GROUPS: readonly OpsUsageGroup[] = ['day', 'model', 'key', 'provider'];
type Rates = Readonly<Partial<Record<ProviderCostUnit, string>>>;

export interface UsageReportRow extends OpsUsageRow {
  /** The jobs' cost in credits (PROVIDER_COST_CREDITS); null when a job's cost or its unit's rate is unknown. */
  readonly costCredits: string | null;
  /** charged - costCredits; null when costCredits is. */
  readonly margin: string | null;
}

export interface UsageReport {
  readonly from: string;
  readonly to: string;
  readonly groupBy: OpsUsageGroup;
  readonly tenantId: string | null;
  readonly groups: readonly UsageReportRow[];
  readonly providers: readonly UsageReportRow[];
}

/** "USD=1,runway_credit=0.01" as the setting parses it, to a rate per unit. */
export const costRates = (entries: readonly string[]): Rates => Object.fromEntries(entries.map((e) => e.split('=') as [string, string]));

/** A cost per unit in credits: the sum of amount × rate, 6 places, or null when some unit has no rate. */
function inCredits(cost: OpsUsageRow['cost'], rates: Rates): string | null {
  let micros = 0n;
  for (const unit of PROVIDER_COST_UNITS) {
    const amount = toMicros(cost[unit] ?? '0');
    if (amount === 0n) continue;
    const rate = rates[unit];
    if (rate === undefined) return null;
    micros += (amount * toMicros(rate) + 500_000n) / 1_000_000n;
  }
  return fromMicros(micros);
}

function withMargin(r: OpsUsageRow, rates: Rates): UsageReportRow {
  const costCredits = r.costUnknownJobs > 0 ? null : inCredits(r.cost, rates);
  return { ...r, costCredits, margin: costCredits === null ? null : subMoney(r.charged, costCredits) };
}

export async function usageReport(db: Db, q: { from: Date; to: Date; groupBy: OpsUsageGroup; tenant?: string; rates: Rates }): Promise<UsageReport> {
  let tenantId: string | null = null;
  if (q.tenant !== undefined) {
    const t = await findTenantByName(db, q.tenant);
    if (!t) throw new Error(`no tenant named ${q.tenant}`);
    tenantId = t.tenantId;
  }
  const base = { from: q.from, to: q.to, ...(tenantId ? { tenantId } : {}) };
  const [groups, providers] = await Promise.all([opsUsage(db, { ...base, groupBy: q.groupBy }), opsUsage(db, { ...base, groupBy: 'provider' })]);
  return {
    from: q.from.toISOString(),
    to: q.to.toISOString(),
    groupBy: q.groupBy,
    tenantId,
    groups: groups.map((r) => withMargin(r, q.rates)),
    providers: providers.map((r) => withMargin(r, q.rates)),
  };
}

const costText = (cost: OpsUsageRow['cost']): string =>
  PROVIDER_COST_UNITS.filter((u) => toMicros(cost[u] ?? '0') !== 0n)
    .map((u) => `${cost[u]} ${u}`)
    .join(' + ') || '0';

function rowsText(rows: readonly UsageReportRow[]): string {
  const total = rows.reduce((t, r) => addMoney(t, r.charged), '0');
  const shown = rows.map((r) => ({
    group: r.group ?? '(none)',
    tasks: r.tasks,
    seconds: r.seconds,
    charged: r.charged,
    refunded: r.refunded,
    'provider cost': costText(r.cost),
    'cost (credits)': r.costCredits ?? 'unknown',
    margin: r.margin ?? 'unknown',
    'unknown-cost jobs': r.costUnknownJobs,
  }));
  return `${table(shown, ['group', 'tasks', 'seconds', 'charged', 'refunded', 'provider cost', 'cost (credits)', 'margin', 'unknown-cost jobs'])}\n  charged in all: ${total}`;
}

export function printUsageReport(r: UsageReport): string {
  return [
    `usage ${r.from} .. ${r.to}${r.tenantId ? ` of tenant ${r.tenantId}` : ', every tenant'} (tasks whose reservation closed in the window)`,
    '',
    `by ${r.groupBy}`,
    rowsText(r.groups),
    '',
    'by provider',
    rowsText(r.providers),
    '',
    'margin = charged - provider cost in credits (PROVIDER_COST_CREDITS); unknown where a job reported no cost and its model has no published price.',
  ].join('\n');
}

const instant = (value: string): Date => {
  const d = new Date(/^\d{4}-\d{2}-\d{2}$/.test(value) ? `${value}T00:00:00Z` : value);
  if (Number.isNaN(d.getTime())) throw new InvalidArgumentError('a date (YYYY-MM-DD, UTC) or an RFC 3339 timestamp');
  return d;
};
const group = (value: string): OpsUsageGroup => {
  if (!(GROUPS as readonly string[]).includes(value)) throw new InvalidArgumentError(`one of ${GROUPS.join(', ')}`);
  return value as OpsUsageGroup;
};

/** The first moment of the current UTC month. */
const monthStart = (now: Date) => new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));

export function registerUsageCommand(
  program: Command,
  deps: { withDb: <T>(work: (d: { db: Db }) => Promise<T>) => Promise<T>; print: (json: boolean, data: unknown, text: () => string) => void; rates: Rates },
): void {
  program
    .command('usage')
    .description('usage from the ledger with what the provider jobs cost and the margin, per group and per provider (reads only)')
    .option('--from <when>', 'start, inclusive (default: the start of this UTC month)', instant)
    .option('--to <when>', 'end, exclusive (default: now)', instant)
    .option('--group-by <group>', `one of ${GROUPS.join(', ')}`, group, 'model')
    .option('--tenant <name>', 'one tenant (default: every tenant)')
    .option('--json', 'print one JSON line', false)
    .action(async (o: { from?: Date; to?: Date; groupBy: OpsUsageGroup; tenant?: string; json: boolean }) => {
      const now = new Date();
      const from = o.from ?? monthStart(now);
      const to = o.to ?? now;
      if (to.getTime() <= from.getTime()) throw new InvalidArgumentError('--to must be after --from');
      const report = await deps.withDb((d) =>
        usageReport(d.db, { from, to, groupBy: o.groupBy, rates: deps.rates, ...(o.tenant !== undefined ? { tenant: o.tenant } : {}) }),
      );
      deps.print(o.json, report, () => printUsageReport(report));
    });
}
