// The failure vocabulary inside Temporal: ApplicationFailure types (never class names).
// A plain Error thrown by an activity means "transient, retry".
export const FailureType = {
  /** This process's region or epoch no longer owns writes. Another worker of the active region may retry. */
  FenceRejected: 'FenceRejected',
  /**
   * The system mode (region_write_fence.mode) forbids this step now (e.g. QUEUE_ONLY forbids a
   * new submit). Retryable: the task waits durably in Temporal's retry loop and carries on when
   * an operator changes the mode (docs/modes.md).
   */
  ModePaused: 'ModePaused',
  /**
   * The provider may not be called now: its circuit is open (or forced open by an operator) or
   * its bulkhead is full. Retryable after the delay the failure carries; the attempt stays PREPARED.
   */
  ProviderUnavailable: 'ProviderUnavailable',
  /**
   * The provider's job is where the workflow last saw it (activities/await-provider.ts): the wait
   * goes on in Temporal's retry loop, the next read after the delay the failure carries, with no
   * workflow task in between. Retryable and BENIGN; its attempts are unlimited, so it never
   * reaches a workflow.
   */
  ProviderUnchanged: 'ProviderUnchanged',
  /** The task or attempt does not exist. Not retryable. */
  NotFound: 'NotFound',
  /** The facts are in a state this step cannot act on (a bug, or data changed under us). Not retryable. */
  InvalidState: 'InvalidState',
  /** The output URL failed validation (scheme, private address; a host refused past the URL's expiry). Not retryable. */
  UnsafeOutputUrl: 'UnsafeOutputUrl',
  /**
   * The output's host is not on the provider's allow-list while its URL is still valid: the task
   * waits in OUTPUT_AT_RISK for an operator to allow the host (activities/rescue-output.ts).
   * Retryable and BENIGN, on its own clock.
   */
  OutputHostRefused: 'OutputHostRefused',
  /** The provider's output is gone (expired, 404/403). Not retryable. */
  OutputGone: 'OutputGone',
  /** The media failed validation (ffprobe). Not retryable. */
  InvalidMedia: 'InvalidMedia',
} as const;
export type FailureType = (typeof FailureType)[keyof typeof FailureType];

export const NON_RETRYABLE_FAILURES: readonly FailureType[] = [FailureType.NotFound, FailureType.InvalidState, FailureType.UnsafeOutputUrl];

/**
 * The source event of the transition that parks a task in OUTPUT_AT_RISK because its output's host
 * is not allowed (activities/rescue-output.ts); the fact gauges count such tasks (observability/facts.ts).
 */
export const OUTPUT_HOST_REFUSED_EVENT = 'workflow.output-host-refused';
