// One fact transaction on one task (docs/design.md §3 and §7; docs/decisions/0040-task-transactions.md).
// It opens and closes in one round trip each: the round trip that sends BEGIN also locks the
// fence row FOR SHARE, reads the region, epoch and mode, and locks the task row FOR UPDATE; the
// one that sends COMMIT also reads the facts the step returns. What comes between is the step's
// own statements, through an ordinary drizzle transaction handle on the same connection.
//
// A step that calls a provider between its read and its write (a poll) reads first with
// readTaskRows: the same fence, mode, task and active attempt in one round trip, outside any
// transaction and without locks; its write is then a task transaction carrying the token read.
//
// The framing round trips are simple-protocol queries (several statements in one message
// carry no parameters), so their only values are a task id checked to be a UUID and the fence
// scope, both quoted by pg's escapeLiteral.
import { eq, getTableColumns } from 'drizzle-orm';
import { NodePgSession, NodePgTransaction } from 'drizzle-orm/node-postgres';
import { PgDialect } from 'drizzle-orm/pg-core';
import pg from 'pg';
import type { TaskFacts } from '../domain/facts';
import { modeForbids, type ModeAction } from '../domain/modes';
import type { AttemptState, SystemMode, TaskStatus } from '../domain/states';
import type { Db, Tx } from './client';
import { FenceRejectedError, readFence, type FenceToken } from './fence';
import { MODE_SETTING, ModePausedError } from './modes';
import { generationTask, taskAttempt, type AttemptRow, type TaskRow } from './schema';

export interface TaskLock {
  /** The unit of work's token: the one it carried in, or this transaction's fence row's. */
  readonly token: FenceToken;
  /** The mode as the fence row says, share-locked for the transaction (also in MODE_SETTING). */
  readonly mode: SystemMode;
  /** The task row, locked FOR UPDATE; null when there is no such task. */
  readonly task: TaskRow | null;
  /** With options.activeAttempt: the task's active attempt row, locked FOR UPDATE after the task (null: none). */
  readonly attempt: AttemptRow | null;
}

export interface TaskTransactionOptions {
  /**
   * The token of the unit of work this transaction belongs to (a step that spans transactions,
   * such as a submit's claim and record): its epoch must still be the fence row's. Absent: the
   * fence row's own epoch, so the region only has to be the active one.
   */
  readonly token?: FenceToken;
  /** What the step is about to do; the mode must allow it (default: write facts). */
  readonly action?: ModeAction;
  /** Read the facts in the commit round trip, `now` giving the clock for the poll time. */
  readonly facts?: () => Date;
  /** Also lock the task's active attempt in the opening round trip (TaskLock.attempt). */
  readonly activeAttempt?: boolean;
}

