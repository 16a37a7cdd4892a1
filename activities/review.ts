// Escalation to MANUAL_REVIEW: where evidence cannot decide, a person does. The task keeps
// its reservation until an operator resolves it.
import { holdFence } from '../db/fence';
import { casTaskStatus, lockTask } from '../db/tasks';
import type { TaskFacts } from '../domain/facts';
import type { TaskStatus } from '../domain/states';
import { decide } from '../domain/task-machine';
import { fenced, notFound, type TaskActivityDeps } from './deps';
import { readTaskFacts } from './task-facts';

export function createReviewActivities(deps: TaskActivityDeps) {
  return {
    async escalateTask(taskId: string, reason: string): Promise<TaskFacts> {
      await fenced(deps, (token) =>
        deps.db.transaction(async (tx) => {
          await holdFence(tx, token);
          const task = await lockTask(tx, taskId);
          if (!task) throw notFound(`task ${taskId}`);
          const d = decide(task.status as TaskStatus, { type: 'ESCALATE' });
          if (d.kind !== 'move') return;
          await casTaskStatus(tx, token, {
            taskId,
            from: task.status as TaskStatus,
            expectedVersion: task.status_version,
            to: d.to,
            sourceEvent: 'workflow.escalate',
            actor: 'workflow',
            attemptId: task.active_attempt_id,
            detail: { reason: reason.slice(0, 2000) },
          });
        }),
      );
      return readTaskFacts(deps.db, taskId, deps.clock.now());
    },
  };
}
