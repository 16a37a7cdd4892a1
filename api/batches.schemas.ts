// POST /v1/tasks/batch's wire shapes (docs/decisions/0076-task-batches.md).
import { z } from 'zod';
import { problemDocument } from './problem';
import { createTaskBody, idempotencyKeyHeader, taskStatus } from './tasks.schemas';

/** Items in one batch at most. */
export const BATCH_MAX_ITEMS = 1_000;

export const batchItem = z
  .strictObject({
    idempotency_key: idempotencyKeyHeader.describe("The item's own key: the same semantics as a create's Idempotency-Key, in the same key space"),
    request: createTaskBody,
  })
  .meta({ id: 'BatchItem' });

export const createBatchBody = z
  .strictObject({ items: z.array(batchItem).min(1).max(BATCH_MAX_ITEMS) })
  .describe('Up to 1,000 creates; each item is validated on its own, so an invalid item is refused alone')
  .meta({ id: 'CreateBatchRequest' });

/**
 * What the handler parses first: the envelope. Each item is then parsed with `batchItem` on its
 * own, so one bad item is that item's 400, not the request's.
 */
export const batchEnvelope = z.strictObject({ items: z.array(z.unknown()).min(1).max(BATCH_MAX_ITEMS) });

export const batchItemResult = z
  .object({
    index: z.int().min(0).describe("The item's place in `items`"),
    idempotency_key: z.string().nullable().describe("The item's key (null when the item had none)"),
    status: z
      .int()
      .describe(
        '202: the task is accepted (task_id). 400/402/422: refused, and final (a retry of the batch answers the same). 429/503: not attempted (a retry of the batch with its Idempotency-Key attempts it)',
      ),
    task_id: z.uuid().optional(),
    task_status: taskStatus.optional(),
    replayed: z.boolean().optional().describe('true: a task created earlier under this item key (not by this batch)'),
    problem: problemDocument.optional(),
  })
  .meta({ id: 'BatchItemResult' });
export type BatchItemResult = z.infer<typeof batchItemResult>;

export const batchAnswer = z
  .object({
    batch_id: z.uuid(),
    complete: z
      .boolean()
      .describe('true: every item has its final result; false: some are 429/503 (not attempted): retry the request with the same Idempotency-Key'),
    accepted: z.int().min(0),
    refused: z.int().min(0),
    not_attempted: z.int().min(0),
    items: z.array(batchItemResult),
  })
  .meta({ id: 'BatchAnswer' });
export type BatchAnswer = z.infer<typeof batchAnswer>;
