// Billing reconciler (docs/billing.md). A terminal task with its reservation still open is closed
// with the settlement the task itself recorded (its settled_amount), by the same idempotent,
// fenced ledger write the workflow makes (db/ledger.ts settleReservation), and only while the
// mode allows fact writes. Duplicate charges, a task whose recorded charge is not its SETTLE
// row, and an account that disagrees with the sum of its ledger are reported for a person: the
// ledger is append-only, and a correction is a decision (docs/runbooks/reconcilers.md).
import { sql } from 'drizzle-orm';
import { FenceRejectedError, acquireFence, type FenceToken } from '../db/fence';
import { holdFenceForFacts, ModePausedError } from '../db/modes';
import { settleReservation } from '../db/ledger';
import type { Reconciler, ReconcileFinding } from './types';

interface OpenRow {
  task_id: string;
  tenant_id: string;
  status: string;
  reserved_amount: string;
  settled_amount: string | null;
  reserves: number;
  closes: number;
}

export const billingReconciler: Reconciler = {
  name: 'billing',
  async run(deps, opts) {
    const findings: ReconcileFinding[] = [];
    let changed = 0;
    const { rows: open } = await deps.db.execute(sql`
      SELECT t.task_id::text, t.tenant_id::text, t.status, t.reserved_amount::text, t.settled_amount::text,
             (SELECT count(*) FROM credit_ledger l WHERE l.task_id = t.task_id AND l.entry_type = 'RESERVE')::int AS reserves,
             (SELECT count(*) FROM credit_ledger l WHERE l.task_id = t.task_id AND l.entry_type IN ('SETTLE', 'RELEASE'))::int AS closes
      FROM generation_task t
      WHERE t.terminal_at IS NOT NULL AND t.terminal_at < now() - make_interval(secs => ${deps.settings.graceSeconds})
        AND (SELECT count(*) FROM credit_ledger l WHERE l.task_id = t.task_id AND l.entry_type IN ('SETTLE', 'RELEASE')) < 2
      ORDER BY t.terminal_at LIMIT ${opts.limit}`);
    let token: FenceToken | null = null;
    // The mode forbids fact writes (READ_ONLY, MAINTENANCE; checked in each closing transaction):
    // the rest of this run only reports.
    let paused: string | null = null;
    for (const r of open as unknown as OpenRow[]) {
      const base = `${r.status} task with reservation ${r.reserved_amount} open`;
      if (r.reserves !== 1 || r.closes !== 0 || r.settled_amount === null) {
        findings.push({
          kind: 'open-reservation-unclear',
          taskId: r.task_id,
          detail: `${base}, ${r.reserves} reserve and ${r.closes} settle/release row(s), recorded charge ${r.settled_amount ?? 'none'}: a person must decide`,
        });
        continue;
      }
      if (opts.dryRun) {
        findings.push({ kind: 'open-reservation', taskId: r.task_id, detail: `${base}; would charge ${r.settled_amount} and release the rest` });
        continue;
      }
      if (paused) {
        findings.push({ kind: 'open-reservation', taskId: r.task_id, detail: `${base}; not closed: ${paused}` });
        continue;
      }
      try {
        token ??= (await acquireFence(deps.db, deps.fence.scope, deps.fence.region)).token;
        const closed = await deps.db.transaction(async (tx) => {
          await holdFenceForFacts(tx, token!);
          // Re-read under the task's lock: the workflow (or another run) may have closed it meanwhile.
          const { rows: again } = await tx.execute(sql`
            SELECT t.reserved_amount::text, t.settled_amount::text FROM generation_task t WHERE t.task_id = ${r.task_id} AND t.terminal_at IS NOT NULL FOR UPDATE`);
          const { rows: closes } = await tx.execute(
            sql`SELECT 1 FROM credit_ledger WHERE task_id = ${r.task_id} AND entry_type IN ('SETTLE', 'RELEASE') LIMIT 1`,
          );
          const t = again[0] as { reserved_amount: string; settled_amount: string | null } | undefined;
          if (!t || t.settled_amount === null || closes.length > 0) return false;
          await settleReservation(tx, token!, {
            tenantId: r.tenant_id,
            taskId: r.task_id,
            reserved: t.reserved_amount,
            charge: t.settled_amount,
            note: 'reconciled: terminal task with its reservation open',
          });
          return true;
        });
        if (closed) changed += 1;
        findings.push({
          kind: 'open-reservation',
          taskId: r.task_id,
          detail: closed ? `${base}; charged ${r.settled_amount}, released the rest` : `${base}; closed meanwhile`,
        });
      } catch (err) {
        if (err instanceof ModePausedError) paused = err.message;
        const why = err instanceof FenceRejectedError ? 'this region does not hold the fence' : (err as Error).message;
        findings.push({ kind: 'open-reservation', taskId: r.task_id, detail: `${base}; not closed: ${why}` });
      }
    }

    const { rows: duplicates } = await deps.db.execute(sql`
      SELECT task_id::text, count(*) FILTER (WHERE entry_type = 'SETTLE')::int AS settles,
             coalesce(sum(amount) FILTER (WHERE entry_type = 'SETTLE'), 0)::text AS charged,
             coalesce(sum(amount) FILTER (WHERE entry_type = 'RESERVE'), 0)::text AS reserved
      FROM credit_ledger WHERE task_id IS NOT NULL
      GROUP BY task_id
      HAVING count(*) FILTER (WHERE entry_type = 'SETTLE') > 1
          OR coalesce(sum(amount) FILTER (WHERE entry_type = 'SETTLE'), 0) > coalesce(sum(amount) FILTER (WHERE entry_type = 'RESERVE'), 0)
      LIMIT ${opts.limit}`);
    for (const d of duplicates as { task_id: string; settles: number; charged: string; reserved: string }[]) {
      findings.push({
        kind: 'duplicate-charge',
        taskId: d.task_id,
        detail: `${d.settles} settle row(s) charging ${d.charged} against a reservation of ${d.reserved}`,
      });
    }

    // The task row's recorded charge is what its SETTLE row says (docs/billing.md): a task made
    // live again after its reservation was closed, or a charge written beside the ledger, shows here.
    const { rows: drifted } = await deps.db.execute(sql`
      SELECT t.task_id::text, t.status, t.settled_amount::text, l.amount::text AS settle
      FROM credit_ledger l JOIN generation_task t ON t.task_id = l.task_id
      WHERE l.entry_type = 'SETTLE' AND t.settled_amount IS DISTINCT FROM l.amount
      LIMIT ${opts.limit}`);
    for (const d of drifted as { task_id: string; status: string; settled_amount: string | null; settle: string }[]) {
      findings.push({
        kind: 'settlement-drift',
        taskId: d.task_id,
        detail: `${d.status} task records charge ${d.settled_amount ?? 'none'}, its SETTLE row ${d.settle}: a person must decide`,
      });
    }

    // balance = GRANT − SETTLE + REFUND and reserved = RESERVE − SETTLE − RELEASE (docs/billing.md).
    const { rows: accounts } = await deps.db.execute(sql`
      SELECT a.tenant_id::text, a.balance::text, a.reserved::text, l.balance::text AS ledger_balance, l.reserved::text AS ledger_reserved
      FROM credit_account a
      LEFT JOIN LATERAL (
        SELECT coalesce(sum(CASE entry_type WHEN 'GRANT' THEN amount WHEN 'REFUND' THEN amount WHEN 'SETTLE' THEN -amount ELSE 0 END), 0) AS balance,
               coalesce(sum(CASE entry_type WHEN 'RESERVE' THEN amount WHEN 'SETTLE' THEN -amount WHEN 'RELEASE' THEN -amount ELSE 0 END), 0) AS reserved
        FROM credit_ledger WHERE tenant_id = a.tenant_id) l ON true
      WHERE a.balance <> l.balance OR a.reserved <> l.reserved
      LIMIT ${opts.limit}`);
    for (const a of accounts as { tenant_id: string; balance: string; reserved: string; ledger_balance: string; ledger_reserved: string }[]) {
      findings.push({
        kind: 'account-drift',
        key: `tenant:${a.tenant_id}`,
        detail: `account balance ${a.balance} / reserved ${a.reserved}, ledger says ${a.ledger_balance} / ${a.ledger_reserved}`,
      });
    }
    const { rows: counted } = await deps.db.execute(sql`SELECT count(*)::int AS n FROM credit_account`);
    return { examined: open.length + duplicates.length + drifted.length + (counted[0] as { n: number }).n, findings, changed };
  },
};
