// The batch create's own facts (docs/decisions/0076-task-batches.md): the batch row under the
// tenant's Idempotency-Key, and each item's final result, stored in the transaction that admitted
// the item's chunk, so a stored result and the task it names commit together or not at all.
import { and, asc, eq, inArray } from 'drizzle-orm';
import type { DbOrTx, Tx } from './client';
import { taskBatch, taskBatchItem } from './schema';

export interface BatchRow {
  readonly batchId: string;
  readonly requestHash: string;
  readonly itemCount: number;
}

/** The batch under (tenant, key): inserted now, or the one an earlier request inserted. */
export async function openBatch(
  db: DbOrTx,
  a: { batchId: string; tenantId: string; idempotencyKey: string; requestHash: string; itemCount: number },
): Promise<BatchRow> {
  await db
    .insert(taskBatch)
    .values({ batch_id: a.batchId, tenant_id: a.tenantId, idempotency_key: a.idempotencyKey, request_hash: a.requestHash, item_count: a.itemCount })
    .onConflictDoNothing({ target: [taskBatch.tenant_id, taskBatch.idempotency_key] });
  const [row] = await db
    .select()
    .from(taskBatch)
    .where(and(eq(taskBatch.tenant_id, a.tenantId), eq(taskBatch.idempotency_key, a.idempotencyKey)));
  if (!row) throw new Error(`task_batch for key ${a.idempotencyKey} vanished after its insert`);
  return { batchId: row.batch_id, requestHash: row.request_hash, itemCount: row.item_count };
}

/** Serialises the requests working on one batch: a chunk's results are decided by one of them. */
export async function lockBatch(tx: Tx, batchId: string): Promise<void> {
  await tx.select({ id: taskBatch.batch_id }).from(taskBatch).where(eq(taskBatch.batch_id, batchId)).for('update');
}

/** The stored results of the batch (all of them, or of the given items), by item number. */
export async function storedResults(db: DbOrTx, batchId: string, itemNos?: readonly number[]): Promise<Map<number, Record<string, unknown>>> {
  const rows = await db
    .select()
    .from(taskBatchItem)
    .where(and(eq(taskBatchItem.batch_id, batchId), itemNos ? inArray(taskBatchItem.item_no, [...itemNos]) : undefined))
    .orderBy(asc(taskBatchItem.item_no));
  return new Map(rows.map((r) => [r.item_no, r.result]));
}

export async function storeResults(tx: Tx, batchId: string, results: ReadonlyMap<number, Record<string, unknown>>): Promise<void> {
  if (results.size === 0) return;
  await tx.insert(taskBatchItem).values([...results].map(([itemNo, result]) => ({ batch_id: batchId, item_no: itemNo, result })));
}
