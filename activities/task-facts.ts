// Reads the facts a workflow step is decided on. Always from Postgres, never from memory.
import { eq } from 'drizzle-orm';
import type { DbOrTx } from '../db/client';
import { generationTask, taskAttempt } from '../db/schema';
import type { TaskFacts } from '../domain/facts';
import { toTaskFacts } from '../db/task-tx';
import type { TaskActivityDeps } from './deps';
import { notFound } from './deps';

export async function readTaskFacts(db: DbOrTx, taskId: string, now: Date): Promise<TaskFacts> {
  const [row] = await db
    .select({ task: generationTask, attempt: taskAttempt })
    .from(generationTask)
    .leftJoin(taskAttempt, eq(taskAttempt.attempt_id, generationTask.active_attempt_id))
    .where(eq(generationTask.task_id, taskId));
  if (!row) throw notFound(`task ${taskId}`);
  const { task, attempt } = row;
  return toTaskFacts(
    { ...task, cancelRequested: task.cancel_requested_at !== null },
    attempt ? { provider: attempt.provider, submitState: attempt.submit_state, nextPollAt: attempt.next_poll_at } : null,
    now,
  );
}

export function createFactActivities(deps: TaskActivityDeps) {
  return {
    /** The task's current facts. */
    async getTaskFacts(taskId: string): Promise<TaskFacts> {
      return readTaskFacts(deps.db, taskId, deps.clock.now());
    },
  };
}
