// Pure domain code: money arithmetic, backoff, the state machine's basic laws.
// (Property tests of every event sequence live in test/domain/task-machine.property.test.ts.)
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { fullJitterDelay, nextPollInterval, plusUpToHalf } from '../../domain/backoff';
import { canonicalJson } from '../../domain/canonical-json';
import { findModel, priceFor } from '../../domain/catalog';
import { addMoney, fromMicros, scaleMoney, subMoney, toMicros } from '../../domain/money';
import { PROVIDER_JOB_STATES, TASK_STATES, isTerminal, type TaskStatus } from '../../domain/states';
import { ALLOWED_TRANSITIONS, canTransition, decide, type TaskEvent } from '../../domain/task-machine';

describe('money', () => {
  test('decimal strings round-trip through micro-units without float error', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: -(10n ** 17n), max: 10n ** 17n }), (m) => {
        assert.equal(toMicros(fromMicros(m)), m);
      }),
    );
    assert.equal(addMoney('0.1', '0.2'), '0.300000');
    assert.equal(subMoney('1', '0.000001'), '0.999999');
    assert.equal(scaleMoney('0.5', 150n, 100n), '0.750000');
  });

  test('amounts with more than six decimals or not numbers are refused', () => {
    assert.throws(() => toMicros('1.0000001'), RangeError);
    assert.throws(() => toMicros('1e3'), RangeError);
    assert.throws(() => toMicros(''), RangeError);
  });

  test('prices follow the catalog: seconds × price × resolution factor', () => {
    const m = findModel('minimax/video-01')!;
    assert.equal(priceFor(m, '480p', 4), '2.000000');
    assert.equal(priceFor(m, '720p', 4), '3.000000');
  });
});

describe('backoff', () => {
  test('full jitter stays below the capped exponential ceiling', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 40 }), fc.double({ min: 0, max: 0.999999, noNaN: true }), (n, r) => {
        const d = fullJitterDelay(n, 100, 10_000, () => r);
        assert.ok(d >= 0 && d < Math.min(10_000, 100 * 2 ** n));
      }),
    );
  });

  test('poll intervals grow to the cap with ±20 % jitter', () => {
    assert.equal(
      nextPollInterval(null, 1000, 8000, () => 0.5),
      1000,
    );
    assert.equal(
      nextPollInterval(1000, 1000, 8000, () => 0.5),
      2000,
    );
    assert.equal(
      nextPollInterval(8000, 1000, 8000, () => 0.5),
      8000,
    );
    assert.ok(nextPollInterval(8000, 1000, 8000, () => 0.999) <= 8000);
  });

  test('a retry delay plus up to half again: never shorter than asked, never over one and a half times', () => {
    assert.equal(
      plusUpToHalf(2_000, () => 0),
      2_000,
    );
    assert.equal(
      plusUpToHalf(2_000, () => 0.5),
      2_500,
    );
    assert.equal(
      plusUpToHalf(2_000, () => 0.999999),
      3_000,
    );
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 600_000 }), fc.double({ min: 0, max: 0.999999, noNaN: true }), (ms, r) => {
        const d = plusUpToHalf(ms, () => r);
        assert.ok(Number.isInteger(d) && d >= ms && d <= Math.round(ms * 1.5));
      }),
    );
  });
});

describe('canonical JSON', () => {
  test('key order does not change the serialisation', () => {
    assert.equal(canonicalJson({ b: 1, a: { d: [1, { y: 2, x: 1 }], c: null } }), canonicalJson({ a: { c: null, d: [1, { x: 1, y: 2 }] }, b: 1 }));
  });
});

describe('state machine', () => {
  const events: TaskEvent[] = [
    { type: 'DISPATCH' },
    { type: 'ATTEMPT_PREPARED' },
    { type: 'SUBMIT_ACCEPTED' },
    { type: 'SUBMIT_REJECTED', retryable: true },
    { type: 'SUBMIT_REJECTED', retryable: false },
    { type: 'SUBMIT_OUTCOME_UNKNOWN' },
    ...PROVIDER_JOB_STATES.map((state) => ({ type: 'PROVIDER_STATE' as const, state })),
    { type: 'CANCEL' },
    { type: 'OUTPUT_FETCH_STARTED' },
    { type: 'OUTPUT_STORED' },
    { type: 'OUTPUT_DEADLINE_NEAR' },
    { type: 'OUTPUT_LOST' },
    { type: 'MEDIA_VALID' },
    { type: 'MEDIA_INVALID' },
    { type: 'ESCALATE' },
  ];

  test('every decision moves only along an allowed edge', () => {
    for (const from of TASK_STATES) {
      for (const e of events) {
        const d = decide(from, e);
        if (d.kind === 'move') assert.ok(canTransition(from, d.to), `${from} --${JSON.stringify(e)}--> ${d.to}`);
      }
    }
  });

  test('terminal states have no way out', () => {
    for (const s of TASK_STATES.filter((x) => isTerminal(x))) {
      assert.deepEqual(ALLOWED_TRANSITIONS[s], []);
      for (const e of events) assert.equal(decide(s, e).kind, 'noop');
    }
  });

  test('any event sequence from QUEUED never leaves a terminal state', () => {
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...events), { maxLength: 40 }), (seq) => {
        let s: TaskStatus = 'QUEUED';
        let terminal: TaskStatus | null = null;
        for (const e of seq) {
          const d = decide(s, e);
          if (d.kind === 'move') s = d.to;
          if (terminal) assert.equal(s, terminal);
          if (isTerminal(s)) terminal = s;
        }
      }),
    );
  });

  test('a late "running" after "succeeded" changes nothing', () => {
    const after = decide('RUNNING', { type: 'PROVIDER_STATE', state: 'succeeded' });
    assert.deepEqual(after, { kind: 'move', to: 'PROVIDER_SUCCEEDED' });
    assert.equal(decide('PROVIDER_SUCCEEDED', { type: 'PROVIDER_STATE', state: 'running' }).kind, 'noop');
  });
});
