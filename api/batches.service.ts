// POST /v1/tasks/batch (docs/decisions/0076-task-batches.md): up to 1,000 creates, each under its
// own item key, admitted a chunk at a time. A chunk is one transaction: its tasks (each in a
// savepoint, so one refused item rolls back alone) and the results of its items commit together.
// A stored result is final and answers every retry of the batch; an item not attempted (over the
// tenant's create rate, or its chunk could not commit: 503) is not stored, and a retry of the
// batch under the same Idempotency-Key attempts it.
import { createHash, randomUUID } from 'node:crypto';
import type { Db } from '../db/client';
import type { FenceToken } from '../db/fence';
import { lockBatch, openBatch, storedResults, storeResults } from '../db/task-batches';
import type { TaskRow } from '../db/schema';
import { canonicalJson } from '../domain/canonical-json';
import { priceFor, primaryRoute, type HeldRoutes } from '../domain/catalog';
import type { Logger } from '../observability/logger';
import { batchEnvelope, batchItem, type BatchAnswer, type BatchItemResult } from './batches.schemas';
import { HttpProblem, problemDocumentOf, problemFor, problems, zodFieldErrors } from './problem';
import { admissibleModel, admitInTransaction, findByKey, replayOrConflict, type TaskUrlRules } from './tasks.service';
import type { CreateTaskBody } from './tasks.schemas';

export interface BatchDeps {
  readonly db: Db;
  readonly logger: Logger;
  /** One create of the tenant's rate for one item: null when allowed, else its 429 problem. */
  readonly takeCreate: (tenantId: string) => Promise<HttpProblem | null>;
}

export interface BatchArgs {
  readonly tenantId: string;
  readonly idempotencyKey: string;
  readonly body: unknown;
  readonly chunkSize: number;
  readonly defaultDeadlineSeconds: number;
  readonly webhook: TaskUrlRules;
  /** The API key the request came with (usage and budgets per key). */
  readonly apiKeyId: string | null;
  /** The routes held off (the API's cached read, api/admission.ts). */
  readonly heldRoutes: HeldRoutes;
}

export interface BatchOutcome {
  readonly answer: BatchAnswer;
  /** Every result was stored by an earlier request (nothing attempted now). */
  readonly replayed: boolean;
  /** Tasks this request created, for the fast path. */
  readonly created: ReadonlyArray<{ task: TaskRow; outboxEventId: string }>;
  /** The longest Retry-After of the items not attempted (0: none). */
  readonly retryAfterSeconds: number;
}

/** An item that passed its checks, ready for its chunk's transaction. */
interface Prepared {
  readonly index: number;
  readonly key: string;
  readonly body: CreateTaskBody;
  readonly hash: string;
  readonly cost: string;
  readonly provider: string;
  readonly providerModel: string;
}

const hashOf = (value: unknown) => createHash('sha256').update(canonicalJson(value)).digest('hex');

function refused(index: number, key: string | null, p: HttpProblem): BatchItemResult {
  return { index, idempotency_key: key, status: p.status, problem: problemDocumentOf(p) };
}
const accepted = (index: number, key: string, task: TaskRow, replayed: boolean): BatchItemResult => ({
  index,
  idempotency_key: key,
  status: 202,
  task_id: task.task_id,
  task_status: task.status,
  ...(replayed ? { replayed: true } : {}),
});

/** The request as a whole: its envelope, and no item key used twice (else 400, nothing written). */
function parseEnvelope(body: unknown): unknown[] {
  const envelope = batchEnvelope.safeParse(body ?? {});
  if (!envelope.success) throw problems.validation(zodFieldErrors(envelope.error));
  const seen = new Map<string, number>();
  const duplicates = envelope.data.items.flatMap((item, i) => {
    const key = (item as { idempotency_key?: unknown } | null)?.idempotency_key;
    if (typeof key !== 'string') return [];
    const first = seen.get(key);
    if (first === undefined) seen.set(key, i);
    return first === undefined ? [] : [{ field: `items.${i}.idempotency_key`, message: `the same key as items.${first}: one key names one task` }];
  });
  if (duplicates.length > 0) throw problems.validation(duplicates);
  return envelope.data.items;
}

export async function runBatch(deps: BatchDeps, token: FenceToken, a: BatchArgs): Promise<BatchOutcome> {
  const items = parseEnvelope(a.body);
  const batch = await openBatch(deps.db, {
    batchId: randomUUID(),
    tenantId: a.tenantId,
    idempotencyKey: a.idempotencyKey,
    requestHash: hashOf(a.body),
    itemCount: items.length,
  });
  if (batch.requestHash !== hashOf(a.body)) throw problems.idempotencyMismatch();
  const results = new Map<number, BatchItemResult>();
  for (const [n, r] of await storedResults(deps.db, batch.batchId)) results.set(n, r as BatchItemResult);
  const replayed = results.size === items.length;
  const created: Array<{ task: TaskRow; outboxEventId: string }> = [];
  /** Set once an item could not be attempted: it and every item after it wait for a retry. */
  let halted: HttpProblem | null = null;
  const open = items.map((_, i) => i).filter((i) => !results.has(i));
  for (let at = 0; at < open.length; at += a.chunkSize) {
    const chunk = open.slice(at, at + a.chunkSize);
    if (halted) {
      for (const i of chunk) results.set(i, refused(i, keyOf(items[i]), halted));
      continue;
    }
    const decided = new Map<number, BatchItemResult>();
    const ready: Prepared[] = [];
    for (const i of chunk) {
      const item = await prepare(deps.db, a, i, items[i]);
      if ('status' in item) decided.set(i, item);
      else if (halted) results.set(i, refused(i, item.key, halted));
      else {
        // The tenant's create rate, one point per item (docs/decisions/0076): past it, this item
        // and the rest wait for a retry of the batch.
        halted = await deps.takeCreate(a.tenantId);
        if (halted) results.set(i, refused(i, item.key, halted));
        else ready.push(item);
      }
    }
    try {
      const committed = await admitChunk(deps.db, token, a, batch.batchId, chunk, decided, ready);
      for (const [i, r] of committed.results) results.set(i, r);
      created.push(...committed.created);
    } catch (err) {
      const { problem } = problemFor(err, deps.logger, '/v1/tasks/batch');
      // Only a chunk the service could not take now is left for a retry; anything else is a 500.
      if (problem.status !== 503) throw err;
      halted = problem;
      for (const i of chunk) if (!results.has(i)) results.set(i, refused(i, keyOf(items[i]), problem));
    }
  }
  const all = items.map((_, i) => results.get(i)!);
  const waiting = all.filter((r) => r.status === 429 || r.status === 503);
  return {
    answer: {
      batch_id: batch.batchId,
      complete: waiting.length === 0,
      accepted: all.filter((r) => r.status === 202).length,
      refused: all.length - waiting.length - all.filter((r) => r.status === 202).length,
      not_attempted: waiting.length,
      items: all,
    },
    replayed,
    created,
    retryAfterSeconds: halted ? Number(halted.headers['Retry-After'] ?? 1) : 0,
  };
}

