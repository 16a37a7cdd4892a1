// temporal/wakes.ts: wake signals after callbacks, at most one in flight per task, and always one
// sent after the last wake (so no inbox row committed before a wake is left without a signal);
// at most maxInFlight signals at once across tasks, the others queued once per task.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createTaskWaker } from '../../temporal/wakes';

/** A signal whose answers the test releases one by one. */
function heldSignals() {
  const calls: { taskId: string; at: number; release: (ok: boolean) => void }[] = [];
  let clock = 0;
  const signal = (taskId: string) =>
    new Promise<boolean>((resolve, reject) => {
      calls.push({ taskId, at: ++clock, release: (ok) => (ok ? resolve(true) : reject(new Error('temporal unavailable'))) });
    });
  return { calls, signal, tick: () => ++clock };
}
const settle = () => new Promise((r) => setImmediate(r));

describe('the task waker', () => {
  test('one wake, one signal; the entry is gone once it returns', async () => {
    const h = heldSignals();
    const w = createTaskWaker(h.signal, { maxInFlight: 16 });
    w.wake('a');
    assert.equal(h.calls.length, 1);
    assert.equal(w.inFlight(), 1);
    h.calls[0]!.release(true);
    await settle();
    assert.equal(w.inFlight(), 0);
    assert.deepEqual(w.stats(), { sent: 1, coalesced: 0, inFlight: 0, queued: 0 });
  });

  test('wakes while a signal is in flight fold into one more signal, sent after the last of them', async () => {
    const h = heldSignals();
    const w = createTaskWaker(h.signal, { maxInFlight: 16 });
    w.wake('a');
    const lastWakeAt: number[] = [];
    for (let i = 0; i < 10; i++) {
      w.wake('a');
      lastWakeAt.push(h.tick());
    }
    assert.equal(h.calls.length, 1, 'nothing more while one is in flight');
    h.calls[0]!.release(true);
    await settle();
    assert.equal(h.calls.length, 2, 'exactly one follow-up');
    assert.ok(h.calls[1]!.at > lastWakeAt.at(-1)!, 'the follow-up was sent after the last wake');
    h.calls[1]!.release(true);
    await settle();
    assert.equal(h.calls.length, 2);
    assert.equal(w.inFlight(), 0);
    assert.deepEqual(w.stats(), { sent: 2, coalesced: 9, inFlight: 0, queued: 0 });
  });

  test('tasks do not wait for each other, and a failed signal still sends its follow-up', async () => {
    const h = heldSignals();
    const w = createTaskWaker(h.signal, { maxInFlight: 16 });
    w.wake('a');
    w.wake('b');
    assert.deepEqual(
      h.calls.map((c) => c.taskId),
      ['a', 'b'],
    );
    w.wake('a');
    h.calls[0]!.release(false);
    await settle();
    assert.deepEqual(
      h.calls.map((c) => c.taskId),
      ['a', 'b', 'a'],
      'the follow-up after a failure',
    );
    h.calls[2]!.release(true);
    h.calls[1]!.release(true);
    await settle();
    assert.equal(w.inFlight(), 0);
    w.wake('a');
    assert.equal(h.calls.length, 4, 'a later wake signals again');
  });

  test('past maxInFlight a wake queues once per task, first come first served, and is sent after its last wake', async () => {
    const h = heldSignals();
    const w = createTaskWaker(h.signal, { maxInFlight: 2 });
    w.wake('a');
    w.wake('b');
    w.wake('c');
    w.wake('d');
    const lastWakeOfC = (w.wake('c'), h.tick());
    assert.deepEqual(
      h.calls.map((c) => c.taskId),
      ['a', 'b'],
      'two in flight, c and d wait',
    );
    assert.equal(w.inFlight(), 2);
    assert.deepEqual(w.stats(), { sent: 2, coalesced: 1, inFlight: 2, queued: 2 }, 'c and d queued, c once');
    h.calls[0]!.release(true);
    await settle();
    assert.deepEqual(
      h.calls.map((c) => c.taskId),
      ['a', 'b', 'c'],
      'the first queued takes the place',
    );
    assert.deepEqual(w.stats(), { sent: 3, coalesced: 1, inFlight: 2, queued: 1 });
    assert.ok(h.calls[2]!.at > lastWakeOfC, 'sent after its last wake');
    h.calls[1]!.release(true);
    await settle();
    assert.deepEqual(
      h.calls.map((c) => c.taskId),
      ['a', 'b', 'c', 'd'],
    );
    h.calls[2]!.release(true);
    h.calls[3]!.release(true);
    await settle();
    assert.equal(w.inFlight(), 0);
    assert.deepEqual(w.stats(), { sent: 4, coalesced: 1, inFlight: 0, queued: 0 });
  });

  test('a task woken during its signal queues behind waiting tasks instead of keeping its place', async () => {
    const h = heldSignals();
    const w = createTaskWaker(h.signal, { maxInFlight: 1 });
    w.wake('a');
    w.wake('b');
    w.wake('a');
    h.calls[0]!.release(true);
    await settle();
    assert.deepEqual(
      h.calls.map((c) => c.taskId),
      ['a', 'b'],
      'b was waiting: it goes first',
    );
    h.calls[1]!.release(false);
    await settle();
    assert.deepEqual(
      h.calls.map((c) => c.taskId),
      ['a', 'b', 'a'],
      "then a's follow-up, after a failed signal too",
    );
    h.calls[2]!.release(true);
    await settle();
    assert.equal(w.inFlight(), 0);
    assert.deepEqual(w.stats(), { sent: 3, coalesced: 0, inFlight: 0, queued: 0 });
  });
});
