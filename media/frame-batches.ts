// Thumbnail frames taken together: the frames asked for within a short wait go to one ffmpeg
// run (media/probe.ts extractFrames), so its start-up, most of a thumbnail's CPU, is paid once
// for the lot (docs/decisions/0042-thumbnail-batches.md). A run that fails as a whole (ffmpeg
// exits non-zero or runs out of time: which input it could not read is not known) is not
// charged to its neighbours: each of its frames is asked for again in a run of its own, so a bad
// video fails only itself, with the error it would have had alone.
import type { InvalidMediaError } from './media-info';
import { extractFrames, type FrameRequest } from './probe';

export interface FrameBatchSettings {
  /** Frames in one ffmpeg run at most. */
  readonly maxBatch: number;
  /** How long the first frame waiting waits for others before its run starts. */
  readonly lingerMs: number;
  /** ffmpeg runs at once at most. */
  readonly maxRuns: number;
  /** Time a run may take (a run of one frame, or a batch). */
  readonly timeoutMs: number;
}

/** One JPEG frame of a video (media/probe.ts FrameRequest). */
export type FrameSource = (request: FrameRequest) => Promise<Buffer>;

type Extract = (requests: readonly FrameRequest[], timeoutMs: number) => Promise<(Buffer | InvalidMediaError)[]>;

interface Waiting {
  readonly request: FrameRequest;
  readonly since: number;
  /** Asked for again after its batch failed: runs alone. */
  readonly alone: boolean;
  resolve(frame: Buffer): void;
  reject(err: unknown): void;
}

/** A FrameSource that batches; `extract` is ffmpeg's (tests pass their own). */
export function createFrameBatcher(settings: FrameBatchSettings, extract: Extract = extractFrames): FrameSource {
  const waiting: Waiting[] = [];
  let running = 0;
  let timer: NodeJS.Timeout | null = null;

  /** The next run's frames: one asked for again alone, else up to maxBatch from the front. */
  const takeBatch = (): Waiting[] => {
    if (waiting[0]!.alone) return waiting.splice(0, 1);
    const end = waiting.findIndex((w, i) => w.alone || i >= settings.maxBatch);
    return waiting.splice(0, end < 0 ? waiting.length : end);
  };

  const run = (batch: Waiting[]): void => {
    running += 1;
    extract(
      batch.map((w) => w.request),
      settings.timeoutMs,
    )
      .then(
        (frames) => batch.forEach((w, i) => (frames[i] instanceof Buffer ? w.resolve(frames[i]) : w.reject(frames[i]))),
        (err: unknown) => {
          if (batch.length === 1) return batch[0]!.reject(err);
          waiting.unshift(...batch.map((w) => ({ ...w, alone: true })));
        },
      )
      .finally(() => {
        running -= 1;
        pump();
      });
  };

  function pump(): void {
    while (running < settings.maxRuns && waiting.length > 0) {
      const first = waiting[0]!;
      const waited = Date.now() - first.since;
      if (!first.alone && waiting.length < settings.maxBatch && waited < settings.lingerMs) {
        // Not full and not waited long enough: come back when the first has.
        timer ??= setTimeout(() => {
          timer = null;
          pump();
        }, settings.lingerMs - waited).unref();
        return;
      }
      run(takeBatch());
    }
  }

  return (request) =>
    new Promise<Buffer>((resolve, reject) => {
      waiting.push({ request, since: Date.now(), alone: false, resolve, reject });
      pump();
    });
}
