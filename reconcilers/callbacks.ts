// Callback replayer: provider events that reached the inbox but were never applied (the API died
// between the insert and the wake signal; the signal was lost). Waking the task's workflow makes
// it apply its inbox (activities/apply-inbox.ts), which dedupes and orders the events itself.
// Events for finished tasks, events matched to no task and this host's callback spool are
// reported, not touched: the spool is replayed by the API process that owns it (api/spool.ts),
// because a replay needs the API's token check.
import fs from 'node:fs/promises';
import { sql } from 'drizzle-orm';
import { spoolStatus } from '../storage/spool-files';
import { convergeTasks, type StuckTask } from './converge';
import type { Reconciler, ReconcileFinding } from './types';

export const callbacksReconciler: Reconciler = {
  name: 'callbacks',
  async run(deps, opts) {
    const grace = deps.settings.graceSeconds;
    const { rows } = await deps.db.execute(sql`
      SELECT t.task_id::text, t.tenant_id::text, t.provider,
             count(*)::int || ' unprocessed inbox row(s), oldest ' || max(extract(epoch FROM now() - i.received_at))::int || ' s' AS detail
      FROM callback_inbox i JOIN generation_task t ON t.task_id = i.task_id
      WHERE i.processed_at IS NULL AND i.received_at < now() - make_interval(secs => ${grace}) AND t.terminal_at IS NULL
      GROUP BY t.task_id ORDER BY min(i.received_at) LIMIT ${opts.limit}`);
    const report = await convergeTasks(deps, opts, 'unprocessed-inbox', rows as unknown as StuckTask[]);
    const findings: ReconcileFinding[] = [...report.findings];

    const { rows: others } = await deps.db.execute(sql`
      SELECT count(*) FILTER (WHERE i.task_id IS NULL)::int AS unmatched,
             count(*) FILTER (WHERE t.terminal_at IS NOT NULL)::int AS after_terminal
      FROM callback_inbox i LEFT JOIN generation_task t ON t.task_id = i.task_id
      WHERE i.processed_at IS NULL AND i.received_at < now() - make_interval(secs => ${grace})`);
    const o = others[0] as { unmatched: number; after_terminal: number };
    if (o.unmatched > 0) findings.push({ kind: 'unmatched-inbox', detail: `${o.unmatched} unprocessed row(s) match no task (a foreign or stale token)` });
    if (o.after_terminal > 0)
      findings.push({ kind: 'inbox-after-terminal', detail: `${o.after_terminal} unprocessed row(s) arrived for finished tasks (kept as evidence)` });

    const spool = await fs
      .stat(deps.settings.spoolDir)
      .then(() => spoolStatus(deps.settings.spoolDir))
      .catch(() => null);
    if (spool && spool.pending > 0)
      findings.push({
        kind: 'spool-pending',
        key: spool.dir,
        detail: `${spool.pending} spooled callback(s) in ${spool.files} file(s) wait for the API's replayer`,
      });
    if (spool && spool.deadLetters > 0)
      findings.push({
        kind: 'spool-dead-letter',
        key: spool.dir,
        detail: `${spool.deadLetters} dead letter(s): ops spool status, then ops spool requeue once the cause is fixed`,
      });
    return { examined: report.examined + o.unmatched + o.after_terminal + (spool?.pending ?? 0), findings, changed: report.changed };
  },
};