const keyOf = (item: unknown): string | null => {
  const key = (item as { idempotency_key?: unknown } | null)?.idempotency_key;
  return typeof key === 'string' ? key : null;
};

/**
 * One item's checks before any transaction: its shape, then the model and every provider limit
 * (api/tasks.service.ts admissibleModel). A refused item is a final result, unless its key
 * already names a task: then, as for a single create, it is that task's replay (or a 422).
 */
async function prepare(db: Db, a: BatchArgs, index: number, raw: unknown): Promise<Prepared | BatchItemResult> {
  const parsed = batchItem.safeParse(raw);
  if (!parsed.success) return refused(index, keyOf(raw), problems.validation(zodFieldErrors(parsed.error)));
  const { idempotency_key: key, request: body } = parsed.data;
  const hash = hashOf(body);
  try {
    const entry = await admissibleModel(db, a.tenantId, body, a.webhook, a.heldRoutes);
    const first = primaryRoute(entry);
    return { index, key, body, hash, cost: priceFor(entry, body.resolution, body.duration_seconds), provider: first.provider, providerModel: first.model };
  } catch (err) {
    if (!(err instanceof HttpProblem)) throw err;
    const existing = await findByKey(db, a.tenantId, key);
    if (!existing) return refused(index, key, err);
    return settle(index, key, existing, hash);
  }
}

function settle(index: number, key: string, existing: TaskRow, hash: string): BatchItemResult {
  try {
    return accepted(index, key, replayOrConflict(existing, hash).task, true);
  } catch (err) {
    if (err instanceof HttpProblem) return refused(index, key, err);
    throw err;
  }
}

/**
 * One chunk's transaction: under the batch's row lock (a concurrent retry of the same batch
 * waits, then finds the chunk's results stored), each ready item in a savepoint, then every
 * result of the chunk stored. A fence, mode or database refusal throws: nothing of the chunk
 * commits.
 */
async function admitChunk(
  db: Db,
  token: FenceToken,
  a: BatchArgs,
  batchId: string,
  chunk: readonly number[],
  decided: ReadonlyMap<number, BatchItemResult>,
  ready: readonly Prepared[],
) {
  return db.transaction(async (tx) => {
    await lockBatch(tx, batchId);
    const already = await storedResults(tx, batchId, chunk);
    const results = new Map<number, BatchItemResult>();
    for (const [i, r] of already) results.set(i, r as BatchItemResult);
    const fresh = new Map<number, Record<string, unknown>>();
    const created: Array<{ task: TaskRow; outboxEventId: string }> = [];
    for (const [i, r] of decided) if (!already.has(i)) fresh.set(i, r);
    for (const item of ready) {
      if (already.has(item.index)) continue;
      const outboxEventId = randomUUID();
      let result: BatchItemResult;
      try {
        const r = await tx.transaction((sp) =>
          admitInTransaction(sp, token, {
            taskId: randomUUID(),
            outboxEventId,
            tenantId: a.tenantId,
            projectId: item.body.project_id ?? a.tenantId,
            idempotencyKey: item.key,
            apiKeyId: a.apiKeyId,
            requestHash: item.hash,
            request: item.body,
            provider: item.provider,
            providerModel: item.providerModel,
            priority: item.body.priority,
            cost: item.cost,
            deadlineSeconds: item.body.deadline_seconds ?? a.defaultDeadlineSeconds,
            actor: `tenant:${a.tenantId}`,
          }),
        );
        if (r === 'key-taken') {
          const existing = await findByKey(tx, a.tenantId, item.key);
          if (!existing) throw new Error(`item key ${item.key} was taken, yet no task has it`);
          result = settle(item.index, item.key, existing, item.hash);
        } else {
          created.push({ task: r.task, outboxEventId });
          result = accepted(item.index, item.key, r.task, false);
        }
      } catch (err) {
        // An item's own refusal (402: credits or a budget) is its final result; the savepoint rolled it back.
        if (!(err instanceof HttpProblem)) throw err;
        result = refused(item.index, item.key, err);
      }
      fresh.set(item.index, result);
    }
    await storeResults(tx, batchId, fresh);
    for (const [i, r] of fresh) results.set(i, r as BatchItemResult);
    return { results, created };
  });
}
