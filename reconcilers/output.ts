// Output reconciler: rescues that are not moving, earliest provider URL expiry first
// (output_deadline_at). The workflow, started or woken, resumes the rescue (activities/rescue-output.ts),
// which re-checks storage first and marks OUTPUT_AT_RISK itself when the URL is about to expire.
import { sql } from 'drizzle-orm';
import { convergeTasks, type StuckTask } from './converge';
import type { Reconciler } from './types';

export const outputReconciler: Reconciler = {
  name: 'output',
  async run(deps, opts) {
    const { rows } = await deps.db.execute(sql`
      SELECT t.task_id::text, t.tenant_id::text, t.provider,
             t.status || ' unchanged for ' || extract(epoch FROM now() - t.updated_at)::int || ' s; output URL '
               || coalesce('expires ' || to_char(a.output_deadline_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), 'expiry unknown') AS detail
      FROM generation_task t JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
      WHERE t.terminal_at IS NULL AND t.status IN ('PROVIDER_SUCCEEDED', 'FETCHING_OUTPUT', 'OUTPUT_AT_RISK', 'PROCESSING_MEDIA')
        AND t.updated_at < now() - make_interval(secs => ${deps.settings.graceSeconds})
      ORDER BY a.output_deadline_at ASC NULLS LAST, t.updated_at
      LIMIT ${opts.limit}`);
    return convergeTasks(deps, opts, 'stuck-rescue', rows as unknown as StuckTask[]);
  },
};
