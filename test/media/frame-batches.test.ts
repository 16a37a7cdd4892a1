// Thumbnail frames taken together (media/frame-batches.ts, docs/decisions/0042-thumbnail-batches.md):
// one ffmpeg run gives each video its own frame; frames asked for together share a run, at most
// maxBatch a run and maxRuns runs at once; a run that fails as a whole fails only the video that
// would fail alone.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { createFrameBatcher } from '../../media/frame-batches';
import { InvalidMediaError } from '../../media/media-info';
import { extractFrames, extractThumbnail, frameArgs, type FrameRequest } from '../../media/probe';

const run = promisify(execFile);
let dir: string;
const sizes = ['160x120', '160x90', '100x100'] as const;
const video = (size: string) => path.join(dir, `v-${size}.mp4`);
before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'frame-batches-'));
  for (const size of sizes) {
    await run('ffmpeg', [
      '-v',
      'error',
      '-nostdin',
      '-f',
      'lavfi',
      '-i',
      `testsrc=size=${size}:rate=10`,
      '-t',
      '1',
      '-pix_fmt',
      'yuv420p',
      '-c:v',
      'libx264',
      '-preset',
      'ultrafast',
      '-y',
      video(size),
    ]);
  }
});
after(() => fs.rm(dir, { recursive: true, force: true }));

/** Width and height of a baseline JPEG (its SOF0 segment). */
function jpegSize(jpeg: Buffer): { width: number; height: number } {
  assert.equal(jpeg.readUInt16BE(0), 0xffd8, 'a JPEG');
  for (let at = 2; at + 9 < jpeg.length;) {
    const marker = jpeg.readUInt16BE(at);
    if (marker === 0xffc0) return { height: jpeg.readUInt16BE(at + 5), width: jpeg.readUInt16BE(at + 7) };
    at += 2 + jpeg.readUInt16BE(at + 2);
  }
  throw new Error('no SOF0 in the JPEG');
}

const request = (input: string): FrameRequest => ({ input, atSeconds: 0.5, demuxer: 'mov' });

test('one ffmpeg run gives each video its own frame, in the order asked', async () => {
  const frames = await extractFrames(sizes.map((s) => request(video(s))));
  // 320 px wide, the height from each video's aspect: 4:3, 16:9, 1:1.
  assert.deepEqual(
    frames.map((f) => (f instanceof Buffer ? jpegSize(f) : f)),
    [
      { width: 320, height: 240 },
      { width: 320, height: 180 },
      { width: 320, height: 320 },
    ],
  );
  // The same frame as a run of its own.
  assert.deepEqual(frames[1], await extractThumbnail(video('160x90'), 0.5, 'mov'));
});

test('a run decodes, filters and encodes on one thread each (decision 0054): every input and every output says so', () => {
  const args = frameArgs(sizes.map((s) => request(video(s))));
  const at = (flag: string) => args.flatMap((a, i) => (a === flag ? [i] : []));
  const pipes = args.flatMap((a, i) => (a.startsWith('pipe:') ? [i] : []));
  assert.equal(pipes.length, sizes.length);
  for (const p of pipes) assert.deepEqual(args.slice(p - 2, p), ['-threads', '1'], `output before ${args[p]}`);
  assert.equal(at('-threads').length, 2 * sizes.length, 'one per input and one per output');
  // Each input's -threads is its own: between the previous -i and this one.
  const inputs = at('-i');
  inputs.forEach((i, n) => {
    const t = args.lastIndexOf('-threads', i);
    assert.ok(t > (n === 0 ? -1 : inputs[n - 1]!) && args[t + 1] === '1', `input ${n}`);
  });
  assert.deepEqual(args.slice(args.indexOf('-filter_threads'), args.indexOf('-filter_threads') + 2), ['-filter_threads', '1']);
});

test('a run that cannot read one of its videos fails as a whole', async () => {
  await assert.rejects(extractFrames([request(video('160x120')), request(path.join(dir, 'missing.mp4'))]), /ffmpeg exited 1/);
});

/** A fake ffmpeg: records each run's inputs, answers a frame per input unless the input is "bad". */
function fakeExtract(opts: { holdMs?: number } = {}) {
  const runs: string[][] = [];
  let running = 0;
  let maxRunning = 0;
  const extract = async (requests: readonly FrameRequest[]) => {
    runs.push(requests.map((r) => r.input));
    running += 1;
    maxRunning = Math.max(maxRunning, running);
    await new Promise((r) => setTimeout(r, opts.holdMs ?? 5));
    running -= 1;
    if (requests.some((r) => r.input === 'bad')) throw new Error('ffmpeg exited 1');
    return requests.map((r) => (r.input === 'empty' ? new InvalidMediaError('ffmpeg produced no thumbnail') : Buffer.from(`frame of ${r.input}`)));
  };
  return { extract, runs, maxRunning: () => maxRunning };
}

test('frames asked for within the wait share one run; a full batch starts at once', async () => {
  const fake = fakeExtract();
  const frame = createFrameBatcher({ maxBatch: 3, lingerMs: 200, maxRuns: 2, timeoutMs: 1_000 }, fake.extract);
  const started = Date.now();
  const got = await Promise.all(['a', 'b', 'c'].map((v) => frame(request(v))));
  assert.deepEqual(
    got.map((b) => b.toString()),
    ['frame of a', 'frame of b', 'frame of c'],
  );
  assert.deepEqual(fake.runs, [['a', 'b', 'c']]);
  assert.ok(Date.now() - started < 150, 'a full batch does not wait for the linger');

  // Two asked for a little apart, fewer than a batch: one run, after the first has waited.
  const first = frame(request('d'));
  await new Promise((r) => setTimeout(r, 50));
  const second = frame(request('e'));
  assert.deepEqual((await Promise.all([first, second])).map(String), ['frame of d', 'frame of e']);
  assert.deepEqual(fake.runs[1], ['d', 'e']);
});

test('at most maxBatch frames a run and maxRuns runs at once', async () => {
  const fake = fakeExtract({ holdMs: 30 });
  const frame = createFrameBatcher({ maxBatch: 2, lingerMs: 10, maxRuns: 2, timeoutMs: 1_000 }, fake.extract);
  const inputs = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
  await Promise.all(inputs.map((v) => frame(request(v))));
  assert.ok(
    fake.runs.every((r) => r.length <= 2),
    JSON.stringify(fake.runs),
  );
  assert.deepEqual(fake.runs.flat().sort(), inputs);
  assert.equal(fake.maxRunning(), 2);
});

test('a failed run is not charged to its neighbours: each frame is taken again alone, and only the bad video fails', async () => {
  const fake = fakeExtract();
  const frame = createFrameBatcher({ maxBatch: 4, lingerMs: 20, maxRuns: 1, timeoutMs: 1_000 }, fake.extract);
  const results = await Promise.allSettled(['a', 'bad', 'c', 'empty'].map((v) => frame(request(v))));
  assert.deepEqual(
    results.map((r) => (r.status === 'fulfilled' ? r.value.toString() : (r.reason as Error).message)),
    ['frame of a', 'ffmpeg exited 1', 'frame of c', 'ffmpeg produced no thumbnail'],
  );
  assert.deepEqual(fake.runs, [['a', 'bad', 'c', 'empty'], ['a'], ['bad'], ['c'], ['empty']]);
  assert.ok((results[3] as PromiseRejectedResult).reason instanceof InvalidMediaError);
});
