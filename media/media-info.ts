// What the media check learns about a stored video, and its one rejection: shared by the
// in-process MP4 reader (media/mp4.ts) and the ffprobe wrapper (media/probe.ts), which calls
// the reader first, so neither imports the other for these.

export interface MediaInfo {
  readonly container: string;
  readonly videoCodec: string;
  readonly width: number;
  readonly height: number;
  readonly durationSeconds: number;
}

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

/** The bytes are not a video we accept (the task fails INVALID_MEDIA, uncharged). */
export class InvalidMediaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidMediaError';
  }
}
