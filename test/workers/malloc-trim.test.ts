// The worker's periodic give-back of free memory (WORKER_MALLOC_TRIM_INTERVAL_MS,
// WORKER_HEAP_COMPACTION, workers/malloc-trim.ts, docs/decisions/0058 and 0060): after a burst
// glibc keeps the free pages in the middle of its heaps, and V8 its emptied old-generation pages;
// a trim gives back the first, a compaction the second. Each burst is played in a child process
// with the worker's allocator settings (MALLOC_ARENA_MAX=2), given back one way or not at all.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import { ConfigError, loadConfig } from '../../config/env';
import { runCommand } from '../../harness/processes';
import { nodeBinary } from '../../harness/tools';
import {
  GIVE_BACK_MIN_BYTES,
  afterCompaction,
  afterTrim,
  compactionDue,
  heapUnusedBytes,
  initialGateState,
  startMallocTrimmer,
  trimDue,
  type Readings,
  type TrimOutcome,
} from '../../workers/malloc-trim';
import { testConfig } from '../support/stack';

interface Fragmented {
  base: number;
  full: number;
  freed: number;
  after: number;
  unusedFreed: number;
  unusedAfter: number;
  outcome: TrimOutcome | null;
}

/** A burst played in a child process on one heap, then given back (or not) one way. */
async function burst(heap: 'native' | 'v8', mode: 'wait' | 'trim' | 'compact'): Promise<Fragmented> {
  const r = await runCommand(
    nodeBinary(),
    ['--expose-gc', '--import', 'tsx', 'test/fixtures/scripts/fragmented-heap.ts', heap, mode],
    { ...process.env, MALLOC_ARENA_MAX: '2' },
    { timeoutMs: 60_000 },
  );
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Fragmented;
}

const MB = 2 ** 20;
const mb = (bytes: number) => Math.round(bytes / MB);

