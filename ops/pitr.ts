// What a point-in-time restore tells the operator (docs/runbooks/pitr.md): the live database,
// damaged by a logical mistake, compared with a copy restored (in an isolated cluster) to the
// moment before it. Both are read in task-id order, a page at a time, and merged, so the
// comparison holds only a page of each in memory.
//
// A task row whose status_version is the same in both but whose state columns differ was
// written outside the compare-and-set (docs/design.md §3: every legitimate change bumps the
// version and appends a task_transition row): that is the mistake, and the repair restores it.
// A task whose version moved on since the restore point progressed legitimately and is kept, as
// is everything created after it. The ledger is append-only (docs/billing.md), so every ledger
// row of the restored copy must still be in the live database; the totals per tenant show what
// was written since.
import { sql, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client';

/** The task columns a legitimate transition changes with its version, compared between the two. */
export const TASK_STATE_COLUMNS = [
  'status',
  'terminal_at',
  'failure_code',
  'failure_message',
  'settled_amount',
  'reserved_amount',
  'active_attempt_id',
  'cancel_requested_at',
] as const;
export type TaskStateColumn = (typeof TASK_STATE_COLUMNS)[number];
export type TaskState = Record<TaskStateColumn, string | null>;

interface TaskRow extends TaskState {
  readonly task_id: string;
  readonly tenant_id: string;
  readonly status_version: string;
}

export interface RewrittenTask {
  readonly task_id: string;
  readonly tenant_id: string;
  readonly status_version: number;
  /** The columns that differ: live (damaged) and restored values. */
  readonly live: Partial<TaskState>;
  readonly restored: Partial<TaskState>;
  /** to_status of the live database's own task_transition row at this version (null: none). */
  readonly recorded_status: string | null;
}

export interface DeletedApiKey {
  readonly key_id: string;
  readonly tenant_id: string;
  readonly key_prefix: string;
  readonly key_hash: string;
  readonly created_at: string;
  readonly revoked_at: string | null;
}

export interface PitrDiff {
  /** The last transaction the restored copy replayed (pg_last_xact_replay_timestamp) or null. */
  readonly restored_through: string | null;
  readonly tasks_by_status: { readonly restored: Record<string, number>; readonly live: Record<string, number> };
  readonly tasks: {
    readonly compared: number;
    /** Created after the restore point: kept. */
    readonly only_live: number;
    /** In the restored copy, gone from the live database (deleted). */
    readonly only_restored: string[];
    /** The version moved on since the restore point (legitimate progress): kept. */
    readonly progressed: number;
    /** The live version is behind the restored one: impossible through the CAS. */
    readonly regressed: string[];
    /** Same version, other state: written outside the CAS (the mistake). */
    readonly rewritten: RewrittenTask[];
    /**
     * Live tasks whose status is not what their own task_transition row at their version says,
     * whatever the copy holds: also written outside the CAS. Those not in `rewritten` changed
     * between the restore point and the mistake, so this copy cannot repair them: restore one
     * nearer the mistake (docs/runbooks/pitr.md, recovery_target_xid).
     */
    readonly off_record: { task_id: string; status: string; status_version: number; recorded_status: string | null }[];
  };
  readonly ledger: {
    /** tenant → entry type → sum, in each database. */
    readonly restored: Record<string, Record<string, string>>;
    readonly live: Record<string, Record<string, string>>;
    /** Ledger rows (business keys) of the restored copy missing from the live one: must be 0. */
    readonly missing_in_live: number;
    /** Written after the restore point. */
    readonly only_live: number;
  };
  /** API keys of the restored copy gone from the live database. */
  readonly deleted_api_keys: DeletedApiKey[];
}

const PAGE = 5_000;

/** Rows of `query(after)` page by page, in the order of their key. */
async function* pages<T extends object>(db: Db, key: keyof T & string, query: (after: string | null) => SQL): AsyncGenerator<T> {
  let after: string | null = null;
  for (;;) {
    const rows = (await db.execute(query(after))).rows as T[];
    for (const row of rows) yield row;
    const last = rows[rows.length - 1];
    if (rows.length < PAGE || last === undefined) return;
    after = String(last[key]);
  }
}

/** Merges two key-ordered streams: each step yields the row of one side, the other, or both. */
async function* mergeByKey<T>(a: AsyncGenerator<T>, b: AsyncGenerator<T>, key: (row: T) => string): AsyncGenerator<[T | null, T | null]> {
  let x = await a.next();
  let y = await b.next();
  while (!x.done || !y.done) {
    if (y.done || (!x.done && key(x.value) < key(y.value))) {
      yield [x.value as T, null];
      x = await a.next();
    } else if (x.done || key(y.value) < key(x.value)) {
      yield [null, y.value];
      y = await b.next();
    } else {
      yield [x.value, y.value];
      x = await a.next();
      y = await b.next();
    }
  }
}

const taskPages = (db: Db) =>
  pages<TaskRow>(
    db,
    'task_id',
    (after) => sql`
    SELECT task_id::text, tenant_id::text, status_version::text, status, terminal_at::text, failure_code, failure_message,
           settled_amount::text, reserved_amount::text, active_attempt_id::text, cancel_requested_at::text
    FROM generation_task ${after === null ? sql`` : sql`WHERE task_id > ${after}::uuid`} ORDER BY task_id LIMIT ${PAGE}`,
  );

const ledgerKeyPages = (db: Db) =>
  pages<{ business_key: string }>(
    db,
    'business_key',
    (after) => sql`
    SELECT business_key FROM credit_ledger ${after === null ? sql`` : sql`WHERE business_key COLLATE "C" > ${after}`} ORDER BY business_key COLLATE "C" LIMIT ${PAGE}`,
  );

async function byStatus(db: Db): Promise<Record<string, number>> {
  const { rows } = await db.execute(sql`SELECT status, count(*)::int AS n FROM generation_task GROUP BY status ORDER BY status`);
  return Object.fromEntries((rows as { status: string; n: number }[]).map((r) => [r.status, r.n]));
}

async function ledgerTotals(db: Db): Promise<Record<string, Record<string, string>>> {
  const { rows } = await db.execute(sql`SELECT tenant_id::text, entry_type, sum(amount)::text AS total FROM credit_ledger GROUP BY 1, 2 ORDER BY 1, 2`);
  const out: Record<string, Record<string, string>> = {};
  for (const r of rows as { tenant_id: string; entry_type: string; total: string }[]) (out[r.tenant_id] ??= {})[r.entry_type] = r.total;
  return out;
}

async function recordedStatus(db: Db, taskId: string, version: number): Promise<string | null> {
  const { rows } = await db.execute(sql`SELECT to_status FROM task_transition WHERE task_id = ${taskId}::uuid AND to_version = ${version}`);
  return (rows[0] as { to_status: string } | undefined)?.to_status ?? null;
}

function changedColumns(live: TaskRow, restored: TaskRow): { live: Partial<TaskState>; restored: Partial<TaskState> } | null {
  const l: Partial<TaskState> = {};
  const r: Partial<TaskState> = {};
  for (const c of TASK_STATE_COLUMNS) {
    if (live[c] !== restored[c]) {
      l[c] = live[c];
      r[c] = restored[c];
    }
  }
  return Object.keys(l).length === 0 ? null : { live: l, restored: r };
}

/** The restored copy is another server than the live one, restored from it (same system identifier). */
export class NotARestoredCopyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NotARestoredCopyError';
  }
}

