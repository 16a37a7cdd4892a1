// `ops task escalate <task-id> --reason`: parks a non-terminal task in MANUAL_REVIEW from whatever
// state it is in (the ESCALATE event: docs/design.md §4), audited in the same transaction under
// the fence, then wakes its workflow. The way out for a task whose step fails for ever where no
// bound catches it (docs/design.md §5 "Bounds"): the workflow re-reads the facts — a wait is
// cancelled by the wake, and a step retrying its activity (a rescue, the media step) finds the
// task out of its state on its next attempt and returns the facts. A terminal task is refused.
import { recordAudit } from '../db/audit';
import type { Db } from '../db/client';
import { inTaskTransaction } from '../db/task-tx';
import { applyTaskEvent } from '../db/tasks';
import { isTerminal, type TaskStatus } from '../domain/states';
import type { GenerationFacade } from '../temporal/facade';

export type EscalateResult =
  /** Parked now; `woken`: its workflow took the wake (false: no workflow running, or Temporal did not answer). */
  | { readonly result: 'escalated'; readonly task_id: string; readonly from: TaskStatus; readonly audit_id: string; readonly woken: boolean }
  /** Already in MANUAL_REVIEW: nothing written. */
  | { readonly result: 'unchanged'; readonly task_id: string; readonly status: TaskStatus }
  /** Terminal (SUCCEEDED, FAILED, CANCELLED): never left, so refused. */
  | { readonly result: 'refused'; readonly task_id: string; readonly status: TaskStatus };

export async function escalateTask(
  db: Db,
  facade: Pick<GenerationFacade, 'wakeTask'>,
  args: { taskId: string; actor: string; reason: string; fence: { readonly scope: string; readonly region: string } },
): Promise<EscalateResult> {
  const { taskId, actor, reason } = args;
  // Refused (FenceRejectedError, ModePausedError) before anything is written when this region
  // does not own writes or the mode makes facts read-only.
  const { value } = await inTaskTransaction(db, args.fence, taskId, async (tx, { task, token }) => {
    if (!task) throw new Error(`no task ${taskId}`);
    if (isTerminal(task.status)) return { result: 'refused' as const, task_id: taskId, status: task.status };
    const from = task.status;
    const moved = await applyTaskEvent(
      tx,
      token,
      task,
      { type: 'ESCALATE' },
      { sourceEvent: 'ops.escalate', actor, attemptId: task.active_attempt_id, detail: { reason: reason.slice(0, 2000), escalated_from: from } },
    );
    if (!moved) return { result: 'unchanged' as const, task_id: taskId, status: from };
    const auditId = await recordAudit(tx, { actor, action: 'task.escalate', targetType: 'task', targetId: taskId, reason, detail: { from, to: moved } });
    return { result: 'escalated' as const, task_id: taskId, from, audit_id: auditId };
  });
  if (value.result !== 'escalated') return value;
  return { ...value, woken: await facade.wakeTask(taskId) };
}
