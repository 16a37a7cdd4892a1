// GET /v1/usage (api/usage.routes.ts): the tenant's own usage, from the ledger (db/usage.ts), as
// JSON or, for `Accept: text/csv`, as a CSV download of the same groups.
import type { Request, Response } from 'express';
import { tenantUsage, type UsageRow } from '../db/usage';
import { addMoney } from '../domain/money';
import { tenantOf } from './auth';
import type { ApiContext } from './context';
import { problems, zodFieldErrors } from './problem';
import { usageRoutes } from './usage.routes';

const CSV_COLUMNS = ['group', 'tasks', 'seconds', 'charged', 'refunded'] as const;

/** One CSV field (RFC 4180): quoted when it holds a comma, quote or line break. */
const csvField = (v: string | number | null): string => {
  const s = v === null ? '' : String(v);
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
};

export function usageCsvText(rows: readonly UsageRow[]): string {
  const lines = [CSV_COLUMNS.join(','), ...rows.map((r) => CSV_COLUMNS.map((c) => csvField(r[c])).join(','))];
  return `${lines.join('\r\n')}\r\n`;
}

/** The sums over every group. */
function totals(rows: readonly UsageRow[]) {
  return rows.reduce(
    (t, r) => ({
      tasks: t.tasks + r.tasks,
      seconds: addMoney(t.seconds, r.seconds),
      charged: addMoney(t.charged, r.charged),
      refunded: addMoney(t.refunded, r.refunded),
    }),
    { tasks: 0, seconds: '0', charged: '0', refunded: '0' },
  );
}

export function usageHandlers(ctx: ApiContext) {
  return {
    async get(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const q = usageRoutes.get.request.query.safeParse(req.query);
      if (!q.success) throw problems.validation(zodFieldErrors(q.error, 'query'));
      const { from, to, group_by: groupBy } = q.data;
      const rows = await tenantUsage(ctx.db, { tenantId, from, to, groupBy });
      if (req.accepts(['application/json', 'text/csv']) === 'text/csv') {
        const name = `usage-${groupBy}-${from.toISOString().slice(0, 10)}-${to.toISOString().slice(0, 10)}.csv`;
        res.type('text/csv').attachment(name).send(usageCsvText(rows));
        return;
      }
      const sum = totals(rows);
      res.json({
        from: from.toISOString(),
        to: to.toISOString(),
        group_by: groupBy,
        groups: rows,
        totals: { ...sum, seconds: sum.seconds.replace(/0{3}$/, '') },
      });
    },
  };
}
