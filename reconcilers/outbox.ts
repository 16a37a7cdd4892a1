// Outbox reconciler: accepted tasks whose start was never published (the API died after its
// commit, the relay is down or keeps failing). Publishing is the relay's own pass
// (workers/outbox-relay.ts relayOnce): the start is idempotent (workflow id = task id) and the
// row is marked under the fence.
import { sql } from 'drizzle-orm';
import { relayOnce } from '../workers/outbox-relay';
import type { Reconciler, ReconcileFinding } from './types';

interface Row {
  event_id: string;
  aggregate_id: string;
  event_type: string;
  publish_attempts: number;
  last_error: string | null;
  age: number;
}

export const outboxReconciler: Reconciler = {
  name: 'outbox',
  async run(deps, opts) {
    const grace = deps.settings.graceSeconds;
    const { rows } = await deps.db.execute(sql`
      SELECT event_id, aggregate_id, event_type, publish_attempts, last_error, extract(epoch FROM now() - created_at)::int AS age
      FROM outbox_event
      WHERE published_at IS NULL AND created_at < now() - make_interval(secs => ${grace})
      ORDER BY created_at LIMIT ${opts.limit}`);
    const found = rows as unknown as Row[];
    const findings: ReconcileFinding[] = found.map((r) => ({
      kind: r.event_type === 'GenerationTaskCreated' ? 'unpublished-outbox' : 'unknown-outbox-event',
      taskId: r.aggregate_id,
      key: r.event_id,
      detail: `${r.event_type} unpublished for ${r.age} s after ${r.publish_attempts} attempt(s)${r.last_error ? `; last error: ${r.last_error}` : ''}`,
    }));
    if (opts.dryRun || found.length === 0) return { examined: found.length, findings, changed: 0 };
    const { published, failed } = await relayOnce(
      { db: deps.db, fence: deps.fence, facade: deps.facade, logger: deps.logger, batchSize: opts.limit, intervalMs: 0 },
      { olderThanSeconds: grace },
    );
    if (failed > 0) findings.push({ kind: 'publish-failed', detail: `${failed} start(s) failed; the rows back off and the next run tries again` });
    return { examined: found.length, findings, changed: published };
  },
};
