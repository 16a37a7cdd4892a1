// PROCESSING_MEDIA → SUCCEEDED: validate the stored video (its MP4 boxes, else ffprobe), then
// finish the task and settle the ledger in one transaction. The charge follows the measured
// duration, capped at what was reserved. The thumbnail is made after SUCCEEDED, not before
// (activities/thumbnail.ts, docs/decisions/0036-thumbnail-off-the-path.md).
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { and, eq } from 'drizzle-orm';
import { holdFence } from '../db/fence';
import { asset, generationTask } from '../db/schema';
import { lockTask } from '../db/tasks';
import { findModel, priceFor, type Resolution } from '../domain/catalog';
import { FailureType } from '../domain/errors';
import type { TaskFacts } from '../domain/facts';
import { minMoney } from '../domain/money';
import { InvalidMediaError, type MediaInfo } from '../media/media-info';
import { probeStored } from '../media/probe';
import { fenced, notFound, storageAt, withHeartbeat, type TaskActivityDeps } from './deps';
import { failedUncharged, finishTask } from '../db/settlement';
import { readTaskFacts } from './task-facts';
import type { ThumbnailFollowUp } from './thumbnail';

export function createMediaActivities(deps: TaskActivityDeps, thumbnails: ThumbnailFollowUp) {
  return {
    async processMedia(taskId: string): Promise<TaskFacts> {
      await withHeartbeat(() =>
        fenced(deps, async (token) => {
          const [task] = await deps.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
          if (!task) throw notFound(`task ${taskId}`);
          if (task.status !== 'PROCESSING_MEDIA') return;
          const [video] = await deps.db
            .select()
            .from(asset)
            .where(and(eq(asset.task_id, taskId), eq(asset.kind, 'video')));
          if (!video) throw ApplicationFailure.create({ type: FailureType.InvalidState, message: `task ${taskId} has no video asset`, nonRetryable: true });

          // The video is read where the rescue stored it.
          const store = storageAt(deps, video.location);
          const url = await store.presignGet(video.object_key, 900);
          let info: MediaInfo | null = null;
          let invalid: string | null = null;
          try {
            // The MP4's boxes in process when it can, ffprobe on the presigned URL otherwise.
            info = await probeStored(store, video.object_key, Number(video.size_bytes), url);
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
            await finishTask(tx, token, current, {
              to: 'SUCCEEDED',
              charge: chargeFor(current.request, current.reserved_amount, info),
              sourceEvent: 'workflow.media-valid',
              actor: 'workflow',
              detail: { duration_seconds: info.durationSeconds, codec: info.videoCodec },
            });
          });
        }),
      );
      const facts = await readTaskFacts(deps.db, taskId, deps.clock.now());
      // After SUCCEEDED (this run's or an earlier one's: a retry after a lost answer asks again,
      // and the maker finds the row it wrote): the thumbnail, in the background of this worker.
      if (facts.status === 'SUCCEEDED') thumbnails.after(taskId, Context.current().log);
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
  const seconds = Math.min(req.duration_seconds, Math.ceil(info.durationSeconds - 1e-3));
  return minMoney(priceFor(entry, req.resolution, Math.max(0, seconds)), reserved);
}
