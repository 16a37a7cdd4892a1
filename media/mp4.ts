// Reads what the media step checks (container, video codec, size, duration) from an MP4's
// `moov` box in process, instead of starting ffprobe: ffprobe loads ~200 shared libraries, about
// 0.1 s of CPU per file before it reads a byte, which was the largest single cost of a task
// on a 2-core machine (docs/performance.md, e2e). Only ISO BMFF (MP4/MOV) is read here, and
// only what its boxes state plainly. Anything this parser is not sure of (another container, a
// truncated or oversized `moov`, a box that does not add up) returns null, and ffprobe decides
// as before (media/probe.ts probeStored): a file is never rejected for being unusual here, with
// one exception, the work bound: the walk to `moov` looks at most MAX_TOP_LEVEL_BOXES boxes and
// makes at most MAX_HEADER_READS ranged reads past the head. Every writer puts a handful of boxes
// at the top (ftyp, free, mdat, moov; fragmented files have moov first), so a file past either
// bound is refused as invalid rather than walked (a file of tiny boxes would be millions of reads)
// or handed to ffprobe (which would stream all of it).
import { checkDuration, InvalidMediaError, type MediaInfo } from './media-info';

/** Reads `length` bytes at `offset` (fewer at the end of the object). */
export type RangeReader = (offset: number, length: number) => Promise<Buffer>;

/** What ffprobe calls every ISO BMFF file; stored in asset.media_info the same way either path. */
export const ISO_BMFF_FORMAT_NAME = 'mov,mp4,m4a,3gp,3g2,mj2';
/** Sample entry (stsd) formats → the codec names ffprobe reports. */
const CODECS: Readonly<Record<string, string>> = {
  avc1: 'h264',
  avc3: 'h264',
  hvc1: 'hevc',
  hev1: 'hevc',
  av01: 'av1',
  vp09: 'vp9',
  mp4v: 'mpeg4',
  mjpa: 'mjpeg',
  jpeg: 'mjpeg',
};
const HEAD_BYTES = 64 * 1024;
/** A larger `moov` is left to ffprobe (hours of video with every sample table in memory). */
const MAX_MOOV_BYTES = 16 * 1024 * 1024;
const ACCEPTED_CODECS = ['h264', 'hevc', 'vp9', 'av1'];
export const MAX_TOP_LEVEL_BOXES = 64;
export const MAX_HEADER_READS = 8;

interface Box {
  readonly type: string;
  /** Offset of the payload, after the header, within the buffer it was read from. */
  readonly start: number;
  readonly end: number;
}

class Unsure extends Error {}

/** The boxes in buf[from, to): header sizes must add up exactly, or the parse is unsure. */
function children(buf: Buffer, from: number, to: number): Box[] {
  const boxes: Box[] = [];
  let at = from;
  while (at < to) {
    if (to - at < 8) throw new Unsure('trailing bytes');
    let size = buf.readUInt32BE(at);
    const type = buf.toString('latin1', at + 4, at + 8);
    let header = 8;
    if (size === 1) {
      if (to - at < 16) throw new Unsure('short large box');
      size = Number(buf.readBigUInt64BE(at + 8));
      header = 16;
    } else if (size === 0) {
      size = to - at;
    }
    if (size < header || at + size > to) throw new Unsure(`box ${type} overruns its parent`);
    boxes.push({ type, start: at + header, end: at + size });
    at += size;
  }
  return boxes;
}

const find = (buf: Buffer, parent: Box, type: string): Box | undefined => children(buf, parent.start, parent.end).find((b) => b.type === type);

function need(buf: Buffer, box: Box, bytes: number): void {
  if (box.end - box.start < bytes) throw new Unsure(`box ${box.type} too short`);
}

/** (timescale, duration) of an mvhd or mdhd payload (full box: version 0 or 1). */
function timing(buf: Buffer, box: Box): { timescale: number; duration: number } {
  const version = buf.readUInt8(box.start);
  if (version === 1) {
    need(buf, box, 32);
    return { timescale: buf.readUInt32BE(box.start + 20), duration: Number(buf.readBigUInt64BE(box.start + 24)) };
  }
  need(buf, box, 20);
  const duration = buf.readUInt32BE(box.start + 16);
  // All ones in version 0 means "unknown".
  return { timescale: buf.readUInt32BE(box.start + 12), duration: duration === 0xffffffff ? 0 : duration };
}

interface Track {
  readonly handler: string;
  readonly format: string | null;
  readonly width: number;
  readonly height: number;
  readonly seconds: number;
}

