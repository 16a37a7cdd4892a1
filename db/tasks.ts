// Compare-and-set on a task's status (docs/design.md §3): the only way a task changes state.
// Each successful CAS writes one task_transition row, in the same statement.
import { randomUUID } from 'node:crypto';
import { and, eq, lte, sql, type SQL } from 'drizzle-orm';
import type { TaskStatus } from '../domain/states';
import { isTerminal } from '../domain/states';
import { canTransition, decide, type TaskEvent } from '../domain/task-machine';
import type { DbOrTx } from './client';
import type { FenceToken } from './fence';
import { generationTask, taskTransition, type TaskRow } from './schema';
import { releaseTaskSlots, transitionFreesSlot } from './slot-queue';

export class InvalidTransitionError extends Error {
  constructor(
    readonly from: TaskStatus,
    readonly to: TaskStatus,
  ) {
    super(`transition ${from} → ${to} is not allowed`);
    this.name = 'InvalidTransitionError';
  }
}

export interface TaskTransitionInput {
  readonly taskId: string;
  readonly from: TaskStatus;
  readonly expectedVersion: number;
  readonly to: TaskStatus;
  /** What caused it: 'submit.accepted', 'inbox:<inbox_id>', 'api.cancel', … */
  readonly sourceEvent: string;
  /** Who: 'workflow', 'api', 'operator:<name>', 'relay'. */
  readonly actor: string;
  readonly attemptId?: string | null;
  readonly detail?: Record<string, unknown>;
  readonly set?: {
    readonly activeAttemptId?: string;
    /** The provider and model of the active attempt (set with it). */
    readonly provider?: { readonly name: string; readonly model: string };
    readonly failureCode?: string;
    readonly failureMessage?: string;
    readonly settledAmount?: string;
    readonly cancelRequestedAt?: Date;
    /** The media step's failure count (docs/design.md §5 "Bounds"): set to 0 as the task enters PROCESSING_MEDIA. */
    readonly mediaFailures?: number;
  };
}

/**
 * CAS the task from (from, expectedVersion) to `to` under the fence token. Returns the new
 * version, or null when another writer got there first (re-read and decide again).
 * Call holdFence(tx, token) earlier in the same transaction.
 */
export async function casTaskStatus(tx: DbOrTx, token: FenceToken, input: TaskTransitionInput): Promise<number | null> {
  const row = await casTaskStatusRow(tx, token, input);
  return row === null ? null : row.status_version;
}

/**
 * casTaskStatus that returns the task row as the CAS left it (null when the CAS lost), for a
 * caller that would otherwise read the task again after moving it.
 */
export async function casTaskStatusRow(tx: DbOrTx, token: FenceToken, input: TaskTransitionInput): Promise<TaskRow | null> {
  if (!canTransition(input.from, input.to)) throw new InvalidTransitionError(input.from, input.to);
  const set = input.set ?? {};
  const moved = tx.$with('moved').as(
    tx
      .update(generationTask)
      .set({
        status: input.to,
        status_version: sql`${generationTask.status_version} + 1`,
        home_region: token.region,
        write_epoch: token.epoch,
        updated_at: sql`now()`,
        ...(isTerminal(input.to) ? { terminal_at: sql`now()` } : {}),
        ...(set.activeAttemptId !== undefined ? { active_attempt_id: set.activeAttemptId } : {}),
        ...(set.provider !== undefined ? { provider: set.provider.name, provider_model: set.provider.model } : {}),
        ...(set.failureCode !== undefined ? { failure_code: set.failureCode } : {}),
        ...(set.failureMessage !== undefined ? { failure_message: set.failureMessage.slice(0, 2000) } : {}),
        ...(set.settledAmount !== undefined ? { settled_amount: set.settledAmount } : {}),
        ...(set.cancelRequestedAt !== undefined ? { cancel_requested_at: set.cancelRequestedAt } : {}),
        ...(set.mediaFailures !== undefined ? { media_failures: set.mediaFailures } : {}),
      })
      .where(
        and(
          eq(generationTask.task_id, input.taskId),
          eq(generationTask.status, input.from),
          eq(generationTask.status_version, input.expectedVersion),
          // A stale epoch never overwrites a newer one (docs/design.md §3).
          lte(generationTask.write_epoch, token.epoch),
        ),
      )
      .returning(),
  );
  // The transition row is selected from the CAS's own output, in the same statement: a CAS that
  // matched nothing writes no transition, and a move costs one round trip (docs/performance.md
  // "A transition in one statement"). The query does not read `logged`; a data-modifying WITH
  // runs all the same. The triggers on task_transition fire at the statement's end and see the
  // moved task row (its webhook event is frozen from it, docs/decisions/0018-tenant-webhooks.md).
  const logged = tx.$with('logged', { id: taskTransition.transition_id }).as(sql`
    INSERT INTO ${taskTransition}
      (task_id, from_status, to_status, from_version, to_version, source_event, actor, attempt_id, detail, region, write_epoch)
    SELECT ${moved.task_id}, ${input.from}, ${moved.status}, ${input.expectedVersion}, ${moved.status_version}, ${input.sourceEvent},
      ${input.actor}, ${input.attemptId ?? null}, ${input.detail === undefined ? null : JSON.stringify(input.detail)}, ${moved.home_region}, ${moved.write_epoch}
    FROM ${moved}
    RETURNING ${taskTransition.transition_id}`);
  const [row] = await tx.with(moved, logged).select().from(moved);
  if (!row) return null;
  // Out of the slot-holding states: the task's slot (or its place in the queue) goes to the
  // next waiter in this same transaction (docs/providers.md "The slot queue").
  if (transitionFreesSlot(input.from, input.to)) await releaseTaskSlots(tx, input.taskId, new Date());
  return row;
}

/**
 * The creating statement's first transition of a task (version 0, db/task-admission.ts),
 * inserted for each row of `gate` (the task row that statement just wrote, or none).
 */
export function taskCreatedTransitionInsert(gate: SQL, token: FenceToken, taskId: string, actor: string): SQL {
  return sql`INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, region, write_epoch)
    SELECT ${taskId}::uuid, NULL, 'QUEUED', NULL::bigint, 0, 'api.create', ${actor}::text, ${token.region}::text, ${token.epoch}::bigint
    FROM ${gate}`;
}

/** Locks and returns the task row (serialises writers of one task inside a transaction). */
export async function lockTask(tx: DbOrTx, taskId: string) {
  const [row] = await tx.select().from(generationTask).where(eq(generationTask.task_id, taskId)).for('update');
  return row ?? null;
}

export const newId = (): string => randomUUID();

/**
 * Decides `event` for a task row locked in this transaction and CASes the move, if the state
 * machine makes one. Returns the new status, or null when the event changes nothing.
 */
export async function applyTaskEvent(
  tx: DbOrTx,
  token: FenceToken,
  task: TaskRow,
  event: TaskEvent,
  meta: Pick<TaskTransitionInput, 'sourceEvent' | 'actor' | 'attemptId' | 'detail' | 'set'>,
): Promise<TaskStatus | null> {
  const from = task.status;
  const d = decide(from, event);
  if (d.kind !== 'move') return null;
  const version = await casTaskStatus(tx, token, { taskId: task.task_id, from, expectedVersion: task.status_version, to: d.to, ...meta });
  return version === null ? null : d.to;
}
