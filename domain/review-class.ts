// Why a task sits in MANUAL_REVIEW, derived from its facts and the evidence its escalation
// recorded (the MANUAL_REVIEW transition's detail: activities/escalate.ts and its callers), and
// which bulk actions suit each cause (`ops review`, docs/runbooks/review.md). Pure.
import { FailureType } from './errors';

export const REVIEW_CLASSES = ['terminal-elsewhere', 'unknown-outcome', 'provider-defect', 'missing-data', 'code-defect', 'unclassified'] as const;
export type ReviewClass = (typeof REVIEW_CLASSES)[number];

/**
 * fail: the task fails, credits released. not-submitted: the attempt never reached the provider,
 * a new one follows (refused while any evidence of a job exists). replay: run the task's steps
 * again from its own job (re-bind the attempt's job: it is polled and rescued again) or, with no
 * job, as not-submitted — for a cause since fixed.
 */
export const REVIEW_ACTIONS = ['fail', 'not-submitted', 'replay'] as const;
export type ReviewAction = (typeof REVIEW_ACTIONS)[number];

export const ACTIONS_FOR: Record<ReviewClass, readonly ReviewAction[]> = {
  'terminal-elsewhere': ['fail'],
  'unknown-outcome': ['fail', 'not-submitted'],
  'provider-defect': ['fail', 'replay'],
  'missing-data': ['fail'],
  'code-defect': ['replay', 'fail'],
  unclassified: ['fail'],
};

export interface ReviewFacts {
  /** The escalating transition's detail (its `reason` and evidence fields). */
  readonly detail: Record<string, unknown> | null;
  readonly sourceEvent: string | null;
  readonly attemptState: string | null;
  readonly providerJobId: string | null;
  /** The provider's last word on the attempt's job in the inbox ('failed', 'canceled', …), if any. */
  readonly providerFinalState: string | null;
}

/** Failure types of a step that cannot go on because the output is gone or unusable. */
const DATA_FAILURES: readonly string[] = [FailureType.OutputGone, FailureType.UnsafeOutputUrl, FailureType.InvalidMedia];
const PROVIDER_EVIDENCE = ['consecutive_read_failures', 'max_run_ms'];

export function classifyReview(f: ReviewFacts): ReviewClass {
  const reason = typeof f.detail?.['reason'] === 'string' ? f.detail['reason'] : '';
  // The provider ended the job without an output: nothing left to wait for.
  if (f.providerFinalState && f.providerFinalState !== 'succeeded') return 'terminal-elsewhere';
  // The media check kept failing without a verdict on the video (a probe or storage fault): once
  // that is fixed, a replay rescues and checks the same job's output again (activities/media-failures.ts).
  if (f.sourceEvent === 'workflow.media-failures' && f.providerJobId) return 'code-defect';
  // A workflow step failed for good: `<FailureType>: message` (workflows/generation.ts).
  const stepFailure = /^([A-Za-z]+): /.exec(reason)?.[1];
  if (stepFailure && (Object.values(FailureType) as string[]).includes(stepFailure)) {
    return DATA_FAILURES.includes(stepFailure) ? 'missing-data' : 'code-defect';
  }
  if (f.providerJobId && PROVIDER_EVIDENCE.some((k) => f.detail && k in f.detail)) return 'provider-defect';
  if (!f.providerJobId && (reason === 'submit outcome unknown past its deadline' || (f.detail !== null && 'candidate_job_ids' in f.detail)))
    return 'unknown-outcome';
  return 'unclassified';
}