export interface TaskTransactionResult<T> {
  readonly value: T;
  /** The facts after the commit, when asked for (options.facts) and the task exists. */
  readonly facts: TaskFacts | null;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const WAITING_ON_PROVIDER: readonly TaskStatus[] = ['SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED', 'SUBMIT_UNKNOWN'];

/** The facts the workflow decides on, from the task and its active attempt. */
export function toTaskFacts(
  task: Pick<TaskRow, 'task_id' | 'tenant_id' | 'provider' | 'status' | 'status_version' | 'active_attempt_id'> & { readonly cancelRequested: boolean },
  attempt: { readonly provider: string; readonly submitState: AttemptState; readonly nextPollAt: Date | null } | null,
  now: Date,
): TaskFacts {
  const status = task.status;
  const waiting = WAITING_ON_PROVIDER.includes(status);
  return {
    taskId: task.task_id,
    tenantId: task.tenant_id,
    provider: task.provider,
    status,
    statusVersion: task.status_version,
    activeAttemptId: task.active_attempt_id,
    attemptProvider: attempt?.provider ?? null,
    attemptState: attempt?.submitState ?? null,
    cancelRequested: task.cancelRequested,
    pollInMs: waiting && attempt?.nextPollAt ? Math.max(0, attempt.nextPollAt.getTime() - now.getTime()) : null,
    needsAttention: status === 'MANUAL_REVIEW' || status === 'OUTPUT_AT_RISK',
  };
}

/**
 * Runs `work` in one transaction that holds the fence row for share and the task row for
 * update, both taken with BEGIN in one round trip, and commits in one more (with the facts when
 * asked). Throws FenceRejectedError when this region does not own writes (or the token's epoch
 * is gone), ModePausedError when the mode forbids `action`, before `work` runs; the transaction
 * is then rolled back. `work` gets `task: null` for a task that does not exist.
 */
export async function inTaskTransaction<T>(
  db: Db,
  fence: { readonly scope: string; readonly region: string },
  taskId: string,
  work: (tx: Tx, lock: TaskLock) => Promise<T>,
  options: TaskTransactionOptions = {},
): Promise<TaskTransactionResult<T>> {
  if (!UUID.test(taskId)) throw new Error(`not a task id: ${JSON.stringify(taskId.slice(0, 60))}`);
  const client = await db.$client.connect();
  let broken: Error | undefined;
  let open = true;
  try {
    const opened = await client.query({ text: openingText(fence.scope, taskId, options.activeAttempt === true), types: DRIZZLE_TYPES });
    const lock = lockFrom(lastResult(opened).rows[0] as Record<string, unknown> | undefined, fence, options);
    if (!(lock instanceof Error)) {
      const tx = transactionOn(db, client);
      const value = await work(tx, options.activeAttempt ? await withActiveAttempt(tx, lock) : lock);
      const closed = await client.query({ text: options.facts ? `${factsText(taskId)}; COMMIT` : 'COMMIT', types: DRIZZLE_TYPES });
      open = false;
      const facts = options.facts ? factsFrom(firstResult(closed).rows[0] as FactsRow | undefined, options.facts()) : null;
      return { value, facts };
    }
    // Rejected before any write: say who owns writes (a plain read on this connection, after the rollback).
    await client.query('ROLLBACK');
    open = false;
    throw lock instanceof FenceRejectedError ? new FenceRejectedError(lock.token, await readFence(transactionOn(db, client), fence.scope)) : lock;
  } catch (err) {
    if (open) {
      await client.query('ROLLBACK').catch((rollbackErr: unknown) => {
        broken = rollbackErr as Error;
      });
    }
    throw err;
  } finally {
    client.release(broken);
  }
}

/**
 * The fence, the mode, the task and its active attempt in one round trip, outside any
 * transaction and without locks, refused as inTaskTransaction's opening refuses (FenceRejectedError
 * when this region does not own writes, ModePausedError when the mode forbids `action`). For a
 * step that calls a provider before it writes: no lock is held across the call, and the token
 * returned carries the epoch read into the write's task transaction (options.token), which
 * refuses if the region or the epoch moved meanwhile.
 */
export async function readTaskRows(
  db: Db,
  fence: { readonly scope: string; readonly region: string },
  taskId: string,
  options: Pick<TaskTransactionOptions, 'action'> = {},
): Promise<TaskLock> {
  if (!UUID.test(taskId)) throw new Error(`not a task id: ${JSON.stringify(taskId.slice(0, 60))}`);
  const read = await db.$client.query({ text: readingText(fence.scope, taskId), types: DRIZZLE_TYPES });
  const lock = lockFrom(read.rows[0] as Record<string, unknown> | undefined, fence, options);
  if (lock instanceof FenceRejectedError) throw new FenceRejectedError(lock.token, await readFence(db, fence.scope));
  if (lock instanceof Error) throw lock;
  return lock;
}

const ATTEMPT_COLUMNS = Object.entries(getTableColumns(taskAttempt));
/** The attempt's columns under names of their own (its column names overlap the task's). */
const ATTEMPT_SELECT = ATTEMPT_COLUMNS.map(([, c]) => `a.${c.name} AS "attempt.${c.name}"`).join(', ');

/**
 * The lock with the task's active attempt as of the task row it holds. The opening statement's
 * join reads attempts as of its own start: an attempt committed while it waited for the task
 * row (the task row it then returns names it) is read again here, locked.
 */
async function withActiveAttempt(tx: Tx, lock: TaskLock): Promise<TaskLock> {
  const active = lock.task?.active_attempt_id ?? null;
  if (active === null || lock.attempt?.attempt_id === active) return lock;
  const [attempt] = await tx.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, active)).for('update');
  return { ...lock, attempt: attempt ?? null };
}

/** Fence row first (share), then the task row (update), then its active attempt's: the order every fact transaction takes. */
function openingText(scope: string, taskId: string, activeAttempt: boolean): string {
  const attempt = activeAttempt
    ? { select: `, ${ATTEMPT_SELECT}`, join: 'LEFT JOIN LATERAL (SELECT * FROM task_attempt WHERE attempt_id = t.active_attempt_id FOR UPDATE) a ON true' }
    : { select: '', join: '' };
  return `BEGIN; SELECT f.*, set_config(${pg.escapeLiteral(MODE_SETTING)}, f.fence_mode, true) AS fence_mode_set, t.*${attempt.select}
    FROM (SELECT active_region AS fence_region, write_epoch AS fence_epoch, mode AS fence_mode
          FROM region_write_fence WHERE resource_scope = ${pg.escapeLiteral(scope)} FOR SHARE) f
    LEFT JOIN LATERAL (SELECT * FROM generation_task WHERE task_id = ${pg.escapeLiteral(taskId)} FOR UPDATE) t ON true
    ${attempt.join}`;
}

/** readTaskRows' statement: the opening's rows, unlocked (the active attempt as the task row names it). */
function readingText(scope: string, taskId: string): string {
  return `SELECT f.*, t.*, ${ATTEMPT_SELECT}
    FROM (SELECT active_region AS fence_region, write_epoch AS fence_epoch, mode AS fence_mode
          FROM region_write_fence WHERE resource_scope = ${pg.escapeLiteral(scope)}) f
    LEFT JOIN generation_task t ON t.task_id = ${pg.escapeLiteral(taskId)}
    LEFT JOIN task_attempt a ON a.attempt_id = t.active_attempt_id`;
}

