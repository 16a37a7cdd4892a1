// What the media check learns about a stored video (media/media-info.ts, media/probe.ts): plain
// data, stored on the video row (db/schema.ts media_info).

export interface MediaInfo {
  readonly container: string;
  readonly videoCodec: string;
  readonly width: number;
  readonly height: number;
  readonly durationSeconds: number;
}
