// Names shared by the workflow, the facade and the tests. Pure: safe in the workflow sandbox.
import { SearchAttributeType, defineSearchAttributeKey } from '@temporalio/common';
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { TaskFacts } from '../domain/facts';
import type { ReviewResolution } from '../domain/review';

/** A wake-up, never data: the workflow re-reads Postgres when it arrives (docs/design.md §3). */
export const wakeSignal = defineSignal('wake');
/** The facts the workflow last read from Postgres (ids and states only). */
export const factsQuery = defineQuery<TaskFacts | null>('facts');

/**
 * Operator resolution of MANUAL_REVIEW: bind a provider job, confirm not submitted (a new
 * attempt follows), or fail (credits released). Validated, applied by an activity, audited.
 */
export const resolveReviewUpdate = defineUpdate<TaskFacts, [ReviewResolution]>('resolveReview');

/** Registered on the Temporal namespace at start (harness/temporal.ts, temporal-dev.yml). */
export const SA_TASK_STATUS = defineSearchAttributeKey('TaskStatus', SearchAttributeType.KEYWORD);
export const SA_TENANT_ID = defineSearchAttributeKey('TenantId', SearchAttributeType.KEYWORD);
export const SA_PROVIDER = defineSearchAttributeKey('Provider', SearchAttributeType.KEYWORD);
export const SA_ATTEMPT_STATE = defineSearchAttributeKey('AttemptState', SearchAttributeType.KEYWORD);
export const SA_NEEDS_ATTENTION = defineSearchAttributeKey('NeedsAttention', SearchAttributeType.BOOL);

export const workflowIdForTask = (taskId: string): string => `task-${taskId}`;
