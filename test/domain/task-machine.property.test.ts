// Property tests of the state machine (fast-check): whatever order events arrive in, the
// machine keeps its laws.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { PROVIDER_JOB_STATES, TASK_STATES, isTerminal, type ProviderJobState, type TaskStatus } from '../../domain/states';
import { attemptStateFor, canTransition, decide, type TaskEvent } from '../../domain/task-machine';

const anyEvent: fc.Arbitrary<TaskEvent> = fc.oneof(
  fc.constantFrom<TaskEvent>(
    { type: 'DISPATCH' },
    { type: 'ATTEMPT_PREPARED' },
    { type: 'SUBMIT_ACCEPTED' },
    { type: 'SUBMIT_OUTCOME_UNKNOWN' },
    { type: 'CANCEL' },
    { type: 'OUTPUT_FETCH_STARTED' },
    { type: 'OUTPUT_STORED' },
    { type: 'OUTPUT_DEADLINE_NEAR' },
    { type: 'OUTPUT_LOST' },
    { type: 'MEDIA_VALID' },
    { type: 'MEDIA_INVALID' },
    { type: 'ESCALATE' },
    { type: 'SUBMIT_PROVED_ABSENT' },
    { type: 'REVIEW_BIND_JOB' },
    { type: 'REVIEW_NOT_SUBMITTED' },
    { type: 'REVIEW_FAIL' },
  ),
  fc.boolean().map((retryable): TaskEvent => ({ type: 'SUBMIT_REJECTED', retryable })),
  fc.constantFrom(...PROVIDER_JOB_STATES).map((state): TaskEvent => ({ type: 'PROVIDER_STATE', state })),
);

const step = (s: TaskStatus, e: TaskEvent): TaskStatus => {
  const d = decide(s, e);
  return d.kind === 'move' ? d.to : s;
};

test('no event sequence, from any state, leaves a terminal state', () => {
  fc.assert(
    fc.property(fc.constantFrom(...TASK_STATES), fc.array(anyEvent, { maxLength: 60 }), (start, events) => {
      let s = start;
      let reachedTerminal: TaskStatus | null = isTerminal(s) ? s : null;
      for (const e of events) {
        s = step(s, e);
        if (reachedTerminal) assert.equal(s, reachedTerminal);
        else if (isTerminal(s)) reachedTerminal = s;
      }
    }),
    { numRuns: 2000 },
  );
});

test('the same event applied twice in a row is a no-op the second time', () => {
  fc.assert(
    fc.property(fc.constantFrom(...TASK_STATES), anyEvent, (start, e) => {
      const once = step(start, e);
      assert.equal(decide(once, e).kind === 'move', false, `${start} --${JSON.stringify(e)}--> ${once} moved again`);
    }),
    { numRuns: 5000 },
  );
});

/** The provider's life of one job: queued?, running?, then one terminal state. */
const providerLife = fc
  .tuple(fc.boolean(), fc.boolean(), fc.constantFrom<ProviderJobState>('succeeded', 'failed', 'canceled', 'aborted'))
  .map(([queued, running, end]) => [...(queued ? ['queued' as const] : []), ...(running ? ['running' as const] : []), end]);

const endFor = (from: TaskStatus, terminal: ProviderJobState): TaskStatus =>
  terminal === 'succeeded' ? 'PROVIDER_SUCCEEDED' : terminal === 'failed' ? 'FAILED' : from === 'CANCEL_REQUESTED' ? 'CANCELLED' : 'FAILED';

test("any permutation of a provider's events (with duplicates) ends in the same state as the ordered delivery", () => {
  const waiting: TaskStatus[] = ['SUBMITTING', 'SUBMIT_UNKNOWN', 'SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED'];
  fc.assert(
    fc.property(
      fc.constantFrom(...waiting),
      providerLife.chain((life) =>
        fc.tuple(fc.constant(life), fc.shuffledSubarray([...life, ...life], { minLength: life.length * 2, maxLength: life.length * 2 })),
      ),
      (start, [life, delivered]) => {
        const terminal = life[life.length - 1]!;
        let s = start;
        for (const state of delivered) s = step(s, { type: 'PROVIDER_STATE', state });
        assert.equal(s, endFor(start, terminal));
      },
    ),
    { numRuns: 3000 },
  );
});

test("a task parked in MANUAL_REVIEW applies late provider evidence: any delivery of a job's events ends where an unknown outcome would", () => {
  fc.assert(
    fc.property(
      providerLife.chain((life) =>
        fc.tuple(fc.constant(life), fc.shuffledSubarray([...life, ...life], { minLength: life.length * 2, maxLength: life.length * 2 })),
      ),
      ([life, delivered]) => {
        let review: TaskStatus = 'MANUAL_REVIEW';
        let unknown: TaskStatus = 'SUBMIT_UNKNOWN';
        for (const state of delivered) {
          review = step(review, { type: 'PROVIDER_STATE', state });
          unknown = step(unknown, { type: 'PROVIDER_STATE', state });
        }
        assert.equal(review, unknown);
        assert.equal(review, endFor('MANUAL_REVIEW', life[life.length - 1]!));
      },
    ),
    { numRuns: 2000 },
  );
});

test('a task parked in MANUAL_REVIEW while cancelling ends where CANCEL_REQUESTED would: a provider cancel is CANCELLED, not FAILED', () => {
  fc.assert(
    fc.property(
      providerLife.chain((life) =>
        fc.tuple(fc.constant(life), fc.shuffledSubarray([...life, ...life], { minLength: life.length * 2, maxLength: life.length * 2 })),
      ),
      ([life, delivered]) => {
        let s: TaskStatus = 'MANUAL_REVIEW';
        for (const state of delivered) {
          const d = decide(s, { type: 'PROVIDER_STATE', state, cancelRequested: true });
          if (d.kind === 'move') {
            assert.ok(canTransition(s, d.to), `${s} → ${d.to} is an edge`);
            s = d.to;
          }
        }
        assert.equal(s, endFor('CANCEL_REQUESTED', life[life.length - 1]!));
      },
    ),
    { numRuns: 2000 },
  );
});

test("an attempt's state never leaves a finished state, whatever the provider says next", () => {
  fc.assert(
    fc.property(fc.array(fc.constantFrom(...PROVIDER_JOB_STATES), { maxLength: 20 }), (states) => {
      let a: ReturnType<typeof attemptStateFor> | 'SUBMITTED' = 'SUBMITTED';
      let finished: string | null = null;
      for (const st of states) {
        const next = attemptStateFor(a, st);
        if (next) a = next;
        if (finished) assert.equal(a, finished);
        else if (['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(a)) finished = a!;
      }
    }),
  );
});
