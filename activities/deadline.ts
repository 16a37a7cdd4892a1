// The task's one deadline (docs/design.md §6), set at the API edge and stored on the task: every step
// that would start provider work checks what is left of it instead of starting a fresh timeout.
// Once a provider has accepted a job the deadline no longer applies: the job is paid for, so it
// runs to its end and its output is rescued. docs/timeouts.md.
import { failedUncharged, type FinishArgs } from '../db/settlement';

/** Whether less than `marginMs` is left before the task's deadline (never, for a task without one). */
export function pastDeadline(task: { readonly deadline_at: Date | null }, now: Date, marginMs: number): boolean {
  return task.deadline_at !== null && task.deadline_at.getTime() - now.getTime() < marginMs;
}

/** How a task that missed its deadline before any provider accepted it ends: failed, nothing charged. */
export function deadlineExceeded(sourceEvent: string, attemptId?: string): FinishArgs {
  return failedUncharged(sourceEvent, 'DEADLINE_EXCEEDED', 'the task was not accepted by a provider before its deadline', attemptId);
}
