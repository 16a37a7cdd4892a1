// The media step's bound (docs/design.md §5 "Bounds"). A failure that is no verdict on the video
// (ffprobe crashed, timed out, overflowed or answered garbage; our storage could not be read) is
// counted in generation_task.media_failures, in a committed transaction of its own under the
// fence, so the count holds across activity retries, workers and workflow resets. Below
// MEDIA_MAX_FAILURES the step fails retryably; at it the task parks in MANUAL_REVIEW with the
// last error as evidence, and the step returns the facts: a valid output whose check keeps
// failing never holds its reservation for ever in PROCESSING_MEDIA. (A verdict, InvalidMediaError,
// is not counted: the task fails INVALID_MEDIA, released.)
import { Context } from '@temporalio/activity';
import { eq, sql } from 'drizzle-orm';
import { generationTask } from '../db/schema';
import { storableText } from '../db/storable';
import type { TaskFacts } from '../domain/facts';
import { quoted } from '../media/probe';
import { inTaskStep, toActivityFailure, type TaskActivityDeps } from './deps';
import { escalate } from './escalate';
import { readTaskFacts } from './task-facts';

/**
 * Counts `err`, a failure of the media step on `taskId` that is no verdict on its video. Throws a
 * plain (retryable) Error, its message bounded, while the count is below the limit; returns the
 * facts once the task is out of PROCESSING_MEDIA: parked by this failure, or moved on meanwhile
 * (an operator's escalation, another run's verdict), in which case nothing is counted.
 */
export async function recordMediaFailure(deps: TaskActivityDeps, taskId: string, err: unknown): Promise<TaskFacts> {
  const said = quoted(err instanceof Error ? err.message : String(err));
  const limit = deps.settings.mediaMaxFailures;
  const { value: counted, facts } = await inTaskStep(
    deps,
    taskId,
    async (tx, { task, token }) => {
      if (task?.status !== 'PROCESSING_MEDIA') return null;
      const [row] = await tx
        .update(generationTask)
        .set({ media_failures: sql`${generationTask.media_failures} + 1` })
        .where(eq(generationTask.task_id, taskId))
        .returning({ n: generationTask.media_failures });
      return { n: row!.n, token };
    },
    { facts: () => deps.clock.now() },
  );
  if (!counted) return facts ?? readTaskFacts(deps.db, taskId, deps.clock.now());
  const { n, token } = counted;
  if (n < limit) {
    // The cause is kept: what the probe throws is bounded and carries no raw tool output.
    throw new Error(`media step failed (${n} of ${limit} before MANUAL_REVIEW): ${said}`, { cause: err });
  }
  Context.current().log.warn('media step failed for the last time; parking the task in MANUAL_REVIEW', { taskId, mediaFailures: n, error: said });
  try {
    await escalate(deps, token, taskId, {
      sourceEvent: 'workflow.media-failures',
      detail: {
        reason: `the media step failed ${n} times without a verdict on the video`,
        media_failures: n,
        limit,
        last_error: storableText(said),
      },
      when: (_tx, task) => task.status === 'PROCESSING_MEDIA',
    });
  } catch (escalateErr) {
    throw toActivityFailure(escalateErr, deps.modePauseRetryMs);
  }
  return readTaskFacts(deps.db, taskId, deps.clock.now());
}
