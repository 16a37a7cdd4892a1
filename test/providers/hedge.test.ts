// Hedged reads: one hedge at most, only after the observed p95, first answer wins.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LatencyWindow, hedgedRead } from '../../providers/resilience/hedge';

const after = <T>(ms: number, value: T, signal: AbortSignal, fail = false) =>
  new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => (fail ? reject(new Error(`failed ${String(value)}`)) : resolve(value)), ms);
    signal.addEventListener('abort', () => {
      clearTimeout(t);
      reject(new Error('aborted'));
    });
  });

test('a fast first read is not hedged', async () => {
  let calls = 0;
  const r = await hedgedRead((s) => (calls++, after(5, 'a', s)), 50);
  assert.deepEqual(r, { value: 'a', hedged: false, winner: 0 });
  assert.equal(calls, 1);
});

test('a read slower than the hedge delay sends exactly one more; the faster answer wins and the loser is aborted', async () => {
  const aborted: number[] = [];
  let calls = 0;
  const r = await hedgedRead((s) => {
    const n = calls++;
    s.addEventListener('abort', () => aborted.push(n));
    return after(n === 0 ? 300 : 10, `r${n}`, s);
  }, 30);
  assert.deepEqual(r, { value: 'r1', hedged: true, winner: 1 });
  assert.equal(calls, 2);
  assert.deepEqual(aborted, [0]);
});

test('a first read that fails before the hedge is due is not hedged: the error surfaces', async () => {
  let calls = 0;
  await assert.rejects(
    hedgedRead((s) => (calls++, after(5, 'x', s, true)), 50),
    /failed x/,
  );
  await new Promise((r) => setTimeout(r, 80));
  assert.equal(calls, 1);
});

test('when the hedge fails the first read can still win; both failing rejects', async () => {
  let calls = 0;
  const r = await hedgedRead((s) => {
    const n = calls++;
    return n === 0 ? after(100, 'slow-ok', s) : after(5, 'hedge', s, true);
  }, 20);
  assert.equal(r.value, 'slow-ok');
  calls = 0;
  await assert.rejects(
    hedgedRead((s) => after(calls++ === 0 ? 60 : 5, 'y', s, true), 20),
    /failed y/,
  );
});

test('the latency window gives no p95 until it has enough samples, then the 95th percentile', () => {
  const w = new LatencyWindow(100, 20);
  for (let i = 1; i <= 19; i += 1) w.record(i);
  assert.equal(w.p95(), null);
  for (let i = 20; i <= 100; i += 1) w.record(i);
  assert.equal(w.p95(), 95);
});
