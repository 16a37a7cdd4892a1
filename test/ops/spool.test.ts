// The callback spool on its own: appended lines survive to a replay, a replay that fails half
// way keeps its file (at-least-once; the inbox dedupes), a torn last line is skipped, and files
// left by a dead process are adopted.
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { createCallbackSpool, type SpooledCallback } from '../../api/spool';
import { spoolDirFor, spoolStatus } from '../../storage/spool-files';
import { testLogger } from '../support/stack';

const tmpDir = () => path.join(os.tmpdir(), `vidorch-spool-test-${process.pid}-${randomBytes(3).toString('hex')}`);
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
const rec = (id: string) => ({
  provider: 'replicate',
  token: `tok-${id}`,
  receivedAt: new Date().toISOString(),
  receivedRegion: 'region-a',
  job: job(id),
  providerEventId: `evt-${id}`,
  needsRefetch: false,
  payload: { id },
  why: 'database-unavailable' as const,
});

test('spooled callbacks are replayed in order; a failed replay keeps the file and the next pass delivers everything again', async () => {
  const dir = tmpDir();
  const spool = createCallbackSpool({ dir, logger: testLogger, leaseMs: 30_000, isTransient: () => true, maxBytes: 1 << 30 });
  try {
    await Promise.all(['a', 'b', 'c'].map((id) => spool.append(rec(id))));
    assert.equal(await spool.pending(), 3);

    const seen: string[] = [];
    const failing = await spool.replay(async (r) => {
      if (r.job.jobId === 'b') throw new Error('database went away again');
      seen.push(r.job.jobId);
    });
    assert.match(failing.error ?? '', /went away/);
    assert.equal(await spool.pending(), 3, 'the file stays until every line is in');

    const again: SpooledCallback[] = [];
    const pass = await spool.replay(async (r) => {
      again.push(r);
    });
    assert.equal(pass.error, null);
    assert.deepEqual(again.map((r) => r.job.jobId).sort(), ['a', 'b', 'c']);
    assert.ok(again.every((r) => r.v === 1 && r.spoolId && r.providerEventId === `evt-${r.job.jobId}`));
    assert.equal(await spool.pending(), 0);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('a torn last line is skipped, and files of a dead process are adopted and replayed', async () => {
  const dir = tmpDir();
  await fs.mkdir(dir, { recursive: true });
  try {
    // A process that died mid-append: pid 2^22+ is never a live pid here.
    const line = JSON.stringify({ v: 1, spoolId: 'x', ...rec('orphan') });
    await fs.writeFile(path.join(dir, 'active-4194999-abcdef-000000.ndjson'), `${line}\n{"v":1,"provider":"repl`);
    const spool = createCallbackSpool({ dir, logger: testLogger, leaseMs: 30_000, isTransient: () => true, maxBytes: 1 << 30 });
    const ids: string[] = [];
    const pass = await spool.replay(async (r) => {
      ids.push(r.job.jobId);
    });
    assert.deepEqual(ids, ['orphan']);
    assert.equal(pass.corrupt, 1);
    assert.deepEqual(await fs.readdir(dir), []);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('a count taken while the replayer seals and claims files never misses a line not yet in the inbox', async () => {
  const dir = tmpDir();
  const spool = createCallbackSpool({ dir, logger: testLogger, leaseMs: 30_000, isTransient: () => true, maxBytes: 1 << 30 });
  try {
    // Each round: a line is appended, then replayed (sealed active → ready, claimed ready →
    // replaying, ingested, removed) while counts are taken as fast as they come. A count of 0
    // before the line is in would tell a caller waiting for "nothing pending" that it may look
    // in the inbox when the line is not there yet.
    const missed: number[] = [];
    let counts = 0;
    for (let round = 0; round < 150; round += 1) {
      await spool.append(rec(`r${round}`));
      let ingested = false;
      let done = false;
      const pass = spool
        .replay(async () => {
          await new Promise((resolve) => setImmediate(resolve));
          ingested = true;
        })
        .finally(() => {
          done = true;
        });
      while (!done) {
        // A 0 is wrong only for a count that ended before the line was in.
        const n = await spool.pending();
        counts += 1;
        if (n === 0 && !ingested) missed.push(round);
        const status = await spoolStatus(dir);
        counts += 1;
        if (status.pending === 0 && !ingested) missed.push(round);
      }
      assert.equal((await pass).error, null);
    }
    assert.deepEqual(missed, [], `${missed.length} of ${counts} counts taken before the line was in said nothing was pending`);
    assert.equal(await spool.pending(), 0);
  } finally {
    spool.close();
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('an acknowledged line the replay cannot use is kept as a dead letter, never dropped; only a torn last line is skipped', async () => {
  const dir = tmpDir();
  await fs.mkdir(dir, { recursive: true });
  try {
    const good = JSON.stringify({ v: 1, spoolId: 'g', ...rec('good') });
    const otherVersion = JSON.stringify({ v: 2, spoolId: 'n', provider: 'replicate', job: job('v2') });
    await fs.writeFile(path.join(dir, 'ready-00000009.ndjson'), `${good}\n{not json at all\n${otherVersion}\n${good.slice(0, 20)}`);
    const spool = createCallbackSpool({ dir, logger: testLogger, leaseMs: 30_000, isTransient: () => true, maxBytes: 1 << 30 });
    const ids: string[] = [];
    const pass = await spool.replay(async (r) => {
      ids.push(r.job.jobId);
    });
    spool.close();
    assert.deepEqual(ids, ['good']);
    assert.equal(pass.corrupt, 1, 'the torn last line');
    assert.equal(pass.deadLettered, 2, 'the unreadable line before it and the line of another version');
    const status = await spoolStatus(dir);
    assert.equal(status.deadLetters, 2);
    assert.equal(status.pending, 0);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('each database has its own spool directory, so a callback is only replayed into the database it was meant for', () => {
  const a = spoolDirFor('.data/spool', 'postgres://postgres@127.0.0.1:5432/vidorch');
  const b = spoolDirFor('.data/spool', 'postgres://postgres@127.0.0.1:5432/vidorch_test_1');
  assert.notEqual(a, b);
  assert.ok(a.endsWith(path.join('spool', 'vidorch')));
});
