// PROCESSING_MEDIA → SUCCEEDED: validate the stored video (its MP4 boxes, else ffprobe), then
// finish the task and settle the ledger in one transaction. The charge follows the measured
// duration, capped at what was reserved. The thumbnail is made after SUCCEEDED, not before
// (activities/thumbnail.ts, docs/decisions/0036-thumbnail-off-the-path.md).
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { and, eq } from 'drizzle-orm';
import { asset, generationTask } from '../db/schema';
import { findModel, priceFor, type Resolution } from '../domain/catalog';
import { FailureType } from '../domain/errors';
import type { TaskFacts } from '../domain/facts';
import { minMoney } from '../domain/money';
import { InvalidMediaError, MIN_DURATION_SECONDS, mediaTypeOf, type MediaInfo } from '../media/media-info';
import { probeStored } from '../media/probe';
import { inTaskStep, notFound, storageAt, withHeartbeat, type TaskActivityDeps } from './deps';
import { failedUncharged, finishTask } from '../db/settlement';
import { recordMediaFailure } from './media-failures';
import { readTaskFacts } from './task-facts';
import type { ThumbnailFollowUp, ValidatedVideo } from './thumbnail';

/** The columns of the video asset the media step validates: what a rescue returns when it records one, and what the step reads otherwise. */
export const STORED_VIDEO_COLUMNS = {
  asset_id: asset.asset_id,
  tenant_id: asset.tenant_id,
  attempt_id: asset.attempt_id,
  location: asset.location,
  object_key: asset.object_key,
  size_bytes: asset.size_bytes,
};
export type StoredVideo = Pick<typeof asset.$inferSelect, keyof typeof STORED_VIDEO_COLUMNS>;

export function createMediaActivities(deps: TaskActivityDeps, thumbnails: ThumbnailFollowUp) {
  /** The task's video asset, when the task is in PROCESSING_MEDIA (null: nothing to do). */
  async function videoToCheck(taskId: string): Promise<StoredVideo | null> {
    const [row] = await deps.db
      .select({
        status: generationTask.status,
        video: STORED_VIDEO_COLUMNS,
      })
      .from(generationTask)
      .leftJoin(asset, and(eq(asset.task_id, generationTask.task_id), eq(asset.kind, 'video')))
      .where(eq(generationTask.task_id, taskId));
    if (!row) throw notFound(`task ${taskId}`);
    if (row.status !== 'PROCESSING_MEDIA') return null;
    if (!row.video) throw ApplicationFailure.create({ type: FailureType.InvalidState, message: `task ${taskId} has no video asset`, nonRetryable: true });
    return row.video;
  }

  /** The video's media facts: its MP4 boxes in process when it can, ffprobe on a presigned URL otherwise. */
  async function probe(video: StoredVideo): Promise<MediaInfo> {
    // The video is read where the rescue stored it.
    const store = storageAt(deps, video.location);
    const url = await store.presignGet(video.object_key, 900);
    return probeStored(store, video.object_key, Number(video.size_bytes), url, deps.settings.mediaProbeTimeoutMs);
  }

  /**
   * Validates `video` and finishes the task in one task transaction; the facts after it, and the
   * video when this made it SUCCEEDED. A failure that is no verdict on the video is counted toward
   * the step's bound: it throws (retryable) below it, and parks the task at it (activities/media-failures.ts).
   */
  async function check(taskId: string, video: StoredVideo): Promise<{ facts: TaskFacts | null; validated: ValidatedVideo | null }> {
    let info: MediaInfo | null = null;
    let invalid: string | null = null;
    try {
      info = await probe(video);
    } catch (err) {
      if (!(err instanceof InvalidMediaError)) return { facts: await recordMediaFailure(deps, taskId, err), validated: null };
      invalid = err.message;
    }
    const { value: validated, facts } = await inTaskStep(
      deps,
      taskId,
      async (tx, { token, task: current }): Promise<ValidatedVideo | null> => {
        if (!current || current.status !== 'PROCESSING_MEDIA') return null;
        if (!info) {
          await finishTask(tx, token, current, failedUncharged('workflow.media-invalid', 'INVALID_MEDIA', invalid ?? 'invalid media'));
          return null;
        }
        // The rescue stored it as MP4 before anything read it; the probe says what it is (a WebM is served as one).
        await tx
          .update(asset)
          .set({ media_info: info, content_type: mediaTypeOf(info) })
          .where(eq(asset.asset_id, video.asset_id));
        await finishTask(tx, token, current, {
          to: 'SUCCEEDED',
          charge: chargeFor(current.request, current.reserved_amount, info),
          sourceEvent: 'workflow.media-valid',
          actor: 'workflow',
          detail: { duration_seconds: info.durationSeconds, codec: info.videoCodec },
        });
        return { ...video, media_info: info };
      },
      { facts: () => deps.clock.now() },
    );
    return { facts, validated };
  }

  return {
    /** `video`: the asset the rescue just recorded (its own run), else read with the task. */
    async processMedia(taskId: string, video?: StoredVideo): Promise<TaskFacts> {
      const checked = await withHeartbeat(async () => {
        const toCheck = video ?? (await videoToCheck(taskId));
        return toCheck ? check(taskId, toCheck) : null;
      });
      const facts = checked?.facts ?? (await readTaskFacts(deps.db, taskId, deps.clock.now()));
      // After SUCCEEDED (this run's or an earlier one's: a retry after a lost answer asks again,
      // and the maker finds the row it wrote): the thumbnail, in the background of this worker.
      if (facts.status === 'SUCCEEDED') thumbnails.after(taskId, Context.current().log, checked?.validated ?? undefined);
      return facts;
    },
  };
}

/**
 * Price of the seconds actually delivered (rounded up, at most those ordered), capped at the
 * reservation. Priced by what the tenant ordered (the request's model), whichever provider ran it.
 */
export function chargeFor(request: unknown, reserved: string, info: MediaInfo): string {
  const req = request as { model: string; duration_seconds: number; resolution: Resolution };
  const entry = findModel(req.model);
  if (!entry) return reserved;
  // Whole seconds, rounded up with a tolerance of MIN_DURATION_SECONDS (2.0004 s is 2), at least one.
  const seconds = Math.min(req.duration_seconds, Math.max(1, Math.ceil(info.durationSeconds - MIN_DURATION_SECONDS)));
  return minMoney(priceFor(entry, req.resolution, seconds), reserved);
}
