// The capacity model as the drain benchmark and the temporal-outage drill use it:
// B / (μ − λ), μ the best rate over a window of the drain, never a drain when μ ≤ λ.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { drainFigures, drainRatio, peakRate, predictedDrainSeconds } from '../../bench/drills/capacity-model';

test('a backlog drains in B / (μ − λ), and never when arrivals match or beat the service rate', () => {
  assert.equal(predictedDrainSeconds(100, 12, 2), 10);
  assert.equal(predictedDrainSeconds(100, 2, 2), null);
  assert.equal(predictedDrainSeconds(100, 1, 2), null);
  assert.equal(predictedDrainSeconds(0, 1, 2), 0);
});

test('μ is the best rate sustained over a full window, ignoring a slow start and samples after the drain', () => {
  // 1/s for the first 10 s (cold), then 5/s until t = 30, then flat (drained at t = 30).
  const samples = Array.from({ length: 41 }, (_, t) => ({ t, done: t <= 10 ? t : Math.min(10 + 5 * (t - 10), 110) }));
  assert.equal(peakRate(samples, 10), 5);
  // Only windows ending by t = 15: the best is 10..15 mixed with the cold start.
  assert.equal(peakRate(samples, 10, 15), (35 - 5) / 10);
  assert.equal(peakRate(samples.slice(0, 5), 10), 0, 'fewer samples than a window give no rate');
});

test('the ratio compares the measured drain with the prediction', () => {
  const d = drainFigures(100, 12, 2, 15);
  assert.equal(d.predictedSeconds, 10);
  assert.equal(drainRatio(d), 1.5);
  assert.equal(drainRatio(drainFigures(100, 2, 2, 15)), null);
  assert.equal(drainRatio(drainFigures(100, 12, 2, null)), null);
});
