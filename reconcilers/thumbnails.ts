// Thumbnails reconciler: SUCCEEDED tasks whose validated video has no thumbnail yet
// (docs/decisions/0036-thumbnail-off-the-path.md). The media step's follow-up makes them right after
// SUCCEEDED in the same worker; this finds what it did not make (the worker stopped, S3 or ffmpeg
// failed, the mode paused fact writes) and makes it with the same idempotent, fenced function.
// Tasks that succeeded more than WINDOW_HOURS ago are no longer tried, so a video ffmpeg cannot
// decode costs one attempt a run for a day, not for ever.
import { sql } from 'drizzle-orm';
import { failureText, makeThumbnail } from '../activities/thumbnail';
import type { ReconcileFinding, Reconciler } from './types';

const WINDOW_HOURS = 24;

export const thumbnailsReconciler: Reconciler = {
  name: 'thumbnails',
  async run(deps, opts) {
    const { rows } = await deps.db.execute(sql`
      SELECT t.task_id::text AS task_id
      FROM generation_task t JOIN asset v ON v.task_id = t.task_id AND v.kind = 'video'
      WHERE t.status = 'SUCCEEDED'
        AND t.terminal_at < now() - make_interval(secs => ${deps.settings.graceSeconds})
        AND t.terminal_at > now() - make_interval(hours => ${WINDOW_HOURS})
        AND v.deleted_at IS NULL AND v.media_info IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM asset th WHERE th.task_id = t.task_id AND th.kind = 'thumbnail')
      ORDER BY t.terminal_at DESC
      LIMIT ${opts.limit}`);
    const findings: ReconcileFinding[] = [];
    let changed = 0;
    for (const { task_id: taskId } of rows as { task_id: string }[]) {
      if (opts.dryRun) {
        findings.push({ kind: 'missing-thumbnail', taskId, detail: 'SUCCEEDED without a thumbnail (dry run: not made)' });
        continue;
      }
      const outcome = await makeThumbnail(deps, taskId).catch((err: unknown) => `failed: ${failureText(err)}`);
      if (outcome === 'made') changed += 1;
      findings.push({ kind: 'missing-thumbnail', taskId, detail: `SUCCEEDED without a thumbnail: ${outcome}` });
    }
    return { examined: rows.length, findings, changed };
  },
};
