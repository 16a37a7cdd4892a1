// An output's end of life: DELETE /v1/tasks/:id/output and the retention job remove a task's
// objects (video and thumbnail) from wherever they are, then mark the asset rows deleted. The
// rows, the task, its transitions and its ledger stay: they are the record (docs/design.md §5).
import { and, eq, inArray, isNull, sql } from 'drizzle-orm';
import { isTerminal, TERMINAL_TASK_STATES } from '../domain/states';
import type { Db } from '../db/client';
import { holdFence, type FenceToken } from '../db/fence';
import { holdFenceForFacts, ModePausedError } from '../db/modes';
import { asset, generationTask, tenant } from '../db/schema';
import type { ObjectStorage } from './s3';
import type { ReconcileFinding, ReconcileReport } from '../domain/reconcile-report';
import { recordAudit } from '../db/audit';

export interface OutputStores {
  readonly storage: ObjectStorage;
  readonly fallbackStorage?: ObjectStorage | null;
}

export type DeleteOutcome =
  | { readonly kind: 'deleted'; readonly deletedAt: Date; readonly keys: string[] }
  /** Deleted before (a repeated DELETE): the same answer, the objects removed again if any came back. */
  | { readonly kind: 'already-deleted'; readonly deletedAt: Date; readonly keys: string[] }
  | { readonly kind: 'no-task' }
  /** The task has no output to delete: it did not succeed, or has not finished. */
  | { readonly kind: 'no-output'; readonly reason: string };

/** Stores the object may be in: its row's location first, then the other (a copy-back in flight). */
const storesFor = (stores: OutputStores, location: string): ObjectStorage[] => {
  const all = [stores.storage, ...(stores.fallbackStorage ? [stores.fallbackStorage] : [])];
  return location === 'fallback' ? all.reverse() : all;
};

/**
 * Removes a task's output objects and marks its assets deleted, audited. `tenantId` scopes the
 * lookup (another tenant's task is 'no-task'); null is the retention job's all-tenant access.
 * Objects go first: if that fails nothing is written and the caller may retry; a repeated call
 * is idempotent.
 */
export async function deleteTaskOutput(
  db: Db,
  stores: OutputStores,
  token: FenceToken,
  args: { taskId: string; tenantId: string | null; actor: string; reason: string; now: Date },
): Promise<DeleteOutcome> {
  const [task] = await db
    .select()
    .from(generationTask)
    .where(args.tenantId ? and(eq(generationTask.task_id, args.taskId), eq(generationTask.tenant_id, args.tenantId)) : eq(generationTask.task_id, args.taskId));
  if (!task) return { kind: 'no-task' };
  const assets = await db.select().from(asset).where(eq(asset.task_id, task.task_id));
  const video = assets.find((a) => a.kind === 'video');
  // Any ended task's stored video can go: a FAILED one may hold the bytes the media step refused.
  if (!isTerminal(task.status) || !video) {
    return {
      kind: 'no-output',
      reason: isTerminal(task.status) ? 'the task has no stored output' : `the task is ${task.status}; its output can be deleted once it has ended`,
    };
  }
  const keys = assets.map((a) => a.object_key);
  // The objects go before the rows are marked, and cannot come back: the mode is read fresh first
  // (the API's admission read is cached), so a delete that begins after `mode set` has returned
  // deletes nothing in a mode that pauses changes (ModePausedError, nothing touched). One that
  // passed this check finishes and records what it did, whatever the mode meanwhile: the share
  // lock is not held across the S3 calls (`mode set`, and every write behind it, would wait on S3).
  await db.transaction((tx) => holdFenceForFacts(tx, token, 'cancel'));
  for (const a of assets) {
    const [home, ...others] = storesFor(stores, a.location);
    // The row's own store must take the delete; the other one is tidied if it answers.
    await home!.delete(a.object_key);
    for (const other of others) await other.delete(a.object_key).catch(() => undefined);
  }
  if (video.deleted_at) return { kind: 'already-deleted', deletedAt: video.deleted_at, keys };

  const late: { object_key: string; location: string }[] = [];
  const deletedAt = await db.transaction(async (tx) => {
    // The region and epoch only: the objects are gone, and the rows must say so.
    await holdFence(tx, token);
    // The video row first: a thumbnail being recorded (activities/thumbnail.ts) holds it, and
    // the UPDATE below, a statement after the wait, then sees that thumbnail's row too.
    await tx.select({ id: asset.asset_id }).from(asset).where(eq(asset.asset_id, video.asset_id)).for('update');
    const marked = await tx
      .update(asset)
      .set({ deleted_at: args.now })
      .where(and(eq(asset.task_id, task.task_id), isNull(asset.deleted_at)))
      .returning({ id: asset.asset_id, object_key: asset.object_key, location: asset.location });
    if (marked.length === 0) return null;
    late.push(...marked.filter((m) => !keys.includes(m.object_key)));
    await recordAudit(tx, {
      actor: args.actor,
      action: 'output.delete',
      targetType: 'task',
      targetId: task.task_id,
      reason: args.reason,
      detail: { tenant_id: task.tenant_id, object_keys: keys, locations: assets.map((a) => a.location) },
    });
    return args.now;
  });
  // A thumbnail recorded after the objects above were listed: its object goes too. If its store
  // fails, the caller sees the error and repeats the DELETE, which removes every row's object.
  for (const a of late) {
    keys.push(a.object_key);
    const [home, ...others] = storesFor(stores, a.location);
    await home!.delete(a.object_key);
    for (const other of others) await other.delete(a.object_key).catch(() => undefined);
  }
  if (!deletedAt) {
    const [again] = await db
      .select()
      .from(asset)
      .where(and(eq(asset.task_id, task.task_id), eq(asset.kind, 'video')));
    return { kind: 'already-deleted', deletedAt: again?.deleted_at ?? args.now, keys };
  }
  return { kind: 'deleted', deletedAt, keys };
}

