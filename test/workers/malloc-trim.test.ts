// The worker's periodic malloc trim (WORKER_MALLOC_TRIM_INTERVAL_MS, workers/malloc-trim.ts,
// docs/decisions/0058-worker-malloc-trim.md): after a burst glibc keeps the free pages in the
// middle of its heaps; a trim gives them back. The burst is played in a child process with the
// worker's allocator settings (MALLOC_ARENA_MAX=2), once with a trim and once without.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../../config/env';
import { runCommand } from '../../harness/processes';
import { nodeBinary } from '../../harness/tools';
import { startMallocTrimmer } from '../../workers/malloc-trim';
import { testConfig } from '../support/stack';

interface Fragmented {
  base: number;
  full: number;
  freed: number;
  after: number;
  trim: { releasedBytes: number; seconds: number } | null;
}

async function burst(mode: 'trim' | 'wait'): Promise<Fragmented> {
  const r = await runCommand(
    nodeBinary(),
    ['--expose-gc', '--import', 'tsx', 'test/fixtures/scripts/fragmented-heap.ts', mode],
    { ...process.env, MALLOC_ARENA_MAX: '2' },
    { timeoutMs: 60_000 },
  );
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as Fragmented;
}

const MB = 2 ** 20;

describe('the worker malloc trim', () => {
  test('defaults to once a minute; 0 turns it off; under 10 s or negative is refused, naming the field', () => {
    assert.equal(testConfig().WORKER_MALLOC_TRIM_INTERVAL_MS, 60_000);
    assert.equal(startMallocTrimmer(testConfig({ WORKER_MALLOC_TRIM_INTERVAL_MS: '0' }).WORKER_MALLOC_TRIM_INTERVAL_MS), null);
    for (const bad of ['-1', '60', '9999'])
      assert.throws(
        () => loadConfig({ ...process.env, NODE_ENV: 'test', WORKER_MALLOC_TRIM_INTERVAL_MS: bad }),
        (err: unknown) => err instanceof ConfigError && err.message.includes('WORKER_MALLOC_TRIM_INTERVAL_MS'),
        bad,
      );
  });

  test('after a burst, the freed pages stay resident until a trim gives them back', async () => {
    const [kept, trimmed] = [await burst('wait'), await burst('trim')];
    // The burst took ~96 MB; seven eighths of it was freed, and without a trim nearly all of it
    // stays resident (the control: this is what the worker looked like after its intake).
    for (const r of [kept, trimmed]) assert.ok(r.full - r.base >= 80 * MB, `burst ${Math.round((r.full - r.base) / MB)} MB`);
    assert.ok(kept.full - kept.after <= 16 * MB, `without a trim ${Math.round((kept.full - kept.after) / MB)} MB went back`);
    // The trim gives back most of the freed ~84 MB, and says so.
    assert.ok(trimmed.full - trimmed.after >= 60 * MB, `with a trim ${Math.round((trimmed.full - trimmed.after) / MB)} MB went back`);
    assert.ok(trimmed.trim && trimmed.trim.releasedBytes >= 50 * MB, `the trim reported ${JSON.stringify(trimmed.trim)}`);
  });

  test('the timer trims at its first tick, then only once anonymous memory has grown by 16 MB', async () => {
    const seen: number[] = [];
    const trimmer = startMallocTrimmer(50, { onTrim: (o) => seen.push(o.seconds) });
    assert.ok(trimmer, 'glibc malloc_trim is available on this Linux');
    const until = async (n: number) => {
      const deadline = Date.now() + 5_000;
      while (seen.length < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    };
    try {
      await until(1);
      assert.equal(seen.length, 1, 'the first tick trims');
      // At rest nothing grows: ten ticks, no trim (each would stall allocating threads for nothing).
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(seen.length, 1, `trims at rest: ${seen.length - 1}`);
      // 48 MB of native allocations, kept until the next trim: memory has grown, so it trims.
      const held = Array.from({ length: 12_000 }, () => Buffer.allocUnsafeSlow(4_000).fill(1));
      await until(2);
      // (held is read here, so it stays alive until the trim has come.)
      assert.equal(seen.length, 2, `trims after ${(held.length * 4_000) / MB} MB of growth: ${seen.length - 1}`);
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
