// The thumbnail of a SUCCEEDED task, made after the task succeeded rather than before
// (docs/decisions/0036-thumbnail-off-the-path.md): its ffmpeg (~0.1 s of CPU a run, most of it
// loading shared libraries) no longer stands between a provider's callback and SUCCEEDED, and
// the follow-up takes the frames of thumbnails asked for together in one run
// (docs/decisions/0042-thumbnail-batches.md).
// `makeThumbnail` is idempotent and decides on the facts: a SUCCEEDED task whose video is
// validated (media_info) and not deleted, and that has no thumbnail row yet, gets one JPEG next
// to its video and one `asset` row of kind 'thumbnail', written under the fence; the row's insert
// announces it (webhook `task.thumbnail_ready`, docs/webhooks.md). Two callers: the media step's
// follow-up in the same worker right after SUCCEEDED (best effort, bounded), and the
// `thumbnails` reconciler (reconcilers/thumbnails.ts) for any the follow-up did not make (a
// worker stopped, S3 failed, the mode paused fact writes).
import { createHash } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type { Db } from '../db/client';
import { FenceRejectedError } from '../db/fence';
import { ModePausedError } from '../db/modes';
import { inTaskTransaction } from '../db/task-tx';
import { asset, generationTask } from '../db/schema';
import type { MediaInfo } from '../media/media-info';
import { newId } from '../db/tasks';
import { createFrameBatcher, type FrameSource } from '../media/frame-batches';
import { demuxerOf, extractThumbnail } from '../media/probe';
import { redactText } from '../observability/redact';
import { thumbnailObjectKey, type ObjectStorage } from '../storage/s3';
import { storageAt } from './deps';

/** Where the thumbnail's frame is taken (the middle of a shorter video). */
export const THUMBNAIL_AT_SECONDS = 0.5;

export interface ThumbnailDeps {
  readonly db: Db;
  readonly fence: { readonly scope: string; readonly region: string };
  readonly storage: ObjectStorage;
  readonly fallbackStorage?: ObjectStorage | null;
  /** Where the frame is taken (default: one ffmpeg run for this thumbnail alone). */
  readonly frames?: FrameSource;
}

/** One ffmpeg run per frame. */
const frameAlone: FrameSource = (r) => extractThumbnail(r.input, r.atSeconds, r.demuxer);

/**
 * made: this call wrote the row; present: a row was there; not-applicable: the task is not
 * SUCCEEDED with a live, validated video (nothing to do, ever); paused: the fence or the mode
 * refused the write now (the reconciler comes back).
 */
export type ThumbnailOutcome = 'made' | 'present' | 'not-applicable' | 'paused';

/** A SUCCEEDED task's validated video: what a thumbnail is made from. */
export type ValidatedVideo = Pick<typeof asset.$inferSelect, 'asset_id' | 'tenant_id' | 'attempt_id' | 'location' | 'object_key'> & {
  readonly media_info: MediaInfo;
};

/** The task's video when a thumbnail is to be made of it, else why not. */
async function videoToThumbnail(deps: ThumbnailDeps, taskId: string): Promise<ValidatedVideo | 'present' | 'not-applicable'> {
  const rows = await deps.db
    .select({ status: generationTask.status, asset })
    .from(generationTask)
    .innerJoin(asset, eq(asset.task_id, generationTask.task_id))
    .where(eq(generationTask.task_id, taskId));
  if (rows.some((r) => r.asset.kind === 'thumbnail')) return 'present';
  const video = rows.find((r) => r.asset.kind === 'video')?.asset;
  if (rows[0]?.status !== 'SUCCEEDED' || !video || video.deleted_at || !video.media_info) return 'not-applicable';
  return { ...video, media_info: video.media_info };
}

/**
 * `validated`: the video the media step has just validated, in the transaction that made the task
 * SUCCEEDED (its follow-up); the task and its assets are read otherwise. Whether the video is still
 * there is decided in the transaction that records the thumbnail either way.
 */
