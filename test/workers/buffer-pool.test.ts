// The worker's Buffer pool (WORKER_BUFFER_POOL_BYTES, docs/decisions/0053-worker-buffer-pool.md):
// a small Buffer kept alive keeps its whole pool chunk, so the chunk size bounds what each kept
// completion can pin. node:test runs this file in a process of its own, so changing
// Buffer.poolSize here touches no other file.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { ConfigError, loadConfig } from '../../config/env';
import { applyBufferPool } from '../../workers/tuning';
import { testConfig } from '../support/stack';

const nodeDefault = Buffer.poolSize;
after(() => {
  Buffer.poolSize = nodeDefault;
});

/**
 * What `kept` small Buffers pin when other small allocations come between them (as the worker's
 * activities allocate between two completions of one cached run): the distinct chunks behind
 * them and their bytes.
 */
function pinnedBy(kept: number): { chunks: number; bytes: number } {
  const keep: Buffer[] = [];
  for (let i = 0; i < kept; i++) {
    keep.push(Buffer.allocUnsafe(24));
    // Filler that is dropped at once: enough small allocations to move past the current chunk.
    for (let used = 0; used < Buffer.poolSize; used += 512) Buffer.allocUnsafe(512);
  }
  const chunks = new Set(keep.map((b) => b.buffer));
  return { chunks: chunks.size, bytes: [...chunks].reduce((sum, ab) => sum + ab.byteLength, 0) };
}

describe('the worker Buffer pool', () => {
  test('defaults to 8 KiB; 0 keeps Node’s; out of range names the field', () => {
    assert.equal(testConfig().WORKER_BUFFER_POOL_BYTES, 8_192);
    assert.equal(testConfig({ WORKER_BUFFER_POOL_BYTES: '0' }).WORKER_BUFFER_POOL_BYTES, 0);
    assert.throws(
      () => loadConfig({ ...process.env, NODE_ENV: 'test', WORKER_BUFFER_POOL_BYTES: '-1' }),
      (err: unknown) => err instanceof ConfigError && err.message.includes('WORKER_BUFFER_POOL_BYTES'),
    );
  });

  test('0 leaves Node’s pool as it is', () => {
    applyBufferPool(0);
    assert.equal(Buffer.poolSize, nodeDefault);
  });

  test('small Buffers kept across other allocations pin one chunk each, bounded by the pool size', () => {
    Buffer.poolSize = 65_536;
    const wide = pinnedBy(100);
    applyBufferPool(8_192);
    assert.equal(Buffer.poolSize, 8_192);
    // A new size applies from the next chunk: use up the 64 KiB one in use (how much of it is left
    // depends on what loading the modules allocated), so the kept Buffers do not share it.
    for (const current = Buffer.allocUnsafe(1).buffer; Buffer.allocUnsafe(512).buffer === current;);
    const narrow = pinnedBy(100);
    // Each kept 24-byte Buffer sits in a chunk of its own either way…
    assert.ok(wide.chunks >= 99 && narrow.chunks >= 99, `chunks ${wide.chunks} / ${narrow.chunks}`);
    // …and what they pin is the chunk size times their number: 6.4 MB against 0.8 MB.
    assert.ok(wide.bytes >= 99 * 65_536, `64 KiB chunks pinned ${wide.bytes} B`);
    assert.ok(narrow.bytes <= 100 * 8_192, `8 KiB chunks pinned ${narrow.bytes} B`);
  });
});
