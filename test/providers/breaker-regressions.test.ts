// Regressions found by the resilience benchmark.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CircuitBreaker } from '../../providers/resilience/circuit-breaker';
import { RetryBudget } from '../../providers/resilience/retry-budget';

test('a half-open probe frees its slot even when the clock moves between reads (no stuck "probes-busy")', () => {
  let t = 0;
  const b = new CircuitBreaker({ now: () => (t += 2), minimumRequests: 2, failureRateThreshold: 0.5, openMs: 100, halfOpenMaxProbes: 2, halfOpenSuccesses: 3 });
  for (let i = 0; i < 2; i += 1) {
    const d = b.tryAcquire();
    assert.ok(d.allowed);
    b.onFailure(d.ticket);
  }
  assert.equal(b.state, 'open');
  t += 200;
  for (let i = 0; i < 3; i += 1) {
    const d = b.tryAcquire();
    assert.ok(d.allowed, `probe ${i + 1} admitted (state ${b.state})`);
    b.onSuccess(d.ticket);
  }
  assert.equal(b.state, 'closed');
});

test('a released ticket records nothing: refusals elsewhere do not close a half-open breaker', () => {
  let t = 0;
  const b = new CircuitBreaker({ now: () => t, minimumRequests: 2, failureRateThreshold: 0.5, openMs: 100, halfOpenMaxProbes: 1, halfOpenSuccesses: 3 });
  for (let i = 0; i < 2; i += 1) {
    const d = b.tryAcquire();
    assert.ok(d.allowed);
    b.onFailure(d.ticket);
  }
  t += 200;
  for (let i = 0; i < 5; i += 1) {
    const d = b.tryAcquire();
    assert.ok(d.allowed, 'the probe slot was given back each time');
    b.release(d.ticket);
  }
  assert.equal(b.state, 'half-open');
});

test('a successful retry gives its retry back, so a healthy provider is not starved by the budget', () => {
  const b = new RetryBudget({ now: () => 0, ratio: 0.1, minRetriesPerSecond: 0, windowMs: 10_000 });
  for (let i = 0; i < 10; i += 1) b.recordRequest();
  assert.equal(b.tryRetry(), true);
  assert.equal(b.tryRetry(), false);
  b.refund();
  assert.equal(b.tryRetry(), true);
});
