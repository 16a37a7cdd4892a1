// What ffprobe answers is bounded and classified (docs/design.md §5 "Bounds"). A valid file's
// metadata cannot swell the answer: ffprobe is asked for the entries the schema reads and no tags
// (a 1 s VP9 WebM with a 5 MiB title overflowed the 4 MiB buffer, and the task retried for ever).
// An answer that is no verdict on the bytes (too large, not JSON, a timeout, a crash, a silent
// non-zero exit) is a ProbeFailedError, which the media step counts; only bytes ffprobe read and
// refused are InvalidMediaError. Every message quotes at most MAX_QUOTED_CHARS of what it said.
// The odd answers come from a stand-in ffprobe put first on PATH.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { InvalidMediaError } from '../../media/media-info';
import { MAX_QUOTED_CHARS, ProbeFailedError, probeMedia, type ProbeFailureKind } from '../../media/probe';

const run = promisify(execFile);
let dir: string;
let bigTitle: string;
let hanging: Server;

before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'probe-answers-'));
  // A 5 MiB title, given to ffmpeg as an ffmetadata file (too long for one argv entry).
  const meta = path.join(dir, 'meta.txt');
  await fs.writeFile(meta, `;FFMETADATA1\ntitle=${'t'.repeat(5 * 1024 * 1024)}\n`);
  bigTitle = path.join(dir, 'big-title.webm');
  await run('ffmpeg', [
    '-v',
    'error',
    '-f',
    'lavfi',
    '-i',
    'testsrc=duration=1:size=64x64:rate=10',
    '-i',
    meta,
    '-map_metadata',
    '1',
    '-c:v',
    'libvpx-vp9',
    '-deadline',
    'realtime',
    '-cpu-used',
    '8',
    bigTitle,
  ]);
  // Accepts the connection and never answers.
  hanging = createServer(() => undefined);
  await new Promise<void>((r) => hanging.listen(0, '127.0.0.1', () => r()));
});
after(async () => {
  hanging?.closeAllConnections();
  hanging?.close();
  await fs.rm(dir, { recursive: true, force: true });
});

/** Runs `work` with a stand-in `ffprobe` (a shell script) first on PATH. */
async function withFakeFfprobe<T>(script: string, work: () => Promise<T>): Promise<T> {
  const bin = await fs.mkdtemp(path.join(dir, 'bin-'));
  await fs.writeFile(path.join(bin, 'ffprobe'), `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  const saved = process.env['PATH'];
  process.env['PATH'] = `${bin}${path.delimiter}${saved ?? ''}`;
  try {
    return await work();
  } finally {
    process.env['PATH'] = saved;
  }
}

async function failureOf(p: Promise<unknown>): Promise<Error> {
  const err = await p.then(
    () => null,
    (e: unknown) => e as Error,
  );
  assert.ok(err, 'the probe failed');
  // Bounded: what reaches a log line, workflow history or the task's row.
  assert.ok(err.message.length < MAX_QUOTED_CHARS + 200, `a ${err.message.length}-character message`);
  assert.equal(err.cause, undefined, "no raw cause (execFile's error holds all ffprobe wrote)");
  return err;
}

const isProbeFailure = (err: Error, kind: ProbeFailureKind) => err instanceof ProbeFailedError && err.kind === kind;

test('a valid 1 s VP9 WebM with a 5 MiB title tag is probed: its tags are never asked for', async () => {
  assert.ok((await fs.stat(bigTitle)).size > 5 * 1024 * 1024, 'the title is in the file');
  const info = await probeMedia(bigTitle);
  assert.match(info.container, /webm/);
  assert.equal(info.videoCodec, 'vp9');
  assert.equal(info.width, 64);
  assert.equal(info.height, 64);
  assert.ok(Math.abs(info.durationSeconds - 1) < 0.2, `duration ${info.durationSeconds}`);
});

test('an answer over the buffer is an overflow, not a verdict, and quotes none of it', async () => {
  const err = await withFakeFfprobe(`head -c 6000000 /dev/zero | tr '\\0' a`, () => failureOf(probeMedia(bigTitle)));
  assert.ok(isProbeFailure(err, 'overflow'), String(err));
});

test('an answer that is not JSON is unparseable, not a verdict', async () => {
  const err = await withFakeFfprobe(`printf 'not json at all '; head -c 100000 /dev/zero | tr '\\0' x`, () => failureOf(probeMedia(bigTitle)));
  assert.ok(isProbeFailure(err, 'unparseable'), String(err));
});

test('ffprobe killed by a signal, or exiting non-zero without a word, crashed: not a verdict', async () => {
  const killed = await withFakeFfprobe('kill -SEGV $$', () => failureOf(probeMedia(bigTitle)));
  assert.ok(isProbeFailure(killed, 'crashed'), String(killed));
  const silent = await withFakeFfprobe('exit 3', () => failureOf(probeMedia(bigTitle)));
  assert.ok(isProbeFailure(silent, 'crashed'), String(silent));
  assert.match(silent.message, /exited 3/);
});

test('a probe that runs out of time is killed and is a timeout, with a real ffprobe on a URL that never answers', async () => {
  const started = Date.now();
  const err = await failureOf(probeMedia(`http://127.0.0.1:${(hanging.address() as AddressInfo).port}/output.webm`, 500));
  assert.ok(isProbeFailure(err, 'timeout'), String(err));
  assert.ok(Date.now() - started < 10_000, 'killed, not waited for');
  const fake = await withFakeFfprobe('exec sleep 30', () => failureOf(probeMedia(bigTitle, 300)));
  assert.ok(isProbeFailure(fake, 'timeout'), String(fake));
});

test('bytes ffprobe read and refused stay a verdict (InvalidMediaError), its words quoted only up to the bound', async () => {
  const err = await withFakeFfprobe(`head -c 3000000 /dev/zero | tr '\\0' e >&2; exit 1`, () => failureOf(probeMedia(bigTitle)));
  assert.ok(err instanceof InvalidMediaError, String(err));
  assert.match(err.message, /^ffprobe rejected the file: e{100}/);
  assert.match(err.message, /\(3000000 characters\)$/);
});