/** The lock, or the error that refuses it (the caller rolls back first). */
function lockFrom(
  row: Record<string, unknown> | undefined,
  fence: { readonly scope: string; readonly region: string },
  options: TaskTransactionOptions,
): TaskLock | FenceRejectedError | ModePausedError {
  if (!row) return new FenceRejectedError({ scope: fence.scope, region: fence.region, epoch: options.token?.epoch }, null);
  const epoch = Number(row.fence_epoch);
  const token = options.token ?? { scope: fence.scope, region: fence.region, epoch };
  if (row.fence_region !== fence.region || epoch !== token.epoch) return new FenceRejectedError(token, null);
  const mode = row.fence_mode as SystemMode;
  const action = options.action ?? 'factWrites';
  if (modeForbids(mode, action)) return new ModePausedError(mode, action);
  const task = row.task_id == null ? null : (fromDriver(TASK_COLUMNS, row, '') as TaskRow);
  const attempt = row['attempt.attempt_id'] == null ? null : (fromDriver(ATTEMPT_COLUMNS, row, 'attempt.') as AttemptRow);
  return { token, mode, task, attempt };
}

const TASK_COLUMNS = Object.entries(getTableColumns(generationTask));

/** A row as the driver returned it (drizzle's type parsers), its columns named `prefix` + name → the row drizzle's select gives. */
function fromDriver(columns: typeof TASK_COLUMNS | typeof ATTEMPT_COLUMNS, raw: Record<string, unknown>, prefix: string): Record<string, unknown> {
  const row: Record<string, unknown> = {};
  for (const [key, column] of columns) {
    const value = raw[`${prefix}${column.name}`];
    row[key] = value === null || value === undefined ? null : column.mapFromDriverValue(value);
  }
  return row;
}

interface FactsRow {
  task_id: string;
  tenant_id: string;
  provider: string;
  status: TaskStatus;
  status_version: string;
  active_attempt_id: string | null;
  cancel_requested: boolean;
  attempt_provider: string | null;
  submit_state: AttemptState | null;
  next_poll_ms: number | null;
}

function factsText(taskId: string): string {
  return `SELECT t.task_id, t.tenant_id, t.provider, t.status, t.status_version, t.active_attempt_id,
      t.cancel_requested_at IS NOT NULL AS cancel_requested, a.provider AS attempt_provider, a.submit_state,
      (extract(epoch FROM a.next_poll_at) * 1000)::float8 AS next_poll_ms
    FROM generation_task t LEFT JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
    WHERE t.task_id = ${pg.escapeLiteral(taskId)}`;
}

function factsFrom(row: FactsRow | undefined, now: Date): TaskFacts | null {
  if (!row) return null;
  const attempt =
    row.attempt_provider !== null && row.submit_state !== null
      ? { provider: row.attempt_provider, submitState: row.submit_state, nextPollAt: row.next_poll_ms === null ? null : new Date(row.next_poll_ms) }
      : null;
  return toTaskFacts({ ...row, status_version: Number(row.status_version), cancelRequested: row.cancel_requested }, attempt, now);
}

// A multi-statement query answers one result per statement (an array); one statement, one result.
const results = (r: pg.QueryResult | pg.QueryResult[]): pg.QueryResult[] => (Array.isArray(r) ? r : [r]);
const lastResult = (r: pg.QueryResult | pg.QueryResult[]) => results(r).at(-1)!;
const firstResult = (r: pg.QueryResult | pg.QueryResult[]) => results(r)[0]!;

/**
 * The type parsers drizzle's node-postgres driver uses (timestamps, dates and intervals kept as
 * the server's text, which the columns' mapFromDriverValue turns into what a select returns).
 */
const KEPT_AS_TEXT = new Set<number>([
  pg.types.builtins.TIMESTAMPTZ,
  pg.types.builtins.TIMESTAMP,
  pg.types.builtins.DATE,
  pg.types.builtins.INTERVAL,
  1115,
  1182,
  1185,
  1187,
  1231,
]);
const keepText = (value: string): string => value;
const DRIZZLE_TYPES = {
  getTypeParser: ((oid: number, format?: 'text') =>
    KEPT_AS_TEXT.has(oid) ? keepText : (pg.types.getTypeParser(oid, format) as (value: string) => unknown)) as typeof pg.types.getTypeParser,
};

/**
 * A drizzle transaction handle on a connection whose transaction we opened ourselves: the same
 * query surface as db.transaction's (a nested `transaction()` is a savepoint), one per pooled
 * connection.
 */
const handles = new WeakMap<pg.PoolClient, Tx>();
const dialect = new PgDialect();
function transactionOn(db: Db, client: pg.PoolClient): Tx {
  let tx = handles.get(client);
  if (!tx) {
    const relational = db._.schema ? { fullSchema: db._.fullSchema, schema: db._.schema, tableNamesMap: db._.tableNamesMap } : undefined;
    const session = new NodePgSession(client, dialect, relational, {});
    tx = new NodePgTransaction(dialect, session, relational) as unknown as Tx;
    handles.set(client, tx);
  }
  return tx;
}
