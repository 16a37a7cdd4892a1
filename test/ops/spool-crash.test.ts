// The spool's promise under a real crash: a callback whose append resolved (the provider got its
// 2xx) is replayed after the writing process is SIGKILLed mid-stream, and the torn record it
// may leave behind is skipped, not fatal. (fsync's part — surviving power loss, not only a
// process kill — cannot be shown without pulling the plug; the append waits for datasync.)
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { createCallbackSpool } from '../../api/spool';
import { startNodeProcess } from '../../harness';
import { testLogger } from '../support/stack';

const LEASE_MS = 400;

test('every acknowledged append survives a SIGKILL of the writer and is replayed once adopted; a torn tail is skipped', async () => {
  const dir = path.join(os.tmpdir(), `vidorch-spool-crash-${process.pid}-${randomBytes(3).toString('hex')}`);
  const acked = new Set<number>();
  let sawEnough!: () => void;
  const enough = new Promise<void>((r) => (sawEnough = r));
  const writer = startNodeProcess(
    'spool-writer',
    'test/fixtures/scripts/spool-writer.ts',
    {},
    {
      args: [dir, String(LEASE_MS)],
      log: (line) => {
        const m = /acked (\d+)/.exec(line);
        if (!m) return;
        acked.add(Number(m[1]));
        if (acked.size >= 200) sawEnough();
      },
    },
  );
  try {
    await Promise.race([enough, writer.exited.then(() => Promise.reject(new Error(`writer exited early: ${writer.recentOutput().join('\n')}`)))]);
    process.kill(writer.pid, 'SIGKILL');
    await writer.exited;
    // The dead writer's lease runs out; then its files are anyone's to adopt.
    await new Promise((r) => setTimeout(r, LEASE_MS * 1.5));

    const spool = createCallbackSpool({ dir, logger: testLogger, leaseMs: LEASE_MS, isTransient: () => true, maxBytes: 1 << 30 });
    const replayed: number[] = [];
    const pass = await spool.replay(async (rec) => {
      replayed.push((rec.payload as { n: number }).n);
    });
    assert.equal(pass.error, null);
    const got = new Set(replayed);
    const lost = [...acked].filter((n) => !got.has(n));
    assert.deepEqual(lost, [], `acknowledged but not replayed: ${lost.slice(0, 10).join(', ')}`);
    assert.equal(got.size, replayed.length, 'each record replayed once');
    assert.ok(pass.corrupt <= 1, `at most the one record being written when the kill came is torn (corrupt ${pass.corrupt})`);
    assert.equal(await spool.pending(), 0, 'the adopted file is gone after its replay');
  } finally {
    if (!writer.exitInfo) process.kill(writer.pid, 'SIGKILL');
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('an append that fails part way seals its file, so the next acknowledged append is not glued to a torn line', async () => {
  const dir = path.join(os.tmpdir(), `vidorch-spool-torn-${process.pid}-${randomBytes(3).toString('hex')}`);
  const spool = createCallbackSpool({ dir, logger: testLogger, leaseMs: LEASE_MS, isTransient: () => true, maxBytes: 1 << 30 });
  const base = {
    provider: 'replicate',
    receivedAt: new Date().toISOString(),
    receivedRegion: 'region-a',
    providerEventId: null,
    needsRefetch: false,
    why: 'database-unavailable' as const,
  };
  const job = (id: string) => ({
    jobId: id,
    state: 'succeeded' as const,
    rawStatus: 'succeeded',
    updatedAt: null,
    outputUrl: null,
    error: null,
    correlationToken: null,
    metrics: null,
  });
  try {
    await spool.append({ ...base, token: 'a', job: job('a'), payload: { id: 'a' } });
    // A write torn by the disk (ENOSPC, EIO): half a record at the end of the active file, and
    // the append that wrote it fails (here: a payload that cannot be serialised).
    const [active] = (await fs.readdir(dir)).filter((f) => f.startsWith('active-'));
    await fs.appendFile(path.join(dir, active!), '{"v":1,"spoolId":"torn","provider":"repl');
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    await assert.rejects(spool.append({ ...base, token: 'bad', job: job('bad'), payload: cyclic }));
    await spool.append({ ...base, token: 'b', job: job('b'), payload: { id: 'b' } });
    const seen: string[] = [];
    const pass = await spool.replay(async (rec) => {
      seen.push(rec.job.jobId);
    });
    assert.deepEqual(seen.sort(), ['a', 'b'], 'b was acknowledged and must not be lost to the torn line');
    assert.equal(pass.corrupt, 1);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});
