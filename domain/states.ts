// Vocabularies shared by the schema, the state machine, the API and the workflow.
// Pure: safe to import inside the workflow sandbox.

export const TASK_STATES = [
  'QUEUED',
  'DISPATCHING',
  'SUBMITTING',
  'SUBMIT_UNKNOWN',
  'SUBMITTED',
  'RUNNING',
  'CANCEL_REQUESTED',
  'PROVIDER_SUCCEEDED',
  'FETCHING_OUTPUT',
  'OUTPUT_AT_RISK',
  'PROCESSING_MEDIA',
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
  'MANUAL_REVIEW',
] as const;
export type TaskStatus = (typeof TASK_STATES)[number];

export const TERMINAL_TASK_STATES: readonly TaskStatus[] = ['SUCCEEDED', 'FAILED', 'CANCELLED'];
export const isTerminal = (s: TaskStatus): boolean => TERMINAL_TASK_STATES.includes(s);

export const ATTEMPT_STATES = ['PREPARED', 'SUBMITTING', 'SUBMITTED', 'SUBMIT_UNKNOWN', 'REJECTED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'] as const;
export type AttemptState = (typeof ATTEMPT_STATES)[number];

export const SYSTEM_MODES = ['NORMAL', 'DEGRADED_NOTIFY', 'DEGRADED_PROVIDER', 'QUEUE_ONLY', 'RECONCILE_ONLY', 'READ_ONLY', 'MAINTENANCE'] as const;
export type SystemMode = (typeof SYSTEM_MODES)[number];

export const LEDGER_ENTRY_TYPES = ['GRANT', 'RESERVE', 'SETTLE', 'RELEASE', 'REFUND'] as const;
export type LedgerEntryType = (typeof LEDGER_ENTRY_TYPES)[number];

/** Provider job states normalised across providers. */
export const PROVIDER_JOB_STATES = ['queued', 'running', 'succeeded', 'failed', 'canceled', 'aborted'] as const;
export type ProviderJobState = (typeof PROVIDER_JOB_STATES)[number];
/** Provider job states after which the job no longer runs at the provider. */
export const FINISHED_PROVIDER_JOB_STATES: readonly ProviderJobState[] = ['succeeded', 'failed', 'canceled', 'aborted'];

/**
 * The raw status of a job the provider no longer knows while we cancel it. It ends the task as
 * cancelled but is no state the provider reported, let alone billed: the cancel is charged 0
 * whatever the provider's `chargeableStates` (docs/billing.md, activities/apply-inbox.ts; the poll
 * reports it, activities/poll-provider.ts).
 */
export const GONE_AFTER_CANCEL = 'NOT_FOUND_AFTER_CANCEL';
