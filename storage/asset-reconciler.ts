// The asset reconciler (docs/design.md §5, docs/decisions/0029): asset rows against the objects
// in storage. It
//   1. copies outputs rescued to the fallback bucket back to the primary (verified by sha256)
//      and moves the row's location there, then removes the fallback copy;
//   2. checks live rows against their objects: missing, or a sha256 in the object's metadata
//      that is not the row's (checksum mismatch) — reported, never "repaired" by guessing;
//   3. lists both buckets for objects no row accounts for: orphaned. An orphan whose asset was
//      deleted (a DELETE whose object removal failed part way) is removed; other orphans are
//      reported for an operator.
// Safe next to everything else: every change is a compare-and-set on the row under the fence,
// and what it copied is undone when the row changed under it.
import { and, asc, eq, getTableColumns, inArray, isNull, sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { holdFence, type FenceToken } from '../db/fence';
import { asset, generationTask, outputDownload, type StorageLocation } from '../db/schema';
import type { ReconcileFinding } from '../domain/reconcile-report';
import type { ObjectStorage } from './s3';
import { recordAudit } from '../db/audit';

/** The reconcilers' report (reconcilers/types.ts), built up as the checks run. */
interface ReconcileReport {
  examined: number;
  findings: ReconcileFinding[];
  changed: number;
  cursor: Record<string, string> | null;
}

/**
 * Where a run stopped: `copy` the last fallback row copy-back looked at and `rows` the last
 * asset row checked (each created_at and id), `primary` and
 * `fallback` the last object key listed in each bucket. A part whose page came back short has
 * been seen to its end, and starts over next run; when every part has, the pass is complete
 * (cursor null). So with more assets than `limit` every row and object is still reached, a run
 * at a time, instead of the same oldest `limit` each run.
 */
type AssetCursor = { copy?: string; rows?: string; primary?: string; fallback?: string };

export interface AssetReconcilerDeps {
  readonly db: Db;
  readonly storage: ObjectStorage;
  readonly fallbackStorage: ObjectStorage | null;
  readonly token: () => Promise<FenceToken>;
}

const TASK_OF_KEY = /^tenants\/[^/]+\/tasks\/([0-9a-f-]{36})\//i;

export async function reconcileAssets(
  deps: AssetReconcilerDeps,
  opts: { dryRun: boolean; limit: number; cursor?: Readonly<AssetCursor> | null },
): Promise<ReconcileReport> {
  const report: ReconcileReport = { examined: 0, findings: [], changed: 0, cursor: null };
  const from = opts.cursor ?? {};
  const next: AssetCursor = {};
  const copyTo = await copyBack(deps, { ...opts, after: from.copy }, report);
  if (copyTo) next.copy = copyTo;
  const rowsTo = await checkRows(deps, { limit: opts.limit, after: from.rows }, report);
  if (rowsTo) next.rows = rowsTo;
  for (const [location, store] of stores(deps)) {
    const keyTo = await findOrphans(deps, location, store, { ...opts, after: from[location] }, report);
    if (keyTo) next[location] = keyTo;
  }
  report.cursor = Object.keys(next).length > 0 ? next : null;
  return report;
}

/**
 * Runs page after page from the start until every row and object has been looked at once (the
 * cursor comes back null), or a bucket stops answering (the cursor stays where it was: `stalled`).
 * `onPage` hears the running totals after each page but the last. What `ops assets --all` runs.
 */
export async function reconcileAssetsToEnd(
  deps: AssetReconcilerDeps,
  opts: { dryRun: boolean; limit: number },
  onPage: (page: number, sofar: ReconcileReport) => void = () => undefined,
): Promise<ReconcileReport & { pages: number; stalled: boolean }> {
  const total = await reconcileAssets(deps, opts);
  let pages = 1;
  while (total.cursor) {
    onPage(pages, total);
    const next = await reconcileAssets(deps, { ...opts, cursor: total.cursor });
    pages += 1;
    total.examined += next.examined;
    total.changed += next.changed;
    total.findings.push(...next.findings);
    const stalled = JSON.stringify(next.cursor) === JSON.stringify(total.cursor);
    total.cursor = next.cursor;
    if (stalled) return { ...total, pages, stalled: true };
  }
  return { ...total, pages, stalled: false };
}

const stores = (deps: AssetReconcilerDeps): Array<[StorageLocation, ObjectStorage]> => [
  ['primary', deps.storage],
  ...(deps.fallbackStorage ? [['fallback', deps.fallbackStorage] as [StorageLocation, ObjectStorage]] : []),
];

/**
 * Copies the next `limit` fallback rows after `after` back to the primary; returns where to go
 * on, or undefined at the end. A row that could not be copied (its object unreadable, a
 * checksum mismatch) stays in the fallback and is passed over, so rows that fail for good never
 * hold back the ones behind them; the next pass tries them again.
 */
async function copyBack(
  deps: AssetReconcilerDeps,
  opts: { dryRun: boolean; limit: number; after: string | undefined },
  report: ReconcileReport,
): Promise<string | undefined> {
  const fallback = deps.fallbackStorage;
  if (!fallback) return undefined;
  const after = opts.after ? parseRowCursor(opts.after) : null;
  const rows = await deps.db
    .select({ ...getTableColumns(asset), at: rowCursorColumn })
    .from(asset)
    .where(and(eq(asset.location, 'fallback'), isNull(asset.deleted_at), after ? rowsAfter(after) : undefined))
    .orderBy(asc(asset.created_at), asc(asset.asset_id))
    .limit(opts.limit);
  await copyRowsBack(deps, fallback, rows, opts, report);
  const last = rows.at(-1);
  return last && rows.length >= opts.limit ? `${last.at}|${last.asset_id}` : undefined;
}

async function copyRowsBack(
  deps: AssetReconcilerDeps,
  fallback: ObjectStorage,
  rows: ReadonlyArray<typeof asset.$inferSelect>,
  opts: { dryRun: boolean },
  report: ReconcileReport,
): Promise<void> {
  for (const row of rows) {
    report.examined += 1;
    const base = { taskId: row.task_id, key: row.object_key };
    if (opts.dryRun) {
      report.findings.push({ kind: 'in_fallback', ...base, detail: `${row.kind} in the fallback bucket ${row.bucket}; would copy back` });
      continue;
    }
    let outcome: 'copied' | 'checksum-mismatch';
    try {
      const there = await deps.storage.head(row.object_key);
      // Copied before (the row update failed): the object is verified by its metadata.
      outcome =
        there?.sha256 === row.sha256 ? 'copied' : await deps.storage.copyFrom(fallback, row.object_key, { contentType: row.content_type, sha256: row.sha256 });
    } catch (err) {
      report.findings.push({ kind: 'copy_back_failed', ...base, detail: (err as Error).message });
      continue;
    }
    if (outcome === 'checksum-mismatch') {
      report.findings.push({ kind: 'checksum_mismatch', ...base, detail: "the fallback copy does not hash to the row's sha256; left in place" });
      continue;
    }
    const moved = await deps.db.transaction(async (tx) => {
      await holdFence(tx, await deps.token());
      const updated = await tx
        .update(asset)
        .set({ location: 'primary', bucket: deps.storage.bucket })
        .where(and(eq(asset.asset_id, row.asset_id), eq(asset.location, 'fallback'), isNull(asset.deleted_at)))
        .returning({ id: asset.asset_id });
      if (updated.length === 0) return false;
      await recordAudit(tx, {
        actor: 'reconciler:assets',
        action: 'asset.copy-back',
        targetType: 'task',
        targetId: row.task_id,
        reason: 'primary bucket reachable again',
        detail: { asset_id: row.asset_id, object_key: row.object_key, from_bucket: row.bucket, to_bucket: deps.storage.bucket, sha256: row.sha256 },
      });
      return true;
    });
    if (!moved) {
      // Deleted (or moved by another run) meanwhile: take back what this run copied.
      const [now] = await deps.db.select().from(asset).where(eq(asset.asset_id, row.asset_id));
      if (now?.deleted_at) await deps.storage.delete(row.object_key);
      continue;
    }
    await fallback.delete(row.object_key).catch(() => undefined);
    report.changed += 1;
    report.findings.push({ kind: 'copied_back', ...base, detail: `${row.kind} copied to ${deps.storage.bucket}` });
  }
}

/**
 * Checks the next `limit` live rows after `after`; returns where to go on, or undefined at the
 * end. The cursor carries created_at to the microsecond as Postgres has it (a JS Date keeps
 * milliseconds, and a page of rows from one millisecond would then come back for ever). A row
 * whose bucket did not answer stops the page there: the next run starts at it, not past it.
 */
async function checkRows(deps: AssetReconcilerDeps, opts: { limit: number; after: string | undefined }, report: ReconcileReport): Promise<string | undefined> {
  const after = opts.after ? parseRowCursor(opts.after) : null;
  const rows = await deps.db
    .select({ ...getTableColumns(asset), at: rowCursorColumn })
    .from(asset)
    .where(and(isNull(asset.deleted_at), after ? rowsAfter(after) : undefined))
    .orderBy(asc(asset.created_at), asc(asset.asset_id))
    .limit(opts.limit);
  const checked = await checkRowObjects(deps, rows, report);
  const last = checked > 0 ? rows[checked - 1] : undefined;
  if (checked < rows.length) return last ? `${last.at}|${last.asset_id}` : opts.after;
  return last && rows.length >= opts.limit ? `${last.at}|${last.asset_id}` : undefined;
}

/** created_at as the cursor carries it: to the microsecond, in UTC. */
const rowCursorColumn = sql<string>`to_char(${asset.created_at} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
const rowsAfter = (after: { createdAt: string; assetId: string }) =>
  sql`(${asset.created_at}, ${asset.asset_id}) > (${after.createdAt}::timestamptz, ${after.assetId}::uuid)`;

function parseRowCursor(cursor: string): { createdAt: string; assetId: string } | null {
  const [createdAt, assetId] = cursor.split('|');
  // A cursor this code did not write starts the pass over.
  return createdAt && assetId && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/.test(createdAt) && /^[0-9a-f-]{36}$/i.test(assetId) ? { createdAt, assetId } : null;
}

/** Checks each row's object; returns how many were checked before a bucket did not answer (all of them when every one did). */
async function checkRowObjects(deps: AssetReconcilerDeps, rows: ReadonlyArray<typeof asset.$inferSelect>, report: ReconcileReport): Promise<number> {
  for (const [i, row] of rows.entries()) {
    report.examined += 1;
    const store = row.location === 'fallback' ? deps.fallbackStorage : deps.storage;
    const base = { taskId: row.task_id, key: row.object_key };
    if (!store) {
      report.findings.push({ kind: 'missing', ...base, detail: 'in the fallback bucket, but no fallback is configured' });
      continue;
    }
    let head;
    try {
      head = await store.head(row.object_key);
    } catch (err) {
      report.findings.push({ kind: 'unreachable', ...base, detail: `${row.location} storage: ${(err as Error).message}` });
      return i;
    }
    if (!head) report.findings.push({ kind: 'missing', ...base, detail: `${row.kind} not in ${row.location} bucket ${store.bucket}` });
    else if (head.sha256 !== row.sha256)
      report.findings.push({ kind: 'checksum_mismatch', ...base, detail: `object sha256 ${head.sha256 ?? '(none)'} is not the row's ${row.sha256}` });
    else if (head.size !== Number(row.size_bytes))
      report.findings.push({ kind: 'checksum_mismatch', ...base, detail: `object is ${head.size} bytes, the row says ${row.size_bytes}` });
  }
  return rows.length;
}

