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

/** The bytes are not a video we accept (the task fails INVALID_MEDIA, uncharged). */
export class InvalidMediaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidMediaError';
  }
}
