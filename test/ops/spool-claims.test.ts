// The spool never strands an acknowledged callback: files are owned by a per-process instance
// id and a lease, never by a pid (a dead process whose pid is ours — pid 1 in every container —
// is still dead), and a line that cannot be applied is set aside as a dead letter, counted and
// shown by `ops spool status`, without blocking the lines and files after it.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { createCallbackSpool, type CallbackSpool } from '../../api/spool';
import { requeueDeadLetters, spoolStatus } from '../../storage/spool-files';
import { testLogger } from '../support/stack';

const LEASE_MS = 300;
const tmpDir = () => path.join(os.tmpdir(), `vidorch-spool-claims-${process.pid}-${randomBytes(3).toString('hex')}`);
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
const rec = (id: string, provider = 'replicate') => ({
  provider,
  token: `tok-${id}`,
  receivedAt: new Date().toISOString(),
  receivedRegion: 'region-a',
  job: job(id),
  providerEventId: `evt-${id}`,
  needsRefetch: false,
  payload: { id },
  why: 'database-unavailable' as const,
});
class DatabaseDown extends Error {}
const open = (dir: string, onDeadLetter?: (provider: string) => void): CallbackSpool =>
  createCallbackSpool({
    dir,
    logger: testLogger,
    leaseMs: LEASE_MS,
    isTransient: (err) => err instanceof DatabaseDown,
    maxBytes: 1 << 30,
    ...(onDeadLetter ? { onDeadLetter } : {}),
  });

/** A process that appended `ids` and died: its lease is no longer renewed and runs out. */
async function deadWriter(dir: string, ids: string[]): Promise<void> {
  const spool = open(dir);
  for (const id of ids) await spool.append(rec(id));
  spool.close();
}
const leaseRunsOut = () => new Promise((r) => setTimeout(r, LEASE_MS * 1.5));

test('files of a dead process with our own pid (pid reuse) are adopted and replayed', async () => {
  const dir = tmpDir();
  try {
    // Same process, so the same pid: what a restarted container's pid 1 sees of its predecessor.
    await deadWriter(dir, ['x1', 'x2']);
    await leaseRunsOut();
    const spool = open(dir);
    const seen: string[] = [];
    const pass = await spool.replay(async (r) => {
      seen.push(r.job.jobId);
    });
    spool.close();
    assert.deepEqual(seen, ['x1', 'x2']);
    assert.equal(pass.error, null);
    assert.equal(await spool.pending(), 0);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test("a live process's active file is not taken from it while its lease is fresh", async () => {
  const dir = tmpDir();
  try {
    const writer = open(dir);
    await writer.append(rec('live'));
    const other = open(dir);
    const pass = await other.replay(async () => undefined);
    assert.equal(pass.replayed, 0, 'the live writer still owns its file');
    await writer.append(rec('live-2'));
    const own = await writer.replay(async () => undefined);
    assert.equal(own.replayed, 2, 'its owner replays both, nothing lost');
    writer.close();
    other.close();
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('an owner whose active file was adopted while it stalled writes its next record again: acknowledged means replayed', async () => {
  const dir = tmpDir();
  try {
    const writer = open(dir);
    await writer.append(rec('before'));
    // Another process took the file (the writer had stalled past its lease) and may read it at any time.
    const [active] = (await fs.readdir(dir)).filter((f) => f.startsWith('active-'));
    await fs.rename(path.join(dir, active!), path.join(dir, active!.replace(/^active-/, 'ready-')));
    const taken = (await fs.readFile(path.join(dir, active!.replace(/^active-/, 'ready-')), 'utf8')).split('\n').filter(Boolean);
    await fs.unlink(path.join(dir, active!.replace(/^active-/, 'ready-'))); // replayed and gone
    assert.equal(taken.length, 1);
    await writer.append(rec('after'));
    const seen: string[] = [];
    await writer.replay(async (r) => {
      seen.push(r.job.jobId);
    });
    assert.deepEqual(seen, ['after'], 'the record acknowledged after the takeover is not lost with the adopted file');
    writer.close();
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('a line that cannot be applied is set aside as a dead letter (counted, shown, requeueable); the lines and files after it are replayed', async () => {
  const dir = tmpDir();
  try {
    await deadWriter(dir, ['a', 'bad', 'c']);
    await deadWriter(dir, ['d']);
    await leaseRunsOut();
    const dead: string[] = [];
    const spool = open(dir, (provider) => dead.push(provider));
    const seen: string[] = [];
    const pass = await spool.replay(async (r) => {
      if (r.job.jobId === 'bad') throw new Error('no adapter for provider mystery');
      seen.push(r.job.jobId);
    });
    assert.equal(pass.error, null);
    assert.deepEqual(seen.sort(), ['a', 'c', 'd'], 'nothing after the bad line is blocked (its file, or the next)');
    assert.equal(pass.deadLettered, 1);
    assert.deepEqual(dead, ['replicate'], 'counted');
    assert.equal(await spool.pending(), 0, 'a dead letter is not pending replay');

    const status = await spoolStatus(dir);
    assert.equal(status.deadLetters, 1);
    assert.equal(status.recentDeadLetters[0]?.token, 'tok-bad');
    assert.match(status.recentDeadLetters[0]?.error ?? '', /no adapter for provider mystery/);

    assert.equal(await requeueDeadLetters(dir), 1);
    const again: string[] = [];
    await spool.replay(async (r) => {
      again.push(r.job.jobId);
    });
    assert.deepEqual(again, ['bad'], 'requeued: replayed once its cause is fixed');
    assert.equal((await spoolStatus(dir)).deadLetters, 0);
    spool.close();
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});

test('a transient failure (the database went away again) stops the pass and keeps the line for the next one', async () => {
  const dir = tmpDir();
  try {
    const spool = open(dir);
    await spool.append(rec('p'));
    const pass = await spool.replay(async () => {
      throw new DatabaseDown('connect ECONNREFUSED');
    });
    assert.match(pass.error ?? '', /ECONNREFUSED/);
    assert.equal(pass.deadLettered, 0);
    assert.equal(await spool.pending(), 1);
    spool.close();
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
});
