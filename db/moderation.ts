// Tasks a provider's content moderation ended (docs/decisions/0070): counted per tenant from the
// task facts, so an operator sees who keeps sending refused prompts. Reads only; the failure is
// written with the task's terminal transition (activities/apply-inbox.ts).
import { sql } from 'drizzle-orm';
import { CONTENT_MODERATED } from '../domain/moderation';
import type { DbOrTx } from './client';

export interface ModeratedCount {
  readonly tenantId: string;
  readonly tenantName: string | null;
  readonly provider: string;
  readonly tasks: number;
  readonly last: Date;
}

/** CONTENT_MODERATED tasks that ended since `since`, per tenant and provider, most first (idx_task_terminal_at bounds it). */
export async function moderatedSince(db: DbOrTx, since: Date): Promise<ModeratedCount[]> {
  const { rows } = await db.execute<{ tenant_id: string; name: string | null; provider: string; tasks: number; last: Date | string }>(sql`
    SELECT t.tenant_id::text AS tenant_id, n.name, coalesce(a.provider, t.provider, '') AS provider, count(*)::int AS tasks, max(t.terminal_at) AS last
    FROM generation_task t
    LEFT JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
    LEFT JOIN tenant n ON n.tenant_id = t.tenant_id
    WHERE t.terminal_at IS NOT NULL AND t.terminal_at >= ${since} AND t.failure_code = ${CONTENT_MODERATED}
    GROUP BY t.tenant_id, n.name, 3
    ORDER BY tasks DESC, tenant_id`);
  return rows.map((r) => ({ tenantId: r.tenant_id, tenantName: r.name, provider: r.provider, tasks: r.tasks, last: new Date(r.last) }));
}
