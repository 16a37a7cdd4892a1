// The create transaction's writes as one statement (issue #19): the fence share lock, the task
// row (unique tenant + Idempotency-Key), its outbox row, its first transition, the reserve
// ledger row and the account CAS, chained by data-modifying CTEs so each write happens only when
// the one it depends on did. The caller runs it inside a transaction and rolls back on any
// refusal it reports (docs/performance.md "The create transaction"). Each table's part comes
// from the module that owns its writes (db/outbox.ts, db/tasks.ts, db/ledger.ts); the task row
// is written here, the one statement that creates tasks. The fence row's mode is read under the
// same share lock: once `mode set` has returned, no create commits in a mode that forbids them
// (the API's admission reads the mode through a cache up to a second old, docs/modes.md).
import { getTableColumns, sql } from 'drizzle-orm';
import { MODE_POLICIES } from '../domain/modes';
import { SYSTEM_MODES, type SystemMode } from '../domain/states';
import type { Tx } from './client';
import type { FenceToken } from './fence';
import { reserveCreditsFrom } from './ledger';
import { taskCreatedEventInsert } from './outbox';
import { generationTask, type TaskRow } from './schema';
import { taskCreatedTransitionInsert } from './tasks';

export interface TaskAdmission {
  readonly taskId: string;
  readonly outboxEventId: string;
  readonly tenantId: string;
  /** The API key that asked (usage per key; its budget counts the task); null for a create made outside the API. */
  readonly apiKeyId: string | null;
  readonly projectId: string;
  readonly idempotencyKey: string;
  readonly requestHash: string;
  readonly request: TaskRow['request'];
  readonly provider: string;
  readonly providerModel: string;
  readonly priority: number;
  readonly cost: string;
  readonly deadlineSeconds: number;
  readonly actor: string;
}

export type TaskAdmissionResult =
  /** The fence row is missing or names another region or epoch: nothing was written. */
  | { readonly kind: 'fence-rejected' }
  /** The mode, read under the fence's share lock, admits no creates: nothing was written. */
  | { readonly kind: 'mode-forbids'; readonly mode: SystemMode }
  /** The (tenant, Idempotency-Key) row exists: nothing was written. */
  | { readonly kind: 'key-taken' }
  /** The reserve's business key exists (cannot happen for a fresh task id): roll back. */
  | { readonly kind: 'reserve-exists' }
  /** The account cannot cover the cost: the task row is written, roll back. */
  | { readonly kind: 'insufficient-credits'; readonly available: string }
  | { readonly kind: 'admitted'; readonly task: TaskRow };

const taskColumns = Object.entries(getTableColumns(generationTask));

/** The modes whose policy admits creates (domain/modes.ts); the benchmarks' copies of the statement use them too. */
export const CREATE_MODES: readonly SystemMode[] = SYSTEM_MODES.filter((m) => MODE_POLICIES[m].create);
/** CREATE_MODES as a Postgres text[] literal, the statement's parameter. */
export const CREATE_MODES_LITERAL = `{${CREATE_MODES.join(',')}}`;

/** A generation_task row as the driver returned it, mapped as drizzle's select maps it. */
function taskRowOf(raw: Record<string, unknown>): TaskRow {
  return Object.fromEntries(
    taskColumns.map(([key, column]) => {
      const value = raw[column.name];
      return [key, value === null || value === undefined ? null : column.mapFromDriverValue(value)];
    }),
  ) as TaskRow;
}

/**
 * Writes a new task and everything its admission writes, in one round trip. Must run in a
 * transaction the caller rolls back unless the result is 'admitted'.
 */
export async function admitTask(tx: Tx, token: FenceToken, a: TaskAdmission): Promise<TaskAdmissionResult> {
  const task = sql.raw('task');
  const reserve = reserveCreditsFrom({ task, entry: sql.raw('ledger') }, token, { tenantId: a.tenantId, taskId: a.taskId, amount: a.cost });
  const result = await tx.execute(sql`
    WITH fence AS (
      SELECT mode FROM region_write_fence
      WHERE resource_scope = ${token.scope} AND active_region = ${token.region} AND write_epoch = ${token.epoch}
      FOR SHARE
    ), task AS (
      INSERT INTO generation_task (task_id, tenant_id, project_id, home_region, write_epoch, status, idempotency_key,
          reserved_amount, request_hash, request, provider, provider_model, priority, deadline_at, api_key_id)
      SELECT ${a.taskId}::uuid, ${a.tenantId}::uuid, ${a.projectId}::uuid, ${token.region}::text, ${token.epoch}::bigint, 'QUEUED', ${a.idempotencyKey}::text,
          ${a.cost}::numeric, ${a.requestHash}::text, ${JSON.stringify(a.request)}::jsonb, ${a.provider}::text, ${a.providerModel}::text,
          ${a.priority}::int, now() + make_interval(secs => ${a.deadlineSeconds}::float8), ${a.apiKeyId}::uuid
      FROM fence WHERE fence.mode = ANY (${CREATE_MODES_LITERAL}::text[])
      ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
      RETURNING *
    ), outbox AS (${taskCreatedEventInsert(task, token, { eventId: a.outboxEventId, taskId: a.taskId, tenantId: a.tenantId, provider: a.provider, priority: a.priority })}
    ), transition AS (${taskCreatedTransitionInsert(task, token, a.taskId, a.actor)}
    ), ledger AS (${reserve.entry}
    ), account AS (${reserve.account}
    )
    SELECT
      EXISTS (SELECT 1 FROM fence) AS fence_held,
      (SELECT mode FROM fence) AS fence_mode,
      EXISTS (SELECT 1 FROM ledger) AS reserved,
      EXISTS (SELECT 1 FROM account) AS moved,
      (SELECT (balance - reserved)::text FROM credit_account WHERE tenant_id = ${a.tenantId}::uuid) AS available_credits,
      task.*
    FROM (SELECT 1) AS one LEFT JOIN task ON true`);
  const raw = result.rows[0]!;
  const row = raw as {
    fence_held: boolean;
    fence_mode: SystemMode | null;
    reserved: boolean;
    moved: boolean;
    available_credits: string | null;
    task_id: string | null;
  };
  if (!row.fence_held) return { kind: 'fence-rejected' };
  if (!CREATE_MODES.includes(row.fence_mode!)) return { kind: 'mode-forbids', mode: row.fence_mode! };
  if (row.task_id === null) return { kind: 'key-taken' };
  if (!row.reserved) return { kind: 'reserve-exists' };
  if (!row.moved) return { kind: 'insufficient-credits', available: row.available_credits ?? '0.000000' };
  return { kind: 'admitted', task: taskRowOf(raw) };
}