/** Looks at the next `limit` objects after `after`; returns where to go on, or undefined at the end (or when the bucket did not answer: the same page next run). */
async function findOrphans(
  deps: AssetReconcilerDeps,
  location: StorageLocation,
  store: ObjectStorage,
  opts: { dryRun: boolean; limit: number; after: string | undefined },
  report: ReconcileReport,
): Promise<string | undefined> {
  let objects;
  try {
    objects = await store.list('tenants/', { limit: opts.limit, ...(opts.after ? { after: opts.after } : {}) });
  } catch (err) {
    report.findings.push({ kind: 'unreachable', detail: `${location} storage: ${(err as Error).message}` });
    return opts.after;
  }
  if (objects.length === 0) return undefined;
  await classifyObjects(deps, location, store, objects, opts, report);
  return objects.length >= opts.limit ? objects.at(-1)!.key : undefined;
}

async function classifyObjects(
  deps: AssetReconcilerDeps,
  location: StorageLocation,
  store: ObjectStorage,
  objects: ReadonlyArray<{ key: string; size: number }>,
  opts: { dryRun: boolean },
  report: ReconcileReport,
): Promise<void> {
  report.examined += objects.length;
  const keys = objects.map((o) => o.key);
  const rows = await deps.db.select().from(asset).where(inArray(asset.object_key, keys));
  const live = new Map(rows.map((r) => [r.object_key, r]));
  const taskIds = [...new Set(keys.map((k) => TASK_OF_KEY.exec(k)?.[1]).filter((t): t is string => Boolean(t)))];
  const tasks = taskIds.length
    ? await deps.db
        .select({ id: generationTask.task_id, terminal: generationTask.terminal_at })
        .from(generationTask)
        .where(inArray(generationTask.task_id, taskIds))
    : [];
  const running = new Set(tasks.filter((t) => t.terminal === null).map((t) => t.id));
  const downloads = taskIds.length
    ? await deps.db.select({ key: outputDownload.partial_key }).from(outputDownload).where(inArray(outputDownload.task_id, taskIds))
    : [];
  const inFlight = new Set(downloads.map((d) => d.key));
  for (const o of objects) {
    const row = live.get(o.key);
    const taskId = TASK_OF_KEY.exec(o.key)?.[1];
    // A rescue or media step in flight writes before its row: not an orphan yet.
    if (inFlight.has(o.key) || (taskId && running.has(taskId))) continue;
    if (row && !row.deleted_at && row.location === location) continue;
    if (row && !row.deleted_at) {
      // The row lives in the other bucket: a copy left behind. A fallback copy of an object
      // copied back (its removal failed) goes, once the primary answers with the row's object;
      // anything else waits for an operator. A primary that lost the object since (a bucket
      // restore, a lifecycle rule) leaves this copy the only one: kept, and the row is reported
      // missing by checkRows.
      const copyBackLeftover = location === 'fallback' && row.location === 'primary';
      const unverified = copyBackLeftover ? await primaryDiffers(deps, row) : null;
      const stale = copyBackLeftover && unverified === null;
      const fate = stale ? (opts.dryRun ? '; would remove' : '; removed') : unverified ? `; kept: ${unverified}` : '';
      report.findings.push({
        kind: 'orphaned',
        ...(taskId ? { taskId } : {}),
        key: o.key,
        detail: `a stale copy in the ${location} bucket; the row says ${row.location}${fate}`,
      });
      if (stale && !opts.dryRun) {
        await store.delete(o.key);
        report.changed += 1;
      }
      continue;
    }
    if (row?.deleted_at) {
      report.findings.push({
        kind: 'orphaned',
        ...(taskId ? { taskId } : {}),
        key: o.key,
        detail: `the output was deleted at ${row.deleted_at.toISOString()}; ${opts.dryRun ? 'would remove' : 'removed'}`,
      });
      if (!opts.dryRun) {
        await store.delete(o.key);
        report.changed += 1;
      }
      continue;
    }
    report.findings.push({
      kind: 'orphaned',
      ...(taskId ? { taskId } : {}),
      key: o.key,
      detail: `${o.size} bytes in the ${location} bucket with no asset row`,
    });
  }
}

/**
 * Null when the primary holds the row's object (its sha256 and size), else why not: the copy in
 * the fallback may then be the only one.
 */
async function primaryDiffers(deps: AssetReconcilerDeps, row: typeof asset.$inferSelect): Promise<string | null> {
  let head;
  try {
    head = await deps.storage.head(row.object_key);
  } catch (err) {
    return `the primary did not answer (${(err as Error).message})`;
  }
  if (!head) return `the primary bucket ${deps.storage.bucket} does not have it (the only copy)`;
  if (head.sha256 !== row.sha256) return `the primary's object sha256 ${head.sha256 ?? '(none)'} is not the row's`;
  if (head.size !== Number(row.size_bytes)) return `the primary's object is ${head.size} bytes, the row says ${row.size_bytes}`;
  return null;
}
