// Reads the facts a workflow step is decided on. Always from Postgres, never from memory.
import { eq } from 'drizzle-orm';
import type { DbOrTx } from '../db/client';
import { generationTask, taskAttempt } from '../db/schema';
import type { TaskFacts } from '../domain/facts';
import type { TaskStatus } from '../domain/states';
import type { TaskActivityDeps } from './deps';
import { notFound } from './deps';

const WAITING_ON_PROVIDER: readonly TaskStatus[] = ['SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED', 'SUBMIT_UNKNOWN'];

export async function readTaskFacts(db: DbOrTx, taskId: string, now: Date): Promise<TaskFacts> {
  const [row] = await db
    .select({ task: generationTask, attempt: taskAttempt })
    .from(generationTask)
    .leftJoin(taskAttempt, eq(taskAttempt.attempt_id, generationTask.active_attempt_id))
    .where(eq(generationTask.task_id, taskId));
  if (!row) throw notFound(`task ${taskId}`);
  const { task, attempt } = row;
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
    attemptState: attempt?.submit_state ?? null,
    cancelRequested: task.cancel_requested_at !== null,
    pollInMs: waiting && attempt?.next_poll_at ? Math.max(0, attempt.next_poll_at.getTime() - now.getTime()) : null,
    needsAttention: status === 'MANUAL_REVIEW' || status === 'OUTPUT_AT_RISK',
  };
}

export function createFactActivities(deps: TaskActivityDeps) {
  return {
    /** The task's current facts. */
    async getTaskFacts(taskId: string): Promise<TaskFacts> {
      return readTaskFacts(deps.db, taskId, deps.clock.now());
    },
  };
}