export async function makeThumbnail(deps: ThumbnailDeps, taskId: string, validated?: ValidatedVideo): Promise<ThumbnailOutcome> {
  const found = validated ?? (await videoToThumbnail(deps, taskId));
  if (typeof found === 'string') return found;
  const video = found;
  const info = video.media_info;

  const store = storageAt(deps, video.location);
  const key = thumbnailObjectKey(video.tenant_id, taskId, video.attempt_id);
  // A put whose row was not written (the process stopped between them) is found, not redone.
  const existing = await store.head(key);
  let thumb = existing?.sha256 ? { sha256: existing.sha256, size: existing.size } : null;
  if (!thumb) {
    const url = await store.presignGet(video.object_key, 900);
    const jpeg = await (deps.frames ?? frameAlone)({
      input: url,
      atSeconds: Math.min(THUMBNAIL_AT_SECONDS, info.durationSeconds / 2),
      demuxer: demuxerOf(info.container),
    });
    const sha256 = createHash('sha256').update(jpeg).digest('hex');
    await store.put(key, jpeg, { contentType: 'image/jpeg', sha256 });
    thumb = { sha256, size: jpeg.length };
  }

  // A task transaction (db/task-tx.ts): the fence and the mode are checked as it begins.
  const outcome = await inTaskTransaction(deps.db, deps.fence, taskId, async (tx): Promise<ThumbnailOutcome> => {
    // The video row, locked: an output deletion (storage/output-lifecycle.ts) marks it in its own
    // transaction, so a thumbnail is never recorded beside a deleted video.
    const [current] = await tx.select().from(asset).where(eq(asset.asset_id, video.asset_id)).for('update');
    if (!current || current.deleted_at) return 'not-applicable';
    const inserted = await tx
      .insert(asset)
      .values({
        asset_id: newId(),
        tenant_id: video.tenant_id,
        task_id: taskId,
        attempt_id: video.attempt_id,
        kind: 'thumbnail',
        bucket: store.bucket,
        region: deps.storage.region,
        location: video.location,
        object_key: key,
        sha256: thumb.sha256,
        size_bytes: thumb.size,
        content_type: 'image/jpeg',
      })
      .onConflictDoNothing()
      .returning({ id: asset.asset_id });
    return inserted.length > 0 ? 'made' : 'present';
  }).then(
    (r) => r.value,
    (err: unknown) => {
      if (err instanceof FenceRejectedError || err instanceof ModePausedError) return 'paused' as const;
      throw err;
    },
  );
  // The video went while the frame was taken: the object is not left behind.
  if (outcome === 'not-applicable') await store.delete(key);
  return outcome;
}

/** A failure for a log line or a finding: ffmpeg's message names its input, a presigned URL, so it is redacted. */
export const failureText = (err: unknown): string => redactText(err instanceof Error ? err.message : String(err)).slice(0, 500);

/**
 * The follow-up's frames: up to 8 in one ffmpeg run, 2 runs at once (a run is ~0.1 s of one core,
 * most of it ffmpeg's start-up, and ~0.02 s more a frame), the first frame waiting up to 0.5 s for
 * others (docs/decisions/0042-thumbnail-batches.md).
 */
export const FOLLOW_UP_FRAMES = { maxBatch: 8, lingerMs: 500, maxRuns: 2, timeoutMs: 30_000 } as const;
/** Thumbnails in the making at once by one worker's follow-up: enough to fill both runs; more wait their turn. */
const FOLLOW_UP_CONCURRENCY = FOLLOW_UP_FRAMES.maxBatch * FOLLOW_UP_FRAMES.maxRuns;
/** Beyond this many waiting, the follow-up drops new ones and leaves them to the reconciler. */
const FOLLOW_UP_MAX_WAITING = 1_000;

/** Where a failed follow-up is reported (the enqueuing activity's logger). */
interface FollowUpLog {
  warn(message: string, attrs?: Record<string, unknown>): void;
}

export interface ThumbnailFollowUp {
  /** Makes the task's thumbnail soon, in this process (of `validated` when given); never throws and never waits. */
  after(taskId: string, log: FollowUpLog, validated?: ValidatedVideo): void;
}

/**
 * The media step's follow-up: a small in-process queue that makes thumbnails right after their
 * tasks succeeded. Best effort by design: a failure is logged and left to the reconciler, and a
 * process that stops loses only what it had queued (the reconciler again).
 */
export function createThumbnailFollowUp(base: ThumbnailDeps): ThumbnailFollowUp {
  const deps: ThumbnailDeps = { ...base, frames: base.frames ?? createFrameBatcher(FOLLOW_UP_FRAMES) };
  const waiting: { taskId: string; log: FollowUpLog; validated: ValidatedVideo | undefined }[] = [];
  const queued = new Set<string>();
  let running = 0;
  const next = (): void => {
    while (running < FOLLOW_UP_CONCURRENCY && waiting.length > 0) {
      const { taskId, log, validated } = waiting.shift()!;
      running += 1;
      makeThumbnail(deps, taskId, validated)
        .catch((err: unknown) => log.warn('thumbnail follow-up failed; the thumbnails reconciler will make it', { taskId, error: failureText(err) }))
        .finally(() => {
          running -= 1;
          queued.delete(taskId);
          next();
        });
    }
  };
  return {
    after(taskId, log, validated) {
      if (queued.has(taskId) || waiting.length >= FOLLOW_UP_MAX_WAITING) return;
      queued.add(taskId);
      waiting.push({ taskId, log, validated });
      next();
    },
  };
}