/** This process's full GC, for the tests that free memory on purpose (the flag is set only to make one context). */
function collector(): () => void {
  v8.setFlagsFromString('--expose-gc');
  try {
    return vm.runInNewContext('gc') as () => void;
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
}

describe('the worker malloc trim and heap compaction', () => {
  test('trims once a minute and compacts by default; 0 turns both off; an interval under 10 s, or a compaction flag not a boolean, is refused, naming the field', () => {
    assert.equal(testConfig().WORKER_MALLOC_TRIM_INTERVAL_MS, 60_000);
    assert.equal(testConfig().WORKER_HEAP_COMPACTION, true);
    assert.equal(testConfig({ WORKER_HEAP_COMPACTION: 'false' }).WORKER_HEAP_COMPACTION, false);
    assert.equal(startMallocTrimmer(testConfig({ WORKER_MALLOC_TRIM_INTERVAL_MS: '0' }).WORKER_MALLOC_TRIM_INTERVAL_MS), null);
    for (const [field, bad] of [
      ['WORKER_MALLOC_TRIM_INTERVAL_MS', '-1'],
      ['WORKER_MALLOC_TRIM_INTERVAL_MS', '60'],
      ['WORKER_MALLOC_TRIM_INTERVAL_MS', '9999'],
      ['WORKER_HEAP_COMPACTION', 'sometimes'],
    ] as const)
      assert.throws(
        () => loadConfig({ ...process.env, NODE_ENV: 'test', [field]: bad }),
        (err: unknown) => err instanceof ConfigError && err.message.includes(field),
        `${field}=${bad}`,
      );
  });

  test('after a burst of native allocations, glibc keeps the freed pages until a trim gives them back', async () => {
    const [kept, trimmed] = [await burst('native', 'wait'), await burst('native', 'trim')];
    // The burst took ~96 MB; seven eighths of it was freed, and without a trim nearly all of it
    // stays resident (the control: this is what the worker looked like after its intake).
    for (const r of [kept, trimmed]) assert.ok(r.full - r.base >= 80 * MB, `burst ${mb(r.full - r.base)} MB`);
    assert.ok(kept.full - kept.after <= 16 * MB, `without a trim ${mb(kept.full - kept.after)} MB went back`);
    // The trim gives back most of the freed ~84 MB, and says so.
    assert.ok(trimmed.full - trimmed.after >= 60 * MB, `with a trim ${mb(trimmed.full - trimmed.after)} MB went back`);
    assert.ok(trimmed.outcome && trimmed.outcome.releasedBytes >= 50 * MB, `the trim reported ${JSON.stringify(trimmed.outcome)}`);
    assert.equal(trimmed.outcome.compactionSeconds, null, 'no compaction asked for');
  });

  test('after a burst of objects, V8 keeps the emptied old-generation pages: a trim gives back nothing, a compaction gives them back', async () => {
    const [kept, trimmed, compacted] = [await burst('v8', 'wait'), await burst('v8', 'trim'), await burst('v8', 'compact')];
    // ~120 MB of objects, seven eighths of them collected: the pages stay, resident and unused.
    for (const r of [kept, trimmed, compacted]) {
      assert.ok(r.full - r.base >= 100 * MB, `burst ${mb(r.full - r.base)} MB`);
      assert.ok(r.unusedFreed >= 32 * MB, `old-generation pages unused after the collections: ${mb(r.unusedFreed)} MB`);
    }
    assert.ok(kept.freed - kept.after <= 16 * MB, `waiting, ${mb(kept.freed - kept.after)} MB went back`);
    assert.ok(trimmed.freed - trimmed.after <= 16 * MB, `a malloc trim alone gave back ${mb(trimmed.freed - trimmed.after)} MB`);
    assert.ok(compacted.freed - compacted.after >= 100 * MB, `a compaction gave back ${mb(compacted.freed - compacted.after)} MB`);
    assert.ok(compacted.unusedAfter < 16 * MB, `unused after the compaction: ${mb(compacted.unusedAfter)} MB`);
    assert.ok(
      compacted.outcome && compacted.outcome.compactionSeconds !== null && compacted.outcome.releasedBytes >= 100 * MB,
      JSON.stringify(compacted.outcome),
    );
  });

  test('the gates: the first tick trims; a trim follows 16 MB freed, or 16 MB of growth with 16 MB free; a compaction follows 16 MB emptied, counted from the tick after the last, and backs off when it gave back little', () => {
    const r = (anonMb: number, freeMb: number | null, unusedMb: number): Readings => ({
      anonBytes: anonMb * MB,
      mallocFreeBytes: freeMb === null ? null : freeMb * MB,
      heapUnusedBytes: unusedMb * MB,
    });
    let s = initialGateState();
    assert.equal(trimDue(s, r(100, 0, 0)).due, true, 'the first tick trims');
    s = afterTrim(s, r(100, 20, 0));
    assert.equal(trimDue(s, r(100, 20, 0)).due, false, 'at rest');
    assert.equal(trimDue(s, r(140, 20, 0)).due, true, 'grown 40 MB with 20 MB free: a burst reused what the last trim gave back');
    assert.equal(trimDue(s, r(140, 4, 0)).due, false, 'grown, but under 16 MB free: nothing to give back');
    // A burst's end: free bytes fall while it runs, then rise 30 MB above that low; nothing grew.
    s = trimDue(s, r(100, 2, 0)).state;
    assert.equal(trimDue(s, r(100, 32, 0)).due, true, 'freed 30 MB since the lowest reading');
    assert.equal(trimDue(afterTrim(s, r(90, 32, 0)), r(90, 32, 0)).due, false, 'after that trim, at rest again');
    // Without mallinfo2: growth alone, as before it.
    const old = afterTrim(initialGateState(), r(100, null, 0));
    assert.equal(trimDue(old, r(110, null, 0)).due, false);
    assert.equal(trimDue(old, r(120, null, 0)).due, true);

    // Compaction: the first reading is the baseline, then 16 MB emptied above the lowest.
    let c = initialGateState();
    let g = compactionDue(c, r(0, 0, 30));
    assert.equal(g.due, false, 'the first reading only sets the baseline');
    g = compactionDue(g.state, r(0, 0, 10));
    g = compactionDue(g.state, r(0, 0, 25));
    assert.equal(g.due, false, '15 MB above the lowest');
    g = compactionDue(g.state, r(0, 0, 26));
    assert.equal(g.due, true, '16 MB above the lowest');
    // Right after a compaction the heap is at a floor the next ordinary GC leaves: no baseline from it.
    c = afterCompaction(g.state, 40 * MB);
    assert.equal(c.lowestUnused, null);
    assert.equal(c.compactionGrowth, GIVE_BACK_MIN_BYTES);
    g = compactionDue(c, r(0, 0, 12));
    assert.equal(compactionDue(g.state, r(0, 0, 20)).due, false, 'an ordinary GC leaving 8 MB more is not a burst');
    // A compaction that gave back little: the next waits for twice as much, up to 256 MB; a good one resets it.
    c = afterCompaction(g.state, 2 * MB);
    assert.equal(c.compactionGrowth, 2 * GIVE_BACK_MIN_BYTES);
    for (let i = 0; i < 10; i++) c = afterCompaction(c, 0);
    assert.equal(c.compactionGrowth, 256 * MB);
    assert.equal(afterCompaction(c, 64 * MB).compactionGrowth, GIVE_BACK_MIN_BYTES);
  });

  test('a tick on the real allocators: trims at first, not at rest, after a burst that ends between ticks, and compacts after a burst of objects; workflow contexts get no gc global', async () => {
    const gc = collector();
    const settle = async () => {
      gc();
      await new Promise((r) => setTimeout(r, 200));
      gc();
    };
    const trimmer = startMallocTrimmer(3_600_000);
    assert.ok(trimmer, 'glibc malloc_trim is available on this Linux');
    assert.deepEqual(trimmer.available, { trim: true, mallocFreeBytes: true, compaction: true });
    assert.equal(vm.runInNewContext('typeof gc'), 'undefined', 'a context made after the trimmer started has no gc');
    try {
      const first = await trimmer.tick();
      assert.ok(first && first.seconds !== null, 'the first tick trims');
      assert.equal(await trimmer.tick(), null, 'at rest, nothing');
      // 48 MB of native allocations come and go between two ticks.
      let held: Buffer[] | null = Array.from({ length: 12_000 }, () => Buffer.allocUnsafeSlow(4_000).fill(1));
      assert.equal(held.length, 12_000);
      held = null;
      await settle();
      const afterBurst = await trimmer.tick();
      assert.ok(afterBurst && afterBurst.seconds !== null, 'a burst that ended between ticks is trimmed');
      assert.ok(afterBurst.releasedBytes >= 24 * MB, `and gives back ${mb(afterBurst.releasedBytes)} MB`);
      assert.equal(await trimmer.tick(), null, 'then at rest again');
      // A burst of objects, seven eighths collected: the old generation's emptied pages.
      let objects: unknown[] = Array.from({ length: 1_200_000 }, (_, i) => ({ id: i, name: `task-${i}`, steps: [i, i + 1] }));
      await settle();
      objects = objects.filter((_, i) => i % 8 === 0);
      await settle();
      const unused = heapUnusedBytes();
      assert.ok(unused >= 32 * MB, `the collections left ${mb(unused)} MB of the old generation unused`);
      const compacted = await trimmer.tick();
      assert.ok(compacted && compacted.compactionSeconds !== null, `a tick compacts (${objects.length} objects kept): ${JSON.stringify(compacted)}`);
      assert.ok(heapUnusedBytes() < 16 * MB, `unused after it: ${mb(heapUnusedBytes())} MB`);
      assert.ok(compacted.releasedBytes >= 16 * MB, `and gives back ${mb(compacted.releasedBytes)} MB`);
    } finally {
      trimmer.stop();
    }
  });

  test('with compaction off, emptied heap pages neither compact nor trim tick after tick', async () => {
    const gc = collector();
    const trimmer = startMallocTrimmer(3_600_000, {}, { compactHeap: false })!;
    try {
      assert.equal(trimmer.available.compaction, false);
      await trimmer.tick();
      let objects: unknown[] = Array.from({ length: 1_200_000 }, (_, i) => ({ id: i, name: `task-${i}`, steps: [i, i + 1] }));
      gc();
      objects = objects.filter((_, i) => i % 8 === 0);
      gc();
      await trimmer.tick(); // whatever the collections freed in malloc's heaps
      const later = [await trimmer.tick(), await trimmer.tick(), await trimmer.tick()];
      assert.deepEqual(later, [null, null, null], `${objects.length} objects kept; ticks after: ${JSON.stringify(later)}`);
    } finally {
      trimmer.stop();
    }
  });

  test('one trim at a time: a call while one runs is refused, not queued', async () => {
    const trimmer = startMallocTrimmer(3_600_000)!;
    try {
      const [a, b] = await Promise.all([trimmer.trimNow(), trimmer.trimNow()]);
      assert.ok(a !== null && b === null, `overlapping trims: ${JSON.stringify([a, b])}`);
      assert.ok(await trimmer.trimNow(), 'the next trim runs');
    } finally {
      trimmer.stop();
    }
  });
});
