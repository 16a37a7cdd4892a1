// Usage from the ledger (docs/billing.md "Usage"): the tasks whose reservation was closed in a
// window, grouped by UTC day, model or API key, with the credits charged and returned and the
// seconds of video delivered. GET /v1/usage reads one tenant's; `ops usage` reads any, with what
// the provider jobs cost us (task_attempt.provider_cost, docs/decisions/0071). Shared by every
// reader of ledger sums per group, so they all count the same rows.
import { sql, type SQL } from 'drizzle-orm';
import { PROVIDER_COST_UNITS, type ProviderCostUnit } from '../domain/provider-cost';
import type { DbOrTx } from './client';

export const USAGE_GROUPS = ['day', 'model', 'key'] as const;
export type UsageGroup = (typeof USAGE_GROUPS)[number];
/** Operators may also group by the provider that ran the task. */
export type OpsUsageGroup = UsageGroup | 'provider';

export interface UsageQuery {
  /** Inclusive. */
  readonly from: Date;
  /** Exclusive. */
  readonly to: Date;
  readonly groupBy: OpsUsageGroup;
  /** One tenant's usage; absent: every tenant's (operators only). */
  readonly tenantId?: string;
}

export interface UsageRow {
  /** The day (YYYY-MM-DD, UTC), the model ordered, the API key id, or the provider; null: a task created before keys were kept. */
  readonly group: string | null;
  /** Tasks whose reservation was closed (SETTLE written) in the window. */
  readonly tasks: number;
  /** Seconds of video delivered (measured) by those of them that succeeded. */
  readonly seconds: string;
  /** Credits charged (SETTLE). */
  readonly charged: string;
  /** Credits reserved and given back (RELEASE and REFUND). */
  readonly refunded: string;
}

export interface OpsUsageRow extends UsageRow {
  /** What the provider jobs of these tasks cost, per unit, where known. */
  readonly cost: Readonly<Partial<Record<ProviderCostUnit, string>>>;
  /** Provider jobs of these tasks whose cost is unknown. */
  readonly costUnknownJobs: number;
}

const groupExpr: Record<OpsUsageGroup, SQL> = {
  day: sql`to_char(c.settled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`,
  model: sql`t.request ->> 'model'`,
  key: sql`t.api_key_id::text`,
  provider: sql`t.provider`,
};

/** Sums over the tasks closed in the window; `withCost` adds the attempts' provider cost. */
function usageStatement(q: UsageQuery, withCost: boolean): SQL {
  const costColumns = withCost
    ? sql.join(
        [
          ...PROVIDER_COST_UNITS.map((u) => sql`coalesce(sum(k.${sql.identifier(u)}), 0)::text AS ${sql.identifier(`cost_${u}`)}`),
          sql`coalesce(sum(k.unknown), 0)::int AS cost_unknown`,
        ],
        sql`, `,
      )
    : sql`NULL AS none`;
  const costJoin = withCost
    ? sql`LEFT JOIN LATERAL (
        SELECT ${sql.join(
          PROVIDER_COST_UNITS.map((u) => sql`sum(provider_cost) FILTER (WHERE provider_cost_unit = ${u}) AS ${sql.identifier(u)}`),
          sql`, `,
        )},
          count(*) FILTER (WHERE provider_job_id IS NOT NULL AND provider_cost IS NULL) AS unknown
        FROM task_attempt WHERE task_id = c.task_id) k ON true`
    : sql``;
  return sql`
    WITH c AS (
      SELECT s.task_id, s.created_at AS settled_at, s.amount AS charged,
        (SELECT coalesce(sum(r.amount), 0) FROM credit_ledger r WHERE r.task_id = s.task_id AND r.entry_type IN ('RELEASE', 'REFUND')) AS refunded
      FROM credit_ledger s
      WHERE s.entry_type = 'SETTLE' AND s.created_at >= ${q.from} AND s.created_at < ${q.to}
        ${q.tenantId ? sql`AND s.tenant_id = ${q.tenantId}::uuid` : sql``}
    )
    SELECT ${groupExpr[q.groupBy]} AS grp,
      count(*)::int AS tasks,
      coalesce(sum((a.media_info ->> 'durationSeconds')::numeric) FILTER (WHERE t.status = 'SUCCEEDED'), 0)::numeric(18,3)::text AS seconds,
      coalesce(sum(c.charged), 0)::numeric(18,6)::text AS charged,
      coalesce(sum(c.refunded), 0)::numeric(18,6)::text AS refunded,
      ${costColumns}
    FROM c
    JOIN generation_task t ON t.task_id = c.task_id
    LEFT JOIN asset a ON a.task_id = c.task_id AND a.kind = 'video'
    ${costJoin}
    GROUP BY 1
    ORDER BY 1 NULLS LAST`;
}

type Raw = { grp: string | null; tasks: number; seconds: string; charged: string; refunded: string } & Record<string, unknown>;

const usageRow = (r: Raw): UsageRow => ({ group: r.grp, tasks: r.tasks, seconds: r.seconds, charged: r.charged, refunded: r.refunded });

/** A tenant's usage in [from, to), one row per group with any task closed in it. */
export async function tenantUsage(db: DbOrTx, q: UsageQuery & { readonly tenantId: string; readonly groupBy: UsageGroup }): Promise<UsageRow[]> {
  const { rows } = await db.execute<Raw>(usageStatement(q, false));
  return rows.map(usageRow);
}

/** Usage with what the provider jobs cost, for operators (one tenant or all). */
export async function opsUsage(db: DbOrTx, q: UsageQuery): Promise<OpsUsageRow[]> {
  const { rows } = await db.execute<Raw>(usageStatement(q, true));
  return rows.map((r) => ({
    ...usageRow(r),
    cost: Object.fromEntries(PROVIDER_COST_UNITS.map((u) => [u, r[`cost_${u}`] as string])),
    costUnknownJobs: r['cost_unknown'] as number,
  }));
}
