// PROCESSING_MEDIA → SUCCEEDED: validate the stored video (its MP4 boxes, else ffprobe), make a thumbnail,
// then finish the task and settle the ledger in one transaction. The charge follows the
// measured duration, capped at what was reserved.
import { createHash } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { and, eq } from 'drizzle-orm';
import { holdFence } from '../db/fence';
import { asset, generationTask } from '../db/schema';
import { lockTask, newId } from '../db/tasks';
import { findModel, priceFor, type Resolution } from '../domain/catalog';
import { FailureType } from '../domain/errors';
import type { TaskFacts } from '../domain/facts';
import { minMoney } from '../domain/money';
import { InvalidMediaError, demuxerOf, extractThumbnail, probeStored, type MediaInfo } from '../media/probe';
import { thumbnailObjectKey } from '../storage/s3';
import { fenced, notFound, storageAt, withHeartbeat, type TaskActivityDeps } from './deps';
import { failedUncharged, finishTask } from '../db/settlement';
import { readTaskFacts } from './task-facts';

/** Where the thumbnail's frame is taken (the middle of a shorter video). */
const THUMBNAIL_AT_SECONDS = 0.5;

export function createMediaActivities(deps: TaskActivityDeps) {
  return {
    async processMedia(taskId: string): Promise<TaskFacts> {
      await withHeartbeat(() => fenced(deps, async (token) => {
        const [task] = await deps.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
        if (!task) throw notFound(`task ${taskId}`);
        if (task.status !== 'PROCESSING_MEDIA') return;
        const [video] = await deps.db
          .select()
          .from(asset)
          .where(and(eq(asset.task_id, taskId), eq(asset.kind, 'video')));
        if (!video) throw ApplicationFailure.create({ type: FailureType.InvalidState, message: `task ${taskId} has no video asset`, nonRetryable: true });

        // The video is read where the rescue stored it; the thumbnail goes next to it.
        const store = storageAt(deps, video.location);
        const url = await store.presignGet(video.object_key, 900);
        let info: MediaInfo | null = null;
        let invalid: string | null = null;
        let thumbnail: { sha256: string; size: number } | null = null;
        const thumbKey = thumbnailObjectKey(task.tenant_id, taskId, video.attempt_id);
        try {
          // The probe reads the MP4's boxes in process when it can (ffprobe otherwise), side by
          // side with the thumbnail lookup; the frame is taken only from a valid file.
          const [probed, existing] = await Promise.all([
            probeStored(store, video.object_key, Number(video.size_bytes), url),
            store.head(thumbKey),
          ]);
          info = probed;
          let thumb = existing?.sha256 ? { sha256: existing.sha256, size: existing.size } : null;
          if (!thumb) {
            const jpeg = await extractThumbnail(url, Math.min(THUMBNAIL_AT_SECONDS, info.durationSeconds / 2), demuxerOf(info.container));
            const sha256 = createHash('sha256').update(jpeg).digest('hex');
            await store.put(thumbKey, jpeg, { contentType: 'image/jpeg', sha256 });
            thumb = { sha256, size: jpeg.length };
          }
          thumbnail = thumb;
        } catch (err) {
          if (!(err instanceof InvalidMediaError)) throw err;
          invalid = err.message;
        }

        await deps.db.transaction(async (tx) => {
          await holdFence(tx, token);
          const current = await lockTask(tx, taskId);
          if (!current || current.status !== 'PROCESSING_MEDIA') return;
          if (!info) {
            await finishTask(tx, token, current, failedUncharged('workflow.media-invalid', 'INVALID_MEDIA', invalid ?? 'invalid media'));
            return;
          }
          await tx.update(asset).set({ media_info: info }).where(eq(asset.asset_id, video.asset_id));
          // The thumbnail's row is a fact like the rest: written under the fence, with the result.
          if (thumbnail) {
            await tx
              .insert(asset)
              .values({
                asset_id: newId(),
                tenant_id: task.tenant_id,
                task_id: taskId,
                attempt_id: video.attempt_id,
                kind: 'thumbnail',
                bucket: store.bucket,
                region: deps.storage.region,
                location: video.location,
                object_key: thumbKey,
                sha256: thumbnail.sha256,
                size_bytes: thumbnail.size,
                content_type: 'image/jpeg',
              })
              .onConflictDoNothing();
          }
          await finishTask(tx, token, current, {
            to: 'SUCCEEDED',
            charge: chargeFor(current.request, current.reserved_amount, info),
            sourceEvent: 'workflow.media-valid',
            actor: 'workflow',
            detail: { duration_seconds: info.durationSeconds, codec: info.videoCodec },
          });
        });
      }));
      return readTaskFacts(deps.db, taskId, deps.clock.now());
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
  const seconds = Math.min(req.duration_seconds, Math.ceil(info.durationSeconds - 1e-3));
  return minMoney(priceFor(entry, req.resolution, Math.max(0, seconds)), reserved);
}
