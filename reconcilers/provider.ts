// Provider reconciler: tasks waiting on a provider that nobody is asking. A SUBMIT_UNKNOWN task
// whose attempt's lookup has been due for longer than the grace (its workflow is gone or asleep), and
// SUBMITTED/RUNNING tasks unchanged for RECONCILE_LONG_RUNNING_MS. The workflow, started or woken,
// re-reads the provider through its own lookup and poll (docs/design.md §5 "Unknown outcome").
import { sql } from 'drizzle-orm';
import { convergeTasks, type StuckTask } from './converge';
import type { Reconciler } from './types';

export const providerReconciler: Reconciler = {
  name: 'provider',
  async run(deps, opts) {
    const { graceSeconds, longRunningSeconds } = deps.settings;
    const { rows } = await deps.db.execute(sql`
      SELECT t.task_id::text, t.tenant_id::text, t.provider,
             CASE WHEN t.status = 'SUBMIT_UNKNOWN'
               THEN 'submit outcome unknown, its lookup due ' || extract(epoch FROM now() - coalesce(a.next_poll_at, a.unknown_since, a.created_at))::int || ' s ago, last looked up '
                    || coalesce(extract(epoch FROM now() - a.last_polled_at)::int || ' s ago', 'never') || ' (attempt ' || a.attempt_id || ')'
               ELSE t.status || ' unchanged for ' || extract(epoch FROM now() - t.updated_at)::int || ' s (job ' || coalesce(a.provider_job_id, '?') || ')'
             END AS detail
      FROM generation_task t JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
      WHERE t.terminal_at IS NULL AND (
           (t.status = 'SUBMIT_UNKNOWN'
            AND coalesce(a.next_poll_at, a.unknown_since, a.created_at) < now() - make_interval(secs => ${graceSeconds}))
        OR (t.status IN ('SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED') AND t.updated_at < now() - make_interval(secs => ${longRunningSeconds})))
      ORDER BY t.updated_at LIMIT ${opts.limit}`);
    return convergeTasks(deps, opts, 'provider-wait', rows as unknown as StuckTask[]);
  },
};
