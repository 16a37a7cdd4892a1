// A history of closed tasks for load tests: `n` SUCCEEDED tasks, closed days ago, each with its
// reserve, settle and release ledger rows, written by two INSERT … SELECT generate_series
// statements (300,000 tasks take seconds). The ledger balances, as a real one does.
import { sql } from 'drizzle-orm';
import type { Db } from '../../db/client';

export async function seedClosedTasks(db: Db, opts: { tenantId: string; region: string; n: number }): Promise<void> {
  await db.execute(sql`
    INSERT INTO generation_task (task_id, tenant_id, project_id, home_region, write_epoch, status, idempotency_key,
      reserved_amount, settled_amount, request_hash, request, provider, provider_model, created_at, updated_at, terminal_at)
    SELECT md5('closed-' || g)::uuid, ${opts.tenantId}, ${opts.tenantId}, ${opts.region}, 1, 'SUCCEEDED', 'closed-' || g,
      1, 0.5, md5('closed-' || g), '{}'::jsonb, 'replicate', 'minimax/video-01',
      now() - interval '3 days' - g * interval '1 second', now() - interval '2 days' - g * interval '1 second',
      now() - interval '2 days' - g * interval '1 second'
    FROM generate_series(1, ${opts.n}) g`);
  await db.execute(sql`
    INSERT INTO credit_ledger (entry_id, tenant_id, task_id, business_key, entry_type, amount, region, write_epoch, created_at)
    SELECT md5(e.kind || '-closed-' || g)::uuid, ${opts.tenantId}, md5('closed-' || g)::uuid,
      'task:' || md5('closed-' || g)::uuid || ':' || lower(e.kind), e.kind, e.amount, ${opts.region}, 1,
      now() - interval '2 days' - g * interval '1 second'
    FROM generate_series(1, ${opts.n}) g
    CROSS JOIN (VALUES ('RESERVE', 1.0), ('SETTLE', 0.5), ('RELEASE', 0.5)) AS e(kind, amount)`);
  await db.execute(sql`ANALYZE generation_task`);
  await db.execute(sql`ANALYZE credit_ledger`);
}