function readTrack(buf: Buffer, trak: Box): Track | null {
  const mdia = find(buf, trak, 'mdia');
  if (!mdia) return null;
  const hdlr = find(buf, mdia, 'hdlr');
  if (!hdlr) return null;
  need(buf, hdlr, 12);
  const handler = buf.toString('latin1', hdlr.start + 8, hdlr.start + 12);
  const mdhd = find(buf, mdia, 'mdhd');
  const t = mdhd ? timing(buf, mdhd) : { timescale: 0, duration: 0 };
  const seconds = t.timescale > 0 ? t.duration / t.timescale : 0;
  const stbl = (() => {
    const minf = find(buf, mdia, 'minf');
    return minf ? find(buf, minf, 'stbl') : undefined;
  })();
  const stsd = stbl ? find(buf, stbl, 'stsd') : undefined;
  if (!stsd) return { handler, format: null, width: 0, height: 0, seconds };
  need(buf, stsd, 16);
  if (buf.readUInt32BE(stsd.start + 4) < 1) return { handler, format: null, width: 0, height: 0, seconds };
  const entry = children(buf, stsd.start + 8, stsd.end)[0];
  if (!entry) return { handler, format: null, width: 0, height: 0, seconds };
  // VisualSampleEntry: 6 reserved, 2 data-reference index, 16 pre-defined/reserved, then width, height.
  const visual = handler === 'vide' && entry.end - entry.start >= 28;
  return {
    handler,
    format: entry.type,
    width: visual ? buf.readUInt16BE(entry.start + 24) : 0,
    height: visual ? buf.readUInt16BE(entry.start + 26) : 0,
    seconds,
  };
}

/** Parses a complete `moov` box (buf holds exactly the box; its header is `headerBytes` long). */
export function mediaInfoFromMoov(buf: Buffer, headerBytes = 8): MediaInfo {
  const moov: Box = { type: 'moov', start: headerBytes, end: buf.length };
  const boxes = children(buf, moov.start, moov.end);
  const mvhd = boxes.find((b) => b.type === 'mvhd');
  const tracks = boxes
    .filter((b) => b.type === 'trak')
    .map((b) => readTrack(buf, b))
    .filter((t): t is Track => t !== null);
  const video = tracks.find((t) => t.handler === 'vide');
  if (!video) throw new InvalidMediaError('no supported video stream (found none)');
  const codec = video.format ? CODECS[video.format] : undefined;
  // A sample entry we do not know (encrypted 'encv', a new codec): ffprobe has the last word.
  if (!codec) throw new Unsure(`sample entry ${video.format ?? 'missing'}`);
  if (!ACCEPTED_CODECS.includes(codec)) throw new InvalidMediaError(`no supported video stream (found ${codec})`);
  const movie = mvhd ? timing(buf, mvhd) : { timescale: 0, duration: 0 };
  const duration = checkDuration(movie.timescale > 0 && movie.duration > 0 ? movie.duration / movie.timescale : Math.max(0, ...tracks.map((t) => t.seconds)));
  return { container: ISO_BMFF_FORMAT_NAME, videoCodec: codec, width: video.width, height: video.height, durationSeconds: duration };
}

/**
 * The media facts of an MP4 of `size` bytes, read with a few ranged reads (the head, box headers
 * past it, the moov; at most MAX_HEADER_READS + 2); null when this parser is not sure (not ISO
 * BMFF, no complete moov, sizes that do not add up, an unknown sample entry). Throws
 * InvalidMediaError for a well-formed file that plainly fails the check (no video track, a codec
 * we do not accept, no duration), which is what ffprobe's answer would be too, and for a file
 * past the walk's bounds (module comment).
 */
export async function probeMp4(read: RangeReader, size: number): Promise<MediaInfo | null> {
  try {
    const head = await read(0, Math.min(size, HEAD_BYTES));
    if (head.length < 16 || head.toString('latin1', 4, 8) !== 'ftyp') return null;
    let at = 0;
    let boxes = 0;
    let reads = 0;
    while (at + 8 <= size) {
      if (++boxes > MAX_TOP_LEVEL_BOXES) throw new InvalidMediaError(`MP4 layout: no moov within the first ${MAX_TOP_LEVEL_BOXES} top-level boxes`);
      const inHead = at + 16 <= head.length;
      if (!inHead && ++reads > MAX_HEADER_READS)
        throw new InvalidMediaError(`MP4 layout: no moov within ${MAX_HEADER_READS} box reads past the first ${HEAD_BYTES} bytes`);
      const header = inHead ? head.subarray(at, at + 16) : await read(at, 16);
      if (header.length < 8) return null;
      let boxSize = header.readUInt32BE(0);
      const type = header.toString('latin1', 4, 8);
      if (boxSize === 1) {
        if (header.length < 16) return null;
        boxSize = Number(header.readBigUInt64BE(8));
      } else if (boxSize === 0) {
        boxSize = size - at;
      }
      if (boxSize < 8 || at + boxSize > size) return null;
      if (type === 'moov') {
        if (boxSize > MAX_MOOV_BYTES) return null;
        const moov = at + boxSize <= head.length ? head.subarray(at, at + boxSize) : await read(at, boxSize);
        if (moov.length !== boxSize) return null;
        return mediaInfoFromMoov(moov, moov.readUInt32BE(0) === 1 ? 16 : 8);
      }
      at += boxSize;
    }
    return null;
  } catch (err) {
    if (err instanceof Unsure || err instanceof RangeError) return null;
    throw err;
  }
}
