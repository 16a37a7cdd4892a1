// The small, id-only snapshot of a task that activities return to the workflow. Large
// payloads (prompts, URLs, provider bodies) never enter workflow history.
import type { AttemptState, TaskStatus } from './states';

export interface TaskFacts {
  readonly taskId: string;
  readonly tenantId: string;
  readonly provider: string;
  readonly status: TaskStatus;
  readonly statusVersion: number;
  readonly activeAttemptId: string | null;
  /** The active attempt's provider (its poll queue); absent in facts recorded before it existed. */
  readonly attemptProvider?: string | null;
  readonly attemptState: AttemptState | null;
  readonly cancelRequested: boolean;
  /** Milliseconds until the next poll is due (from task_attempt.next_poll_at), when waiting on the provider. */
  readonly pollInMs: number | null;
  /** Whether an operator's attention is needed (MANUAL_REVIEW, output at risk). */
  readonly needsAttention: boolean;
}
