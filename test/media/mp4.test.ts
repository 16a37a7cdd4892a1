// media/mp4.ts: the in-process MP4 probe agrees with ffprobe on real files made by ffmpeg
// (H.264 with the moov at the end and at the front, HEVC, VP9 and AV1 in MP4), rejects what
// ffprobe's answer would reject, and steps aside (null: ffprobe decides) for anything it is not
// sure of: another container, a truncated file, sizes that do not add up.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { ISO_BMFF_FORMAT_NAME, probeMp4 } from '../../media/mp4';
import { InvalidMediaError } from '../../media/media-info';
import { probeMedia, probeStored } from '../../media/probe';
import { fileReader } from './support';

const run = promisify(execFile);
let dir: string;
before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'mp4-probe-'));
});
after(() => fs.rm(dir, { recursive: true, force: true }));

/** A test video made by ffmpeg (`args` between the input and the output). */
async function make(name: string, args: string[], input = ['-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=24', '-t', '1.5']): Promise<string> {
  const file = path.join(dir, name);
  await run('ffmpeg', ['-v', 'error', '-nostdin', ...input, ...args, '-y', file], { timeout: 60_000 });
  return file;
}

async function probeFile(file: string) {
  const bytes = await fs.readFile(file);
  const r = fileReader(bytes);
  return { info: await probeMp4(r.read, bytes.length), reads: r.reads(), bytes };
}

describe('the in-process MP4 probe agrees with ffprobe', () => {
  const cases: { name: string; args: string[]; codec: string }[] = [
    { name: 'h264-moov-at-end.mp4', args: ['-c:v', 'libx264', '-pix_fmt', 'yuv420p'], codec: 'h264' },
    { name: 'h264-faststart.mp4', args: ['-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-movflags', '+faststart'], codec: 'h264' },
    { name: 'hevc.mp4', args: ['-c:v', 'libx265', '-x265-params', 'log-level=error', '-tag:v', 'hvc1'], codec: 'hevc' },
    { name: 'vp9.mp4', args: ['-c:v', 'libvpx-vp9', '-deadline', 'realtime', '-cpu-used', '8'], codec: 'vp9' },
    { name: 'av1.mp4', args: ['-c:v', 'libsvtav1', '-preset', '12'], codec: 'av1' },
    { name: 'h264-large-moov-at-end.mp4', args: ['-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-b:v', '4M', '-x264-params', 'keyint=1'], codec: 'h264' },
    { name: 'h264-with-audio.mov', args: ['-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-c:a', 'aac', '-shortest'], codec: 'h264' },
  ];
  for (const c of cases) {
    test(`${c.name}: container, codec, size and duration as ffprobe reads them`, async () => {
      const input = c.name.includes('audio')
        ? ['-f', 'lavfi', '-i', 'testsrc=size=320x240:rate=24', '-f', 'lavfi', '-i', 'sine=frequency=440', '-t', '1.5']
        : undefined;
      const file = await make(c.name, c.args, input);
      const { info, reads, bytes } = await probeFile(file);
      if (c.name.includes('large')) {
        assert.ok(bytes.length > 128 * 1024, `${bytes.length} bytes: the moov is past the first read`);
        assert.ok(reads >= 2, `${reads} ranged reads: the moov was read where the box sizes put it`);
      }
      const ff = await probeMedia(file);
      assert.ok(info, 'the parser was sure');
      assert.equal(info.container, ISO_BMFF_FORMAT_NAME);
      assert.equal(info.container, ff.container);
      assert.equal(info.videoCodec, c.codec);
      assert.equal(info.videoCodec, ff.videoCodec);
      assert.equal(info.width, ff.width);
      assert.equal(info.height, ff.height);
      assert.ok(Math.abs(info.durationSeconds - ff.durationSeconds) < 0.05, `${info.durationSeconds} vs ffprobe ${ff.durationSeconds}`);
      assert.ok(reads <= 3, `${reads} ranged reads`);
    });
  }

  test('a 64-bit box size (mdat over 4 GiB is written this way) is followed', async () => {
    const bytes = await fs.readFile(await make('large-box.mp4', ['-c:v', 'libx264', '-pix_fmt', 'yuv420p']));
    // Rewrite the mdat header as a 16-byte "largesize" header: the same box, 8 bytes longer.
    let at = 0;
    const parts: Buffer[] = [];
    while (at < bytes.length) {
      const size = bytes.readUInt32BE(at);
      const type = bytes.toString('latin1', at + 4, at + 8);
      if (type === 'mdat') {
        const header = Buffer.alloc(16);
        header.writeUInt32BE(1, 0);
        header.write('mdat', 4, 'latin1');
        header.writeBigUInt64BE(BigInt(size + 8), 8);
        parts.push(header, bytes.subarray(at + 8, at + size));
      } else {
        parts.push(bytes.subarray(at, at + size));
      }
      at += size;
    }
    const rewritten = Buffer.concat(parts);
    const info = await probeMp4(fileReader(rewritten).read, rewritten.length);
    assert.equal(info?.videoCodec, 'h264');
    assert.ok(info && info.durationSeconds > 1.4);
  });
});