/**
 * Output retention: the stored videos (a FAILED task's too) of tasks that ended more than their tenant's
 * output_retention_days ago (else `defaultDays`; 0 keeps forever) are deleted, oldest first,
 * at most `limit` per run. A dry run lists them.
 */
export async function expireOutputs(
  deps: { db: Db; stores: OutputStores; token: () => Promise<FenceToken>; now: () => Date; defaultDays: number },
  opts: { dryRun: boolean; limit: number },
): Promise<ReconcileReport> {
  const now = deps.now();
  const days = sql<number>`coalesce(${tenant.output_retention_days}, ${deps.defaultDays})`;
  const due = await deps.db
    .select({ taskId: generationTask.task_id, key: asset.object_key, terminalAt: generationTask.terminal_at, days })
    .from(asset)
    .innerJoin(generationTask, eq(generationTask.task_id, asset.task_id))
    .innerJoin(tenant, eq(tenant.tenant_id, generationTask.tenant_id))
    .where(
      and(
        eq(asset.kind, 'video'),
        isNull(asset.deleted_at),
        inArray(generationTask.status, [...TERMINAL_TASK_STATES]),
        sql`${days} > 0`,
        sql`${generationTask.terminal_at} < ${now.toISOString()}::timestamptz - make_interval(days => ${days})`,
      ),
    )
    .orderBy(generationTask.terminal_at)
    .limit(opts.limit);
  const report: { examined: number; findings: ReconcileFinding[]; changed: number } = { examined: due.length, findings: [], changed: 0 };
  for (const row of due) {
    const finding = { kind: 'output_expired', taskId: row.taskId, key: row.key, detail: `ended ${row.terminalAt?.toISOString()}, kept ${row.days} days` };
    if (opts.dryRun) {
      report.findings.push(finding);
      continue;
    }
    let outcome: DeleteOutcome;
    try {
      outcome = await deleteTaskOutput(deps.db, deps.stores, await deps.token(), {
        taskId: row.taskId,
        tenantId: null,
        actor: 'retention',
        reason: `output retention (${row.days} days)`,
        now,
      });
    } catch (err) {
      if (!(err instanceof ModePausedError)) throw err;
      // The mode pauses changes: this one and every later one wait for a run the mode allows.
      report.findings.push({ ...finding, detail: `not deleted: ${err.message}` });
      break;
    }
    report.findings.push(finding);
    if (outcome.kind === 'deleted') report.changed += 1;
  }
  return report;
}
