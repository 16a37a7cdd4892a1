// What the media check learns about a stored video, and its one rejection: shared by the
// in-process MP4 reader (media/mp4.ts) and the ffprobe wrapper (media/probe.ts), which calls
// the reader first, so neither imports the other for these.

import type { MediaInfo } from '../domain/media-info';

// The shape is plain data (domain/media-info.ts): the task's video row stores it (db/schema.ts).
export type { MediaInfo };

/**
 * The media type a validated video is served as. ffprobe names every ISO BMFF file
 * `mov,mp4,m4a,3gp,3g2,mj2`, so that family is served as MP4; a Matroska file is WebM when its
 * video codec is one WebM allows (of those the media check accepts: VP9, AV1), Matroska otherwise.
 */
export function mediaTypeOf(info: MediaInfo): 'video/mp4' | 'video/webm' | 'video/x-matroska' {
  const names = info.container.split(',');
  if (!names.includes('matroska') && !names.includes('webm')) return 'video/mp4';
  return ['vp9', 'av1'].includes(info.videoCodec) ? 'video/webm' : 'video/x-matroska';
}

/**
 * The shortest video we accept: below it there is nothing to charge for (a task is charged its
 * seconds rounded up, with this much tolerance, docs/billing.md) and nothing to watch.
 */
export const MIN_DURATION_SECONDS = 0.001;

/** Refuses a duration that is missing, not a number, or under MIN_DURATION_SECONDS (INVALID_MEDIA). */
export function checkDuration(seconds: number): number {
  if (!(seconds > 0)) throw new InvalidMediaError('video has no duration');
  if (seconds < MIN_DURATION_SECONDS) throw new InvalidMediaError(`video is shorter than 1 ms (${seconds} s)`);
  return seconds;
}

/** The bytes are not a video we accept (the task fails INVALID_MEDIA, uncharged). */
export class InvalidMediaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidMediaError';
  }
}
