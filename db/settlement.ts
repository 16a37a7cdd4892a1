// Terminal transitions and the ledger settle in one transaction: a task is never terminal
// with its reservation open, and never settled without being terminal.
import type { AttemptState, TaskStatus } from '../domain/states';
import { redactText } from '../domain/redact-text';
import { casAttempt } from './attempts';
import type { Tx } from './client';
import type { FenceToken } from './fence';
import { settleReservation } from './ledger';
import type { TaskRow } from './schema';
import { casTaskStatusRow } from './tasks';

export interface FinishArgs {
  readonly to: Extract<TaskStatus, 'SUCCEEDED' | 'FAILED' | 'CANCELLED'>;
  /** Credits charged; the rest of the reservation is released. '0' releases everything. */
  readonly charge: string;
  readonly sourceEvent: string;
  readonly actor: string;
  readonly attemptId?: string | null;
  readonly failureCode?: string;
  readonly failureMessage?: string;
  readonly detail?: Record<string, unknown>;
}

/** A failure the workflow records with nothing charged: the whole reservation is released. */
export function failedUncharged(sourceEvent: string, failureCode: string, failureMessage: string, attemptId?: string): FinishArgs {
  return { to: 'FAILED', charge: '0', sourceEvent, actor: 'workflow', failureCode, failureMessage, ...(attemptId ? { attemptId } : {}) };
}

/** Attempt states that are an end in themselves; any other attempt of a finished task is closed. */
const FINISHED_ATTEMPT_STATES: readonly AttemptState[] = ['SUCCEEDED', 'FAILED', 'CANCELLED', 'REJECTED'];

/**
 * CAS the locked task to a terminal state, close its active attempt (so it holds no provider slot,
 * db/slot-queue.ts) and close its reservation. False when the CAS lost.
 */
export async function finishTask(tx: Tx, token: FenceToken, task: TaskRow, args: FinishArgs): Promise<boolean> {
  return (await finishTaskRow(tx, token, task, args)) !== null;
}

/** finishTask that returns the finished task row (null when the CAS lost), for a caller that would read it again. */
export async function finishTaskRow(tx: Tx, token: FenceToken, task: TaskRow, args: FinishArgs): Promise<TaskRow | null> {
  const finished = await casTaskStatusRow(tx, token, {
    taskId: task.task_id,
    from: task.status,
    expectedVersion: task.status_version,
    to: args.to,
    sourceEvent: args.sourceEvent,
    actor: args.actor,
    attemptId: args.attemptId ?? task.active_attempt_id,
    detail: { charge: args.charge, ...(args.detail ?? {}) },
    set: {
      settledAmount: args.charge,
      ...(args.failureCode ? { failureCode: args.failureCode } : {}),
      // A failure message often quotes a tool's or provider's error text: never a URL's signature or a key.
      ...(args.failureMessage ? { failureMessage: redactText(args.failureMessage) } : {}),
    },
  });
  if (finished === null) return null;
  if (task.active_attempt_id) {
    await casAttempt(tx, task.active_attempt_id, { notFrom: FINISHED_ATTEMPT_STATES }, { submit_state: args.to });
  }
  await settleReservation(tx, token, {
    tenantId: task.tenant_id,
    taskId: task.task_id,
    reserved: task.reserved_amount,
    charge: args.charge,
    note: `${args.to.toLowerCase()} via ${args.sourceEvent}`,
  });
  return finished;
}
