// Billing checks the database drills print (docs/billing.md): per tenant, the account's running
// totals against the sums of its ledger rows, and open reservations on terminal tasks.
import { sql } from 'drizzle-orm';
import type { Db } from '../../db/client';

export interface TenantLedgerCheck {
  /** Tenants whose balance ≠ GRANT + REFUND − SETTLE or reserved ≠ RESERVE − SETTLE − RELEASE. */
  readonly tenantsOutOfBalance: number;
  /** Terminal tasks whose RESERVE is not closed by SETTLE + RELEASE. */
  readonly openReservationsOnTerminalTasks: number;
}

export async function tenantLedgerCheck(db: Db): Promise<TenantLedgerCheck> {
  const { rows } = await db.execute(sql`
    WITH l AS (
      SELECT tenant_id,
        coalesce(sum(amount) FILTER (WHERE entry_type IN ('GRANT', 'REFUND')), 0)
          - coalesce(sum(amount) FILTER (WHERE entry_type = 'SETTLE'), 0) AS balance,
        coalesce(sum(amount) FILTER (WHERE entry_type = 'RESERVE'), 0)
          - coalesce(sum(amount) FILTER (WHERE entry_type IN ('SETTLE', 'RELEASE')), 0) AS reserved
      FROM credit_ledger GROUP BY tenant_id)
    SELECT
      (SELECT count(*)::int FROM credit_account a LEFT JOIN l USING (tenant_id)
        WHERE a.balance <> coalesce(l.balance, 0) OR a.reserved <> coalesce(l.reserved, 0)) AS tenants,
      (SELECT count(*)::int FROM generation_task t
        WHERE t.terminal_at IS NOT NULL
          AND (SELECT coalesce(sum(amount) FILTER (WHERE entry_type = 'RESERVE'), 0)
                - coalesce(sum(amount) FILTER (WHERE entry_type IN ('SETTLE', 'RELEASE')), 0)
               FROM credit_ledger c WHERE c.task_id = t.task_id) <> 0) AS open_reservations`);
  const r = rows[0] as { tenants: number; open_reservations: number };
  return { tenantsOutOfBalance: r.tenants, openReservationsOnTerminalTasks: r.open_reservations };
}
