// ffprobe / ffmpeg wrappers for the media step. The input is a URL (a presigned S3 GET), so
// nothing is copied to local disk. The bytes are a provider's, so both tools run fenced in:
// only the protocols the input needs (-protocol_whitelist: https,tls,tcp for a presigned URL;
// file for a local path), only the demuxers of the containers we accept (-format_whitelist),
// and a fixed demuxer (-f) once the container is known. No playlist, concat or data: URL inside
// a file can make them open anything else.
import { execFile, spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { promisify } from 'node:util';
import { z } from 'zod';

import type { ObjectStorage } from '../storage/s3';
import { redactText } from '../observability/redact';
import { checkDuration, InvalidMediaError, type MediaInfo } from './media-info';
import { probeMp4 } from './mp4';

const run = promisify(execFile);

const probeSchema = z.object({
  format: z.object({
    format_name: z.string(),
    duration: z.coerce.number().optional(),
    size: z.coerce.number().optional(),
  }),
  streams: z.array(
    z.object({
      codec_type: z.string(),
      codec_name: z.string().optional(),
      width: z.number().optional(),
      height: z.number().optional(),
      duration: z.coerce.number().optional(),
    }),
  ),
});

const ACCEPTED_CONTAINERS = ['mov', 'mp4', 'm4a', '3gp', '3g2', 'mj2', 'webm', 'matroska'];
/** ffmpeg's demuxers for those containers (mov reads every ISO BMFF brand; matroska reads WebM). */
const DEMUXERS = ['mov', 'matroska'] as const;
export type Demuxer = (typeof DEMUXERS)[number];

/** The protocols ffprobe/ffmpeg may open for `input`: https (over tls, tcp), plain http (the local S3 server in dev), or a local file. */
export function inputProtocols(input: string): string {
  if (/^https:/i.test(input)) return 'https,tls,tcp';
  if (/^http:/i.test(input)) return 'http,tcp';
  if (/^[a-z][a-z0-9+.-]*:/i.test(input) && !/^file:/i.test(input)) throw new Error(`media input must be an http(s) URL or a local file`);
  return 'file';
}

/** The input options that fence ffprobe/ffmpeg in (module comment). */
export function inputArgs(input: string, demuxer?: Demuxer): string[] {
  return ['-protocol_whitelist', inputProtocols(input), '-format_whitelist', DEMUXERS.join(','), ...(demuxer ? ['-f', demuxer] : []), '-i', input];
}

/** The demuxer of a probed container (MediaInfo.container is ffprobe's format name). */
export function demuxerOf(container: string): Demuxer {
  return container.split(',').some((c) => c === 'matroska' || c === 'webm') ? 'matroska' : 'mov';
}
const ACCEPTED_CODECS = ['h264', 'hevc', 'vp9', 'av1'];
/**
 * ffmpeg's messages for an input it could not read (libavformat's http and tcp protocols, and
 * the errno texts they pass on), as opposed to one it read and could not parse.
 */
const TRANSPORT_ERROR =
  /Server returned|HTTP error \d|Connection (refused|reset|timed out)|Operation timed out|Input\/output error|Network is unreachable|No route to host|Failed to resolve hostname|Stream ends prematurely/i;

/**
 * Exactly the entries probeSchema reads, and no tags: the answer is a few hundred bytes per
 * stream whatever metadata the file carries (a 5 MiB title once overflowed the buffer below).
 */
const PROBE_ENTRIES = `format=${Object.keys(probeSchema.shape.format.shape).join(',')}:stream=${Object.keys(probeSchema.shape.streams.element.shape).join(',')}`;
/** Largest answer (and stderr) read from ffprobe; more is an 'overflow', never parsed. */
const MAX_PROBE_OUTPUT = 4 * 1024 * 1024;
/** Most of ffprobe's words an error quotes: they end up in logs, workflow history and the task's row. */
export const MAX_QUOTED_CHARS = 2_000;

/** At most MAX_QUOTED_CHARS of `text`, redacted (ffprobe's first line names its input: a presigned URL). */
export function quoted(text: string): string {
  if (text.length <= MAX_QUOTED_CHARS) return redactText(text).slice(0, MAX_QUOTED_CHARS);
  // Redacted with some text past the cut, so a URL straddling it still loses its query.
  return `${redactText(text.slice(0, MAX_QUOTED_CHARS + 4_096)).slice(0, MAX_QUOTED_CHARS)}… (${text.length} characters)`;
}

/** The kinds of ProbeFailedError. */
export type ProbeFailureKind = 'unreadable' | 'timeout' | 'overflow' | 'unparseable' | 'crashed';

/**
 * ffprobe gave no verdict on the bytes: it could not read our storage, ran out of time, answered
 * more than MAX_PROBE_OUTPUT, answered something that is not JSON, or could not run or died
 * without a word. Retryable; the media step counts it toward its bound
 * (activities/media-failures.ts). Its message is bounded and it carries no raw cause (execFile's
 * error holds everything ffprobe wrote).
 */
export class ProbeFailedError extends Error {
  constructor(
    readonly kind: ProbeFailureKind,
    message: string,
  ) {
    super(message);
    this.name = 'ProbeFailedError';
  }
}

/** execFile's error for ffprobe as a ProbeFailedError, or an InvalidMediaError when ffprobe read the input and refused it. */
function probeFailure(err: unknown, timeoutMs: number): ProbeFailedError | InvalidMediaError {
  const e = err as { code?: unknown; killed?: boolean; signal?: string | null; stderr?: unknown };
  const stderr = typeof e.stderr === 'string' ? e.stderr.trim() : '';
  const said = quoted(stderr.split('\n')[0] ?? '');
  if (e.code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER') return new ProbeFailedError('overflow', `ffprobe answered more than ${MAX_PROBE_OUTPUT} bytes`);
  if (e.killed) return new ProbeFailedError('timeout', `ffprobe timed out after ${timeoutMs} ms`);
  // Not started (ENOENT, EACCES): a string code; an exit status is a number.
  if (typeof e.code === 'string') return new ProbeFailedError('crashed', `ffprobe could not run: ${e.code}`);
  if (e.signal) return new ProbeFailedError('crashed', `ffprobe was killed by ${e.signal}${said ? `: ${said}` : ''}`);
  if (!stderr) return new ProbeFailedError('crashed', `ffprobe exited ${String(e.code)} without a word`);
  // ffprobe could not read our own storage (an S3 503, an outage, a copy moved away while it
  // read): a retryable failure, never a verdict on the bytes.
  if (TRANSPORT_ERROR.test(stderr)) return new ProbeFailedError('unreadable', `ffprobe could not read the stored video: ${said}`);
  // ffprobe read the input: the bytes are not a media file it understands.
  return new InvalidMediaError(`ffprobe rejected the file: ${said}`);
}

/**
 * The media facts ffprobe reads from `input`. Throws InvalidMediaError for bytes it read and
 * refused (or a video we do not accept), ProbeFailedError when it gave no verdict.
 */
export async function probeMedia(input: string, timeoutMs = 30_000, demuxer?: Demuxer): Promise<MediaInfo> {
  let stdout: string;
  try {
    ({ stdout } = await run('ffprobe', ['-v', 'error', '-print_format', 'json', '-show_entries', PROBE_ENTRIES, ...inputArgs(input, demuxer)], {
      timeout: timeoutMs,
      killSignal: 'SIGKILL',
      maxBuffer: MAX_PROBE_OUTPUT,
    }));
  } catch (err) {
    throw probeFailure(err, timeoutMs);
  }
  let answer: unknown;
  try {
    answer = JSON.parse(stdout);
  } catch {
    throw new ProbeFailedError('unparseable', `ffprobe's answer is not JSON (${stdout.length} characters): ${quoted(stdout.slice(0, 200))}`);
  }
  const parsed = probeSchema.safeParse(answer);
  if (!parsed.success) throw new InvalidMediaError('ffprobe output has no format/streams');
  const { format, streams } = parsed.data;
  const containers = format.format_name.split(',');
  if (!containers.some((c) => ACCEPTED_CONTAINERS.includes(c))) {
    throw new InvalidMediaError(`unsupported container ${quoted(format.format_name)}`);
  }
  const video = streams.find((s) => s.codec_type === 'video');
  if (!video?.codec_name || !ACCEPTED_CODECS.includes(video.codec_name)) {
    throw new InvalidMediaError(`no supported video stream (found ${quoted(video?.codec_name ?? 'none')})`);
  }
  const duration = checkDuration(format.duration ?? video.duration ?? 0);
  return {
    container: format.format_name,
    videoCodec: video.codec_name,
    width: video.width ?? 0,
    height: video.height ?? 0,
    durationSeconds: duration,
  };
}

/**
 * The media facts of a stored object: read from its MP4 boxes in process when that is
 * unambiguous (media/mp4.ts), else from ffprobe on `url` (a presigned GET of the same object).
 */
export async function probeStored(
  storage: Pick<ObjectStorage, 'readRange'>,
  key: string,
  size: number,
  url: string,
  probeTimeoutMs?: number,
): Promise<MediaInfo> {
  const info = await probeMp4((offset, length) => storage.readRange(key, offset, length), size);
  return info ?? probeMedia(url, probeTimeoutMs);
}

/** One frame to take: the video (a URL or a local path), where in it, and its demuxer (from the probe). */
export interface FrameRequest {
  readonly input: string;
  readonly atSeconds: number;
  readonly demuxer: Demuxer;
}

/** Largest JPEG read back for one frame. */
const MAX_FRAME_BYTES = 8 * 1024 * 1024;

/**
 * ffmpeg's arguments for one JPEG frame of each request in one run: input i (seeked before it is
 * opened, fenced in by inputArgs) gives the first frame of its first video stream, scaled to
 * 320 px wide, on file descriptor 3 + i.
 */
export function frameArgs(requests: readonly FrameRequest[]): string[] {
  // One thread per decoder, encoder and filter graph: by default each of them starts a pool the
  // size of the machine for one frame, which costs a small batch a third of its CPU (decision 0054).
  const inputs = requests.flatMap((r) => ['-threads', '1', '-ss', r.atSeconds.toFixed(2), ...inputArgs(r.input, r.demuxer)]);
  const outputs = requests.flatMap((_, i) => [
    '-map',
    `${i}:v:0`,
    '-frames:v',
    '1',
    '-vf',
    'scale=320:-2',
    '-f',
    'image2pipe',
    '-vcodec',
    'mjpeg',
    '-threads',
    '1',
    `pipe:${3 + i}`,
  ]);
  return ['-v', 'error', '-nostdin', '-filter_threads', '1', ...inputs, ...outputs];
}

/**
 * One JPEG frame of each request, from one ffmpeg run: most of a run's CPU is ffmpeg's start-up
 * (loading its shared libraries), paid once for the lot (docs/decisions/0042-thumbnail-batches.md).
 * An entry is an InvalidMediaError when ffmpeg gave no frame for it; the whole call rejects when
 * ffmpeg fails (which input it could not read is not known then) or runs out of time.
 */
export function extractFrames(requests: readonly FrameRequest[], timeoutMs = 30_000): Promise<(Buffer | InvalidMediaError)[]> {
  if (requests.length === 0) return Promise.resolve([]);
  return new Promise((resolve, reject) => {
    const child = spawn('ffmpeg', frameArgs(requests), { stdio: ['ignore', 'ignore', 'pipe', ...requests.map(() => 'pipe' as const)] });
    const frames = requests.map(() => [] as Buffer[]);
    const sizes = requests.map(() => 0);
    let stderr = '';
    let failure: Error | null = null;
    const fail = (err: Error) => {
      failure ??= err;
      child.kill('SIGKILL');
    };
    const timer = setTimeout(() => fail(new Error('ffmpeg timed out')), timeoutMs);
    // A stream error (a pipe torn down under us) ends this run, never the worker.
    child.stderr!.on('error', (err) => fail(err));
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (d: string) => {
      if (stderr.length < 64 * 1024) stderr += d;
    });
    requests.forEach((_, i) => {
      const out = child.stdio[3 + i] as Readable;
      out.on('error', (err) => fail(err));
      out.on('data', (chunk: Buffer) => {
        sizes[i]! += chunk.length;
        if (sizes[i]! > MAX_FRAME_BYTES) fail(new Error(`ffmpeg wrote more than ${MAX_FRAME_BYTES} bytes for one frame`));
        else frames[i]!.push(chunk);
      });
    });
    // Not started (no ffmpeg) or not killable: 'close' may never come.
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(failure ?? err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (failure) return reject(failure);
      // Its first line names an input (a presigned URL): redacted, as every error leaving the process.
      if (code !== 0) return reject(new Error(`ffmpeg exited ${code ?? signal}: ${redactText(stderr.trim().split('\n')[0] ?? '')}`));
      resolve(frames.map((f) => (f.length === 0 ? new InvalidMediaError('ffmpeg produced no thumbnail') : Buffer.concat(f))));
    });
  });
}

/** One JPEG frame from near the start of the video (its container known from the probe). */
export async function extractThumbnail(input: string, atSeconds: number, demuxer: Demuxer, timeoutMs = 30_000): Promise<Buffer> {
  const [frame] = await extractFrames([{ input, atSeconds, demuxer }], timeoutMs);
  if (frame instanceof Buffer) return frame;
  throw frame instanceof Error ? frame : new InvalidMediaError('ffmpeg produced no thumbnail');
}
