// The latency window behind the router's p95 (domain/latency-window.ts, activities/routing.ts RouteStats).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LatencyWindow } from '../../domain/latency-window';

test('the latency window gives no p95 until it has enough samples, then the 95th percentile', () => {
  const w = new LatencyWindow(100, 20);
  for (let i = 1; i <= 19; i += 1) w.record(i);
  assert.equal(w.p95(), null);
  for (let i = 20; i <= 100; i += 1) w.record(i);
  assert.equal(w.p95(), 95);
});

test('the window keeps only its last `size` samples', () => {
  const w = new LatencyWindow(20, 20);
  for (let i = 0; i < 20; i += 1) w.record(1000);
  for (let i = 0; i < 20; i += 1) w.record(10);
  assert.equal(w.p95(), 10);
});
