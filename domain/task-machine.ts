// The task state machine (docs/design.md §4, docs/design.md §4): one pure table used by every
// activity and by the tests. The database's CAS on status_version decides who wins a race;
// this module decides what a winner may write.
import type { AttemptState, ProviderJobState, TaskStatus } from './states';
import { isTerminal } from './states';

/** Every edge the product allows. Terminal states have none; anything else may escalate. */
export const ALLOWED_TRANSITIONS: Readonly<Record<TaskStatus, readonly TaskStatus[]>> = {
  QUEUED: ['DISPATCHING', 'CANCELLED', 'MANUAL_REVIEW'],
  DISPATCHING: ['SUBMITTING', 'FAILED', 'CANCELLED', 'MANUAL_REVIEW'],
  SUBMITTING: ['SUBMITTED', 'RUNNING', 'PROVIDER_SUCCEEDED', 'SUBMIT_UNKNOWN', 'DISPATCHING', 'FAILED', 'CANCELLED', 'MANUAL_REVIEW'],
  SUBMIT_UNKNOWN: ['SUBMITTED', 'RUNNING', 'PROVIDER_SUCCEEDED', 'DISPATCHING', 'FAILED', 'MANUAL_REVIEW'],
  SUBMITTED: ['RUNNING', 'PROVIDER_SUCCEEDED', 'FAILED', 'CANCEL_REQUESTED', 'CANCELLED', 'MANUAL_REVIEW'],
  RUNNING: ['PROVIDER_SUCCEEDED', 'FAILED', 'CANCEL_REQUESTED', 'CANCELLED', 'MANUAL_REVIEW'],
  CANCEL_REQUESTED: ['PROVIDER_SUCCEEDED', 'FAILED', 'CANCELLED', 'MANUAL_REVIEW'],
  PROVIDER_SUCCEEDED: ['FETCHING_OUTPUT', 'MANUAL_REVIEW'],
  FETCHING_OUTPUT: ['PROCESSING_MEDIA', 'OUTPUT_AT_RISK', 'FAILED', 'MANUAL_REVIEW'],
  OUTPUT_AT_RISK: ['PROCESSING_MEDIA', 'FAILED', 'MANUAL_REVIEW'],
  PROCESSING_MEDIA: ['SUCCEEDED', 'FAILED', 'MANUAL_REVIEW'],
  MANUAL_REVIEW: ['SUBMITTED', 'RUNNING', 'PROVIDER_SUCCEEDED', 'DISPATCHING', 'FAILED', 'CANCELLED'],
  SUCCEEDED: [],
  FAILED: [],
  CANCELLED: [],
};

export const canTransition = (from: TaskStatus, to: TaskStatus): boolean => ALLOWED_TRANSITIONS[from].includes(to);

export type TaskEvent =
  | { type: 'DISPATCH' }
  | { type: 'ATTEMPT_PREPARED' }
  | { type: 'SUBMIT_ACCEPTED' }
  | { type: 'SUBMIT_REJECTED'; retryable: boolean }
  | { type: 'SUBMIT_OUTCOME_UNKNOWN' }
  /**
   * `cancelRequested`: the task was CANCEL_REQUESTED when it was parked in MANUAL_REVIEW (its
   * transition into review came from there), so a provider's cancel is the one the tenant asked
   * for and ends the task CANCELLED (docs/billing.md), not FAILED.
   */
  | { type: 'PROVIDER_STATE'; state: ProviderJobState; cancelRequested?: boolean }
  | { type: 'CANCEL' }
  | { type: 'OUTPUT_FETCH_STARTED' }
  | { type: 'OUTPUT_STORED' }
  | { type: 'OUTPUT_DEADLINE_NEAR' }
  | { type: 'OUTPUT_LOST' }
  | { type: 'MEDIA_VALID' }
  | { type: 'MEDIA_INVALID' }
  | { type: 'ESCALATE' }
  /** Reconciliation proved the unknown submit never created a job: a new attempt may follow. */
  | { type: 'SUBMIT_PROVED_ABSENT' }
  /** Operator resolutions of MANUAL_REVIEW (workflow Updates). */
  | { type: 'REVIEW_BIND_JOB' }
  | { type: 'REVIEW_NOT_SUBMITTED' }
  | { type: 'REVIEW_FAIL' };

export type Decision =
  /** Write this new status (CAS from the status it was decided on). */
  | { kind: 'move'; to: TaskStatus }
  /** Nothing to write: the event is a duplicate, stale, or already overtaken. Not an error. */
  | { kind: 'noop'; reason: string }
  /** The event makes no sense in this state (a bug or a forged event). */
  | { kind: 'reject'; reason: string };

const move = (to: TaskStatus): Decision => ({ kind: 'move', to });
const noop = (reason: string): Decision => ({ kind: 'noop', reason });
const reject = (reason: string): Decision => ({ kind: 'reject', reason });

/** States in which the provider may still report progress on the active attempt. */
const AWAITING_PROVIDER: readonly TaskStatus[] = ['SUBMITTING', 'SUBMIT_UNKNOWN', 'SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED', 'MANUAL_REVIEW'];

