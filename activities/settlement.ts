// Terminal transitions and the ledger settle in one transaction: a task is never terminal
// with its reservation open, and never settled without being terminal.
import type { Tx } from '../db/client';
import type { FenceToken } from '../db/fence';
import { settleReservation } from '../db/ledger';
import { and, eq, notInArray, sql } from 'drizzle-orm';
import { taskAttempt, type generationTask } from '../db/schema';
import { casTaskStatus } from '../db/tasks';
import { redactText } from '../observability/redact';
import type { TaskStatus } from '../domain/states';

type TaskRow = typeof generationTask.$inferSelect;

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
const FINISHED_ATTEMPT_STATES = ['SUCCEEDED', 'FAILED', 'CANCELLED', 'REJECTED'];

/**
 * CAS the locked task to a terminal state, close its active attempt (so it holds no provider slot,
 * activities/provider-guard.ts) and close its reservation. False when the CAS lost.
 */
export async function finishTask(tx: Tx, token: FenceToken, task: TaskRow, args: FinishArgs): Promise<boolean> {
  const version = await casTaskStatus(tx, token, {
    taskId: task.task_id,
    from: task.status as TaskStatus,
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
  if (version === null) return false;
  if (task.active_attempt_id) {
    await tx
      .update(taskAttempt)
      .set({ submit_state: args.to, status_version: sql`${taskAttempt.status_version} + 1` })
      .where(and(eq(taskAttempt.attempt_id, task.active_attempt_id), notInArray(taskAttempt.submit_state, FINISHED_ATTEMPT_STATES)));
  }
  await settleReservation(tx, token, {
    tenantId: task.tenant_id,
    taskId: task.task_id,
    reserved: task.reserved_amount,
    charge: args.charge,
    note: `${args.to.toLowerCase()} via ${args.sourceEvent}`,
  });
  return true;
}