describe('what ffprobe would reject, the parser rejects with the same reason', () => {
  test('MPEG-4 part 2 video: not a codec we accept', async () => {
    const file = await make('mpeg4.mp4', ['-c:v', 'mpeg4']);
    await assert.rejects(probeFile(file), (err: Error) => err instanceof InvalidMediaError && /found mpeg4/.test(err.message));
    await assert.rejects(probeMedia(file), /found mpeg4/);
  });

  test('a video shorter than 1 ms: refused (it would have been SUCCEEDED at no charge)', async () => {
    const bytes = Buffer.from(await fs.readFile(await make('tiny.mp4', ['-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-movflags', '+faststart'])));
    // The movie header (mvhd, version 0): timescale 90 kHz, 45 ticks = 0.5 ms.
    const payload = bytes.indexOf('mvhd', 0, 'latin1') + 4;
    assert.equal(bytes[payload], 0, 'a version 0 mvhd');
    bytes.writeUInt32BE(90_000, payload + 12);
    bytes.writeUInt32BE(45, payload + 16);
    await assert.rejects(
      probeMp4(fileReader(bytes).read, bytes.length),
      (err: Error) => err instanceof InvalidMediaError && /shorter than 1 ms/.test(err.message),
    );
  });

  test('audio only: no video stream', async () => {
    const file = await make('audio.m4a', ['-c:a', 'aac'], ['-f', 'lavfi', '-i', 'sine=frequency=440', '-t', '1']);
    await assert.rejects(probeFile(file), (err: Error) => err instanceof InvalidMediaError && /no supported video stream/.test(err.message));
  });
});

describe('anything the parser is not sure of is left to ffprobe (null)', () => {
  test('another container (WebM), random bytes, an empty object', async () => {
    const webm = await make('vp9.webm', ['-c:v', 'libvpx-vp9', '-deadline', 'realtime', '-cpu-used', '8']);
    assert.equal((await probeFile(webm)).info, null);
    const noise = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 251));
    assert.equal(await probeMp4(fileReader(noise).read, noise.length), null);
    assert.equal(await probeMp4(fileReader(Buffer.alloc(0)).read, 0), null);
  });

  test('a truncated MP4 (the moov at the end is cut off) and a moov whose inner sizes do not add up', async () => {
    const bytes = await fs.readFile(await make('cut.mp4', ['-c:v', 'libx264', '-pix_fmt', 'yuv420p']));
    const cut = bytes.subarray(0, Math.floor(bytes.length * 0.6));
    assert.equal(await probeMp4(fileReader(cut).read, cut.length), null);

    const fast = Buffer.from(await fs.readFile(await make('bad-inner.mp4', ['-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-movflags', '+faststart'])));
    const moovAt = fast.indexOf('moov', 0, 'latin1') - 4;
    // The first child of moov (mvhd) now claims to run past its parent.
    fast.writeUInt32BE(0x7fffffff, moovAt + 8);
    assert.equal(await probeMp4(fileReader(fast).read, fast.length), null);
  });

  test('probeStored falls back to ffprobe for those, which then decides', async () => {
    const webm = await make('fallback.webm', ['-c:v', 'libvpx-vp9', '-deadline', 'realtime', '-cpu-used', '8']);
    const bytes = await fs.readFile(webm);
    const storage = { readRange: async (_key: string, offset: number, length: number) => bytes.subarray(offset, offset + length) };
    const info = await probeStored(storage, 'k', bytes.length, webm);
    assert.equal(info.videoCodec, 'vp9');
    assert.match(info.container, /webm/);

    const junk = path.join(dir, 'junk.mp4');
    await fs.writeFile(junk, Buffer.from('this is not a video at all'));
    const junkBytes = await fs.readFile(junk);
    const junkStorage = { readRange: async (_key: string, offset: number, length: number) => junkBytes.subarray(offset, offset + length) };
    await assert.rejects(probeStored(junkStorage, 'k', junkBytes.length, junk), InvalidMediaError);
  });
});