function onProviderState(from: TaskStatus, state: ProviderJobState, cancelRequested: boolean): Decision {
  if (!AWAITING_PROVIDER.includes(from)) return noop(`provider ${state} after ${from}`);
  switch (state) {
    case 'queued':
      if (from === 'SUBMITTING' || from === 'SUBMIT_UNKNOWN' || from === 'MANUAL_REVIEW') return move('SUBMITTED');
      return noop(`provider queued while ${from}`);
    case 'running':
      if (from === 'RUNNING' || from === 'CANCEL_REQUESTED') return noop(`provider running while ${from}`);
      return move('RUNNING');
    case 'succeeded':
      // A success that races a cancel wins: the output exists and is rescued (docs/billing.md).
      return move('PROVIDER_SUCCEEDED');
    case 'failed':
      return move('FAILED');
    case 'canceled':
    case 'aborted':
      // A cancel asked for before review stays one through it (and through a RUNNING the
      // provider reported meanwhile); any other provider cancel is a failure.
      return move(from === 'CANCEL_REQUESTED' || (cancelRequested && canTransition(from, 'CANCELLED')) ? 'CANCELLED' : 'FAILED');
  }
}

/** What the event means for a task currently in `from`. Pure and total. */
export function decide(from: TaskStatus, event: TaskEvent): Decision {
  if (isTerminal(from)) return noop(`${from} is terminal`);
  switch (event.type) {
    case 'DISPATCH':
      return from === 'QUEUED' ? move('DISPATCHING') : noop(`already ${from}`);
    case 'ATTEMPT_PREPARED':
      return from === 'DISPATCHING' ? move('SUBMITTING') : noop(`already ${from}`);
    case 'SUBMIT_ACCEPTED':
      if (from === 'SUBMITTING' || from === 'SUBMIT_UNKNOWN' || from === 'MANUAL_REVIEW') return move('SUBMITTED');
      return noop(`already ${from}`);
    case 'SUBMIT_REJECTED':
      if (from !== 'SUBMITTING') return noop(`rejection while ${from}`);
      return move(event.retryable ? 'DISPATCHING' : 'FAILED');
    case 'SUBMIT_OUTCOME_UNKNOWN':
      return from === 'SUBMITTING' ? move('SUBMIT_UNKNOWN') : noop(`already ${from}`);
    case 'PROVIDER_STATE':
      return onProviderState(from, event.state, event.cancelRequested ?? false);
    case 'CANCEL':
      if (from === 'QUEUED' || from === 'DISPATCHING') return move('CANCELLED');
      if (from === 'SUBMITTED' || from === 'RUNNING') return move('CANCEL_REQUESTED');
      if (from === 'CANCEL_REQUESTED') return noop('cancel already requested');
      // SUBMITTING / SUBMIT_UNKNOWN: a job may exist; cancel is recorded on the task and
      // honoured once the outcome is known. Past the provider: too late, the work is done.
      return noop(`cancel not applicable while ${from}`);
    case 'OUTPUT_FETCH_STARTED':
      return from === 'PROVIDER_SUCCEEDED' ? move('FETCHING_OUTPUT') : noop(`already ${from}`);
    case 'OUTPUT_STORED':
      if (from === 'FETCHING_OUTPUT' || from === 'OUTPUT_AT_RISK') return move('PROCESSING_MEDIA');
      return noop(`already ${from}`);
    case 'OUTPUT_DEADLINE_NEAR':
      return from === 'FETCHING_OUTPUT' ? move('OUTPUT_AT_RISK') : noop(`not fetching (${from})`);
    case 'OUTPUT_LOST':
      if (from === 'FETCHING_OUTPUT' || from === 'OUTPUT_AT_RISK') return move('FAILED');
      return reject(`output lost while ${from}`);
    case 'MEDIA_VALID':
      return from === 'PROCESSING_MEDIA' ? move('SUCCEEDED') : noop(`already ${from}`);
    case 'MEDIA_INVALID':
      return from === 'PROCESSING_MEDIA' ? move('FAILED') : noop(`already ${from}`);
    case 'ESCALATE':
      return from === 'MANUAL_REVIEW' ? noop('already in review') : move('MANUAL_REVIEW');
    case 'SUBMIT_PROVED_ABSENT':
      return from === 'SUBMIT_UNKNOWN' ? move('DISPATCHING') : noop(`not unknown (${from})`);
    case 'REVIEW_BIND_JOB':
      return from === 'MANUAL_REVIEW' ? move('SUBMITTED') : reject(`not in review (${from})`);
    case 'REVIEW_NOT_SUBMITTED':
      return from === 'MANUAL_REVIEW' ? move('DISPATCHING') : reject(`not in review (${from})`);
    case 'REVIEW_FAIL':
      return from === 'MANUAL_REVIEW' ? move('FAILED') : reject(`not in review (${from})`);
  }
}

/** The attempt's submit_state after a provider state, or null when it should not change. */
export function attemptStateFor(current: AttemptState, state: ProviderJobState): AttemptState | null {
  const finished: readonly AttemptState[] = ['SUCCEEDED', 'FAILED', 'CANCELLED', 'REJECTED'];
  if (finished.includes(current)) return null;
  switch (state) {
    case 'queued':
      return current === 'SUBMITTED' ? null : 'SUBMITTED';
    case 'running':
      return current === 'RUNNING' ? null : 'RUNNING';
    case 'succeeded':
      return 'SUCCEEDED';
    case 'failed':
      return 'FAILED';
    case 'canceled':
    case 'aborted':
      return 'CANCELLED';
  }
}
