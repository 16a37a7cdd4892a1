// Parking a task in MANUAL_REVIEW (the ESCALATE event) with the evidence as the transition's
// detail: one transaction for every caller (the deadline, a bounded read, an ambiguous lookup).
import type { FenceToken } from '../db/fence';
import { holdFenceForFacts } from '../db/modes';
import type { Tx } from '../db/client';
import type { TaskRow } from '../db/schema';
import { applyTaskEvent, lockTask } from '../db/tasks';
import { notFound, type TaskActivityDeps } from './deps';

export interface Escalation {
  readonly sourceEvent: string;
  /** The attempt the evidence is about; the task's active attempt when omitted. */
  readonly attemptId?: string | null;
  readonly detail: Record<string, unknown>;
  /** Checked under the task's row lock: false leaves the task as it is. */
  readonly when?: (tx: Tx, task: TaskRow) => Promise<boolean> | boolean;
}

/** Parks the task in MANUAL_REVIEW (when `when` allows it); true if it moved. */
export async function escalate(deps: TaskActivityDeps, token: FenceToken, taskId: string, e: Escalation): Promise<boolean> {
  return deps.db.transaction(async (tx) => {
    await holdFenceForFacts(tx, token);
    const task = await lockTask(tx, taskId);
    if (!task) throw notFound(`task ${taskId}`);
    if (e.when && !(await e.when(tx, task))) return false;
    const attemptId = e.attemptId === undefined ? task.active_attempt_id : e.attemptId;
    const moved = await applyTaskEvent(tx, token, task, { type: 'ESCALATE' }, { sourceEvent: e.sourceEvent, actor: 'workflow', attemptId, detail: e.detail });
    return moved !== null;
  });
}