async function assertRestoredCopy(live: Db, restored: Db): Promise<void> {
  const who = async (db: Db) =>
    (
      await db.execute(sql`
      SELECT (SELECT system_identifier::text FROM pg_control_system()) AS system, pg_postmaster_start_time()::text AS started,
             coalesce(inet_server_port(), 0) AS port, current_database() AS db, pg_is_in_recovery() AS recovering`)
    ).rows[0] as {
      system: string;
      started: string;
      port: number;
      db: string;
      recovering: boolean;
    };
  const [l, r] = [await who(live), await who(restored)];
  if (l.system === r.system && l.started === r.started && l.port === r.port && l.db === r.db)
    throw new NotARestoredCopyError('--restored names the live database itself');
  if (l.system !== r.system) throw new NotARestoredCopyError('--restored is not a copy of this database (another system identifier)');
  if (r.recovering) throw new NotARestoredCopyError('--restored is still in recovery: wait until it has reached its target and been promoted');
}

/** Compares the live database with a point-in-time restored copy of it. Reads only. */
export async function pitrDiff(live: Db, restored: Db): Promise<PitrDiff> {
  await assertRestoredCopy(live, restored);
  // Business keys compare byte-wise on both sides (COLLATE "C"), as the merge does.
  const key = (r: { business_key: string }) => r.business_key;
  const { rows: offRecord } = await live.execute(sql`
    SELECT t.task_id::text, t.status, t.status_version::int, tr.to_status AS recorded_status
    FROM generation_task t LEFT JOIN task_transition tr ON tr.task_id = t.task_id AND tr.to_version = t.status_version
    WHERE tr.to_status IS DISTINCT FROM t.status ORDER BY t.task_id`);
  const tasks = {
    compared: 0,
    only_live: 0,
    only_restored: [] as string[],
    progressed: 0,
    regressed: [] as string[],
    rewritten: [] as RewrittenTask[],
    off_record: offRecord as PitrDiff['tasks']['off_record'],
  };
  for await (const [l, r] of mergeByKey(taskPages(live), taskPages(restored), (t) => t.task_id)) {
    if (l && !r) tasks.only_live += 1;
    else if (!l && r) tasks.only_restored.push(r.task_id);
    else if (l && r) {
      tasks.compared += 1;
      const lv = Number(l.status_version);
      const rv = Number(r.status_version);
      if (lv > rv) tasks.progressed += 1;
      else if (lv < rv) tasks.regressed.push(l.task_id);
      else {
        const changed = changedColumns(l, r);
        if (changed)
          tasks.rewritten.push({
            task_id: l.task_id,
            tenant_id: l.tenant_id,
            status_version: lv,
            ...changed,
            recorded_status: await recordedStatus(live, l.task_id, lv),
          });
      }
    }
  }
  let missingInLive = 0;
  let onlyLive = 0;
  for await (const [l, r] of mergeByKey(ledgerKeyPages(live), ledgerKeyPages(restored), key)) {
    if (l && !r) onlyLive += 1;
    else if (!l && r) missingInLive += 1;
  }
  const liveKeys = new Set(((await live.execute(sql`SELECT key_id::text AS id FROM api_key`)).rows as { id: string }[]).map((k) => k.id));
  const { rows: restoredKeys } = await restored.execute(sql`
    SELECT key_id::text, tenant_id::text, key_prefix, key_hash, created_at::text, revoked_at::text FROM api_key ORDER BY key_id`);
  const { rows: through } = await restored.execute(sql`SELECT pg_last_xact_replay_timestamp()::text AS t`);
  return {
    restored_through: (through[0] as { t: string | null }).t,
    tasks_by_status: { restored: await byStatus(restored), live: await byStatus(live) },
    tasks,
    ledger: { restored: await ledgerTotals(restored), live: await ledgerTotals(live), missing_in_live: missingInLive, only_live: onlyLive },
    deleted_api_keys: (restoredKeys as unknown as DeletedApiKey[]).filter((k) => !liveKeys.has(k.key_id)),
  };
}
