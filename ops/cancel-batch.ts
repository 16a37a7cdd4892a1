// `ops task cancel --filter …`: a bulk cancel as an audited batch (ops/batch.ts): the dry run
// lists the open tasks the filter selects, applying re-reads each, refuses any that changed, and
// cancels the rest through the API's own cancel (api/tasks.service.ts cancelTask: the state
// machine decides, after acceptance a provider cancel follows), then wakes its workflow.
import { sql } from 'drizzle-orm';
import { cancelTask } from '../api/tasks.service';
import type { Db } from '../db/client';
import { acquireFence } from '../db/fence';
import { modeForbids } from '../domain/modes';
import { TASK_STATES, type TaskStatus } from '../domain/states';
import type { GenerationFacade } from '../temporal/facade';
import { applyPlan, checkPlan, fingerprintOf, makePlan, type BatchItem, type BatchPlan, type BatchResult } from './batch';

export interface CancelFilter {
  readonly tenant?: string;
  readonly provider?: string;
  readonly statuses?: TaskStatus[];
  /** Created at least this many seconds ago. */
  readonly olderThanSeconds?: number;
}

export function parseStatuses(value: string): TaskStatus[] {
  const list = value.split(',').map((s) => s.trim().toUpperCase());
  const bad = list.filter((s) => !(TASK_STATES as readonly string[]).includes(s));
  if (bad.length) throw new Error(`unknown status ${bad.join(', ')}; one of ${TASK_STATES.join(', ')}`);
  return list as TaskStatus[];
}

async function select(db: Db, f: CancelFilter, limit: number, taskId?: string): Promise<BatchItem[]> {
  const { rows } = await db.execute(sql`
    SELECT t.task_id::text, t.tenant_id::text, t.provider, t.status, t.status_version::int AS v, n.name AS tenant
    FROM generation_task t JOIN tenant n ON n.tenant_id = t.tenant_id
    WHERE t.terminal_at IS NULL
      ${f.tenant ? sql`AND n.name = ${f.tenant}` : sql``}
      ${f.provider ? sql`AND t.provider = ${f.provider}` : sql``}
      ${
        f.statuses?.length
          ? sql`AND t.status IN (${sql.join(
              f.statuses.map((s) => sql`${s}`),
              sql`, `,
            )})`
          : sql``
      }
      ${f.olderThanSeconds !== undefined ? sql`AND t.created_at < now() - make_interval(secs => ${f.olderThanSeconds})` : sql``}
      ${taskId ? sql`AND t.task_id = ${taskId}` : sql``}
    ORDER BY t.created_at LIMIT ${limit}`);
  return (rows as { task_id: string; tenant_id: string; provider: string; status: string; v: number; tenant: string }[]).map((r) => ({
    taskId: r.task_id,
    tenantId: r.tenant_id,
    provider: r.provider,
    fingerprint: fingerprintOf({ s: r.status, v: r.v }),
    summary: `${r.tenant} ${r.provider} ${r.status}`,
  }));
}

export async function planCancelBatch(db: Db, filter: CancelFilter, limit: number): Promise<BatchPlan> {
  if (!filter.tenant && !filter.provider && !filter.statuses?.length && filter.olderThanSeconds === undefined) {
    throw new Error('say which tasks: --tenant, --provider, --status or --older-than (a bulk cancel never means every task)');
  }
  return makePlan('task.cancel', { filter }, await select(db, filter, limit));
}

export async function applyCancelBatch(
  db: Db,
  facade: GenerationFacade,
  plan: BatchPlan,
  args: { operator: string; reason: string; ratePerSecond: number; fence: { scope: string; region: string } },
): Promise<{ batchId: string; auditId: string; results: BatchResult[] }> {
  checkPlan(plan, 'task.cancel');
  // The batch is refused as a whole while the mode pauses cancels (READ_ONLY, MAINTENANCE); a
  // mode narrowed during it is caught by each cancel's own transaction (cancelTask), and that
  // task's result says so.
  const { state } = await acquireFence(db, args.fence.scope, args.fence.region);
  const paused = modeForbids(state.mode, 'cancel');
  if (paused) throw new Error(`${paused}; cancel after \`mode set\``);
  const filter = plan.selector['filter'] as CancelFilter;
  return applyPlan(db, plan, {
    actor: `operator:${args.operator}`,
    reason: args.reason,
    ratePerSecond: args.ratePerSecond,
    reread: async (taskId) => (await select(db, filter, 1, taskId))[0] ?? null,
    async act(item) {
      const { token } = await acquireFence(db, args.fence.scope, args.fence.region);
      const task = await cancelTask(db, token, item.tenantId, item.taskId, `operator:${args.operator}`);
      await facade.wakeTask(item.taskId);
      return `now ${task.status}`;
    },
  });
}
