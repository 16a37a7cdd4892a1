// Evidence that a provider job exists for an attempt (docs/design.md §5 "Unknown outcome"): a bound
// provider_job_id, or any inbox row its correlation token reached (a callback, a poll, a lookup
// hit recorded by reconciliation), processed or not, or the candidates of an ambiguous lookup. Whatever decides "this attempt never
// created a job" — an operator's "not-submitted", a proof of absence — asks here first and is
// refused while anything is found: a second paid job must never follow a job we have heard of.
import { sql } from 'drizzle-orm';
import type { DbOrTx } from './client';

/** The transition that parks a task whose lookup found several candidate jobs (its detail names them). */
export const AMBIGUOUS_LOOKUP_EVENT = 'reconcile.ambiguous';

export interface JobEvidence {
  /** What was found, for the refusal's message (no secrets: ids and sources only). */
  readonly description: string;
}

/** The evidence of a job for `attemptId`, or null when there is none. */
export async function jobEvidence(db: DbOrTx, attemptId: string): Promise<JobEvidence | null> {
  const { rows } = await db.execute(sql`
    SELECT a.provider_job_id AS bound, i.provider_job_id AS inbox_job, i.source AS inbox_source, t.detail->'candidate_job_ids' AS candidates
    FROM task_attempt a
    LEFT JOIN LATERAL (
      SELECT provider_job_id, source FROM callback_inbox WHERE attempt_id = a.attempt_id
      ORDER BY received_at LIMIT 1
    ) i ON true
    LEFT JOIN LATERAL (
      SELECT detail FROM task_transition WHERE task_id = a.task_id AND attempt_id = a.attempt_id AND source_event = ${AMBIGUOUS_LOOKUP_EVENT}
      ORDER BY created_at LIMIT 1
    ) t ON true
    WHERE a.attempt_id = ${attemptId}`);
  const row = rows[0] as { bound: string | null; inbox_job: string | null; inbox_source: string | null; candidates: string[] | null } | undefined;
  if (row?.bound) return { description: `attempt has provider job ${row.bound}` };
  if (row?.inbox_job) return { description: `the inbox holds a ${row.inbox_source} for job ${row.inbox_job} carrying this attempt's token` };
  if (row?.candidates) return { description: `an ambiguous lookup found job(s) ${row.candidates.join(', ')} that may be this attempt's` };
  return null;
}
