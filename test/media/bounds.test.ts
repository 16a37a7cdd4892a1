// Work on provider bytes is bounded: the MP4 box walk stops after a fixed number of top-level
// boxes and ranged reads (a file of tiny boxes is refused after one read, not walked box by
// box), and ffprobe/ffmpeg open only the protocols and demuxers their input needs.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { MAX_HEADER_READS, MAX_TOP_LEVEL_BOXES, probeMp4 } from '../../media/mp4';
import { InvalidMediaError } from '../../media/media-info';
import { extractThumbnail, inputArgs, probeMedia } from '../../media/probe';
import { fileReader } from './support';

const run = promisify(execFile);
let dir: string;
before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'media-bounds-'));
});
after(() => fs.rm(dir, { recursive: true, force: true }));

const box = (type: string, size: number): Buffer => {
  const b = Buffer.alloc(size);
  b.writeUInt32BE(size, 0);
  b.write(type, 4, 'latin1');
  return b;
};
const ftyp = (): Buffer => box('ftyp', 16);

test('a file of a million tiny top-level boxes is refused with one read, not walked', async () => {
  const tiny = Buffer.alloc(1_000_000 * 8);
  for (let at = 0; at < tiny.length; at += 8) {
    tiny.writeUInt32BE(8, at);
    tiny.write('free', at + 4, 'latin1');
  }
  const file = Buffer.concat([ftyp(), tiny]);
  const r = fileReader(file);
  await assert.rejects(
    probeMp4(r.read, file.length),
    (err: Error) => err instanceof InvalidMediaError && /within the first 64 top-level boxes/.test(err.message),
  );
  assert.equal(r.reads(), 1, 'only the head was read');
  assert.equal(MAX_TOP_LEVEL_BOXES, 64);
});

test('boxes larger than the head: at most MAX_HEADER_READS reads past it, then refused with the reason', async () => {
  const big = Array.from({ length: 40 }, () => box('free', 70 * 1024));
  const file = Buffer.concat([ftyp(), ...big]);
  const r = fileReader(file);
  await assert.rejects(probeMp4(r.read, file.length), (err: Error) => err instanceof InvalidMediaError && /no moov within 8 box reads/.test(err.message));
  assert.ok(r.reads() <= 1 + MAX_HEADER_READS, `${r.reads()} reads`);
});

test('ffprobe and ffmpeg get a protocol whitelist for their input and only our demuxers', () => {
  assert.deepEqual(inputArgs('https://s3.example/b/k.mp4?X-Amz-Signature=x').slice(0, 4), [
    '-protocol_whitelist',
    'https,tls,tcp',
    '-format_whitelist',
    'mov,matroska',
  ]);
  assert.deepEqual(inputArgs('/tmp/out.mp4', 'mov'), ['-protocol_whitelist', 'file', '-format_whitelist', 'mov,matroska', '-f', 'mov', '-i', '/tmp/out.mp4']);
  assert.throws(() => inputArgs('concat:/etc/passwd|/etc/hosts'));
});

test('an HLS playlist (which would make ffprobe open its segments) is refused by the demuxer whitelist', async () => {
  const segment = path.join(dir, 'seg.ts');
  await run('ffmpeg', [
    '-v',
    'error',
    '-nostdin',
    '-f',
    'lavfi',
    '-i',
    'testsrc=size=64x64:rate=10',
    '-t',
    '1',
    '-c:v',
    'libx264',
    '-f',
    'mpegts',
    '-y',
    segment,
  ]);
  const playlist = path.join(dir, 'list.m3u8');
  await fs.writeFile(playlist, `#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1.0,\n${segment}\n#EXT-X-ENDLIST\n`);
  // Without the whitelists ffprobe follows the playlist and reads the segment (the test can fail).
  const plain = await run('ffprobe', ['-v', 'error', '-show_entries', 'format=format_name', '-of', 'csv', playlist]);
  assert.match(plain.stdout, /hls/);
  await assert.rejects(probeMedia(playlist), (err: Error) => err instanceof InvalidMediaError && /rejected/.test(err.message));
});

test('the thumbnail is read with the probed container fixed (-f): a WebM is not read as MOV', async () => {
  const webm = path.join(dir, 'v.webm');
  await run('ffmpeg', [
    '-v',
    'error',
    '-nostdin',
    '-f',
    'lavfi',
    '-i',
    'testsrc=size=64x64:rate=10',
    '-t',
    '1',
    '-c:v',
    'libvpx-vp9',
    '-deadline',
    'realtime',
    '-y',
    webm,
  ]);
  assert.ok((await extractThumbnail(webm, 0.1, 'matroska')).length > 100);
  await assert.rejects(extractThumbnail(webm, 0.1, 'mov'));
});
