// The causes of MANUAL_REVIEW (domain/review-class.ts) from the evidence each escalation records today.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ACTIONS_FOR, REVIEW_CLASSES, classifyReview, type ReviewFacts } from '../../domain/review-class';

const base: ReviewFacts = { detail: null, sourceEvent: 'workflow.escalate', attemptState: 'SUBMIT_UNKNOWN', providerJobId: null, providerFinalState: null };

test('each escalation of the code maps to its cause', () => {
  assert.equal(classifyReview({ ...base, detail: { reason: 'submit outcome unknown past its deadline' } }), 'unknown-outcome');
  assert.equal(classifyReview({ ...base, detail: { reason: 'two jobs match', candidate_job_ids: ['a', 'b'] } }), 'unknown-outcome');
  const job = { ...base, attemptState: 'RUNNING', providerJobId: 'j1' };
  assert.equal(classifyReview({ ...job, detail: { reason: 'reads of job j1 are refused', consecutive_read_failures: 5 } }), 'provider-defect');
  assert.equal(classifyReview({ ...job, detail: { reason: 'past its maximum run time', max_run_ms: 7_200_000 } }), 'provider-defect');
  assert.equal(classifyReview({ ...job, detail: { reason: 'OutputGone: the output URL answered 404' } }), 'missing-data');
  assert.equal(classifyReview({ ...job, detail: { reason: 'InvalidMedia: no moov box' } }), 'missing-data');
  assert.equal(classifyReview({ ...job, detail: { reason: 'InvalidState: attempt is RUNNING' } }), 'code-defect');
  assert.equal(
    classifyReview({ ...job, sourceEvent: 'workflow.media-failures', detail: { reason: 'the media step failed 5 times without a verdict on the video' } }),
    'code-defect',
  );
  assert.equal(
    classifyReview({ ...job, providerFinalState: 'failed', detail: { reason: 'reads of job j1 are refused', consecutive_read_failures: 5 } }),
    'terminal-elsewhere',
  );
  assert.equal(classifyReview({ ...job, providerFinalState: 'succeeded', detail: { reason: 'InvalidState: x' } }), 'code-defect');
  assert.equal(classifyReview({ ...base, detail: { reason: 'something new' } }), 'unclassified');
  assert.equal(classifyReview({ ...base, detail: null }), 'unclassified');
  // "Not a failure type" is not read as one.
  assert.equal(classifyReview({ ...base, detail: { reason: 'Note: submit outcome unknown past its deadline' } }), 'unclassified');
});

test('every class allows fail, and not-submitted only where no job is known', () => {
  for (const c of REVIEW_CLASSES) assert.ok(ACTIONS_FOR[c].includes('fail'), c);
  const withNotSubmitted = REVIEW_CLASSES.filter((c) => ACTIONS_FOR[c].includes('not-submitted'));
  assert.deepEqual(withNotSubmitted, ['unknown-outcome']);
});
