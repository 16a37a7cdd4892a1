// The one door between HTTP (and the relay, and the CLI) and Temporal. Callers speak in task
// ids; workflow ids, task queues and start options are decided here.
import type { Client } from '@temporalio/client';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/client';
import type { TaskFacts } from '../domain/facts';
import type { ReviewResolution } from '../domain/review';
import { SA_PROVIDER, SA_TASK_STATUS, SA_TENANT_ID, factsQuery, resolveReviewUpdate, wakeSignal, workflowIdForTask } from '../workflows/definitions';
import type { generationWorkflow } from '../workflows/generation';

/** How long one wake signal may take before it counts as not delivered (the poll covers it). */
const WAKE_SIGNAL_DEADLINE_MS = 5_000;
import { queues } from './queues';

export interface TaskRef {
  readonly taskId: string;
  readonly tenantId: string;
  readonly provider: string;
  /** The task's priority, 0–9 (9 first); absent: Temporal's default. */
  readonly priority?: number;
}

export interface FacadeOptions {
  /**
   * Start workflows with Temporal task-queue priority (from the task's priority) and fairness key
   * (the tenant), inherited by their activities: a saturated worker then also dispatches in that
   * order (config TEMPORAL_TASK_PRIORITY; docs/decisions/0025).
   */
  readonly taskPriority?: boolean;
}

/** Our 0–9 (9 first) onto Temporal's default 1–5 priority keys (1 first). */
export const temporalPriorityKey = (priority: number): number => 5 - Math.floor(Math.min(9, Math.max(0, priority)) / 2);

/** 'started': running now (new or existing run); 'closed': the task's workflow already finished. */
export type StartResult = 'started' | 'closed';

export interface GenerationFacade {
  /** Starts the task's workflow unless it exists; safe to call any number of times. */
  startGeneration(task: TaskRef): Promise<StartResult>;
  /** Wakes the workflow to re-read its facts (new inbox rows, a cancel). Best effort. */
  wakeTask(taskId: string): Promise<boolean>;
  describeTask(taskId: string): Promise<{ status: string; runId: string; historyLength: number } | null>;
  queryFacts(taskId: string): Promise<TaskFacts | null>;
  /** Resolves MANUAL_REVIEW through the workflow's Update (validated, applied, audited). */
  resolveReview(taskId: string, resolution: ReviewResolution): Promise<TaskFacts>;
  workflowIdFor(taskId: string): string;
}

export function createGenerationFacade(getClient: () => Promise<Client>, taskQueueBase: string, options: FacadeOptions = {}): GenerationFacade {
  return {
    workflowIdFor: workflowIdForTask,
    async startGeneration(task) {
      const client = await getClient();
      try {
        await client.workflow.start<typeof generationWorkflow>('generationWorkflow', {
          taskQueue: queues.generation(taskQueueBase),
          workflowId: workflowIdForTask(task.taskId),
          args: [{ taskId: task.taskId }],
          // A running workflow is the one we want; a closed one must never be started again.
          workflowIdConflictPolicy: 'USE_EXISTING',
          workflowIdReusePolicy: 'REJECT_DUPLICATE',
          ...(options.taskPriority ? { priority: { priorityKey: temporalPriorityKey(task.priority ?? 0), fairnessKey: task.tenantId } } : {}),
          typedSearchAttributes: [
            { key: SA_TASK_STATUS, value: 'QUEUED' },
            { key: SA_TENANT_ID, value: task.tenantId },
            { key: SA_PROVIDER, value: task.provider },
          ],
        });
        return 'started';
      } catch (err) {
        if (err instanceof WorkflowExecutionAlreadyStartedError) return 'closed';
        throw err;
      }
    },
    async wakeTask(taskId) {
      try {
        const client = await getClient();
        // A deadline: a signal Temporal accepts but never answers would otherwise hold one of
        // the waker's bounded slots (temporal/wakes.ts) for good, and with it every other task's wake.
        await client.withDeadline(Date.now() + WAKE_SIGNAL_DEADLINE_MS, () => client.workflow.getHandle(workflowIdForTask(taskId)).signal(wakeSignal));
        return true;
      } catch (err) {
        if (err instanceof WorkflowNotFoundError) return false;
        return false;
      }
    },
    async describeTask(taskId) {
      const client = await getClient();
      try {
        const d = await client.workflow.getHandle(workflowIdForTask(taskId)).describe();
        return { status: d.status.name, runId: d.runId, historyLength: d.historyLength };
      } catch (err) {
        if (err instanceof WorkflowNotFoundError) return null;
        throw err;
      }
    },
    async resolveReview(taskId, resolution) {
      const client = await getClient();
      return client.workflow.getHandle(workflowIdForTask(taskId)).executeUpdate(resolveReviewUpdate, { args: [resolution] });
    },
    async queryFacts(taskId) {
      const client = await getClient();
      return client.workflow.getHandle(workflowIdForTask(taskId)).query(factsQuery);
    },
  };
}
