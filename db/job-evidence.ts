// Evidence that a provider job exists for an attempt (docs/design.md §5 "Unknown outcome"): a bound
// provider_job_id, or any inbox row its correlation token reached (a callback, a poll, a lookup
// hit recorded by reconciliation), processed or not, or the candidates of an ambiguous lookup.
// Whatever decides "this attempt never created a job" (an operator's "not-submitted", a proof of
// absence) and whatever is about to spend on a task's next attempt asks here first, and is refused
// while anything is found: a second paid job must never follow a job we have heard of.
//
// The read is serialised with the callback ingest by the attempt rows' locks, not by timing: the
// ingest stores a callback while holding its attempt FOR SHARE (db/inbox.ts), and these reads lock
// the attempts FOR UPDATE in a statement of their own before looking, so a callback is either
// committed before the look (and found) or stored after the caller's transaction commits (and
// then met by the next step's look, or escalated by the inbox step: activities/earlier-job.ts).
import { sql, type SQL } from 'drizzle-orm';
import type { DbOrTx } from './client';

/** The transition that parks a task whose lookup found several candidate jobs (its detail names them). */
export const AMBIGUOUS_LOOKUP_EVENT = 'reconcile.ambiguous';

export interface JobEvidence {
  /** The attempt the evidence is about. */
  readonly attemptId: string;
  /** A job id the evidence names, when it names exactly one (a bound job or an inbox row's). */
  readonly providerJobId: string | null;
  /** What was found, for the refusal's message (no secrets: ids and sources only). */
  readonly description: string;
}

interface EvidenceRow {
  attempt_id: string;
  bound: string | null;
  inbox_job: string | null;
  inbox_source: string | null;
  candidates: string[] | null;
  key_taken: string | null;
  sending: boolean;
  send_by: string | null;
}

/** The evidence of each attempt `which` selects (of task_attempt `a`), read after their rows are locked (see the header). */
async function evidenceOf(db: DbOrTx, which: SQL): Promise<EvidenceRow[]> {
  const { rows: locked } = await db.execute(sql`SELECT 1 FROM task_attempt a WHERE ${which} ORDER BY a.attempt_no FOR UPDATE`);
  if (locked.length === 0) return [];
  const { rows } = await db.execute(sql`
    SELECT a.attempt_id::text, a.provider_job_id AS bound, i.provider_job_id AS inbox_job, i.source AS inbox_source,
      t.detail->'candidate_job_ids' AS candidates, a.key_taken_at::text AS key_taken, coalesce(a.send_by > now(), false) AS sending, a.send_by::text AS send_by
    FROM task_attempt a
    LEFT JOIN LATERAL (
      SELECT provider_job_id, source FROM callback_inbox WHERE attempt_id = a.attempt_id
      ORDER BY received_at LIMIT 1
    ) i ON true
    LEFT JOIN LATERAL (
      SELECT detail FROM task_transition WHERE task_id = a.task_id AND attempt_id = a.attempt_id AND source_event = ${AMBIGUOUS_LOOKUP_EVENT}
      ORDER BY created_at LIMIT 1
    ) t ON true
    WHERE ${which}
    ORDER BY a.attempt_no`);
  return rows as unknown as EvidenceRow[];
}

function describe(row: EvidenceRow): JobEvidence | null {
  const attemptId = row.attempt_id;
  if (row.bound) return { attemptId, providerJobId: row.bound, description: `attempt ${attemptId} has provider job ${row.bound}` };
  if (row.inbox_job) {
    return {
      attemptId,
      providerJobId: row.inbox_job,
      description: `the inbox holds a ${row.inbox_source} for job ${row.inbox_job} carrying attempt ${attemptId}'s token`,
    };
  }
  if (row.candidates) {
    return { attemptId, providerJobId: null, description: `an ambiguous lookup found job(s) ${row.candidates.join(', ')} that may be attempt ${attemptId}'s` };
  }
  // The provider refused a re-sent create of the attempt because a job with its key exists (activities/resend-unknown.ts).
  if (row.key_taken) {
    return {
      attemptId,
      providerJobId: null,
      description: `the provider refused attempt ${attemptId}'s re-sent create at ${row.key_taken}: a job with its key exists`,
    };
  }
  return null;
}

/**
 * The evidence of a job for `attemptId`, or null when there is none. A claim's send-by moment
 * not yet past counts too: until then the claimed create may still leave (docs/decisions/0063).
 */
export async function jobEvidence(db: DbOrTx, attemptId: string): Promise<JobEvidence | null> {
  const [row] = await evidenceOf(db, sql`a.attempt_id = ${attemptId}`);
  if (!row) return null;
  const found = describe(row);
  if (found) return found;
  if (row.sending) return { attemptId, providerJobId: null, description: `the claimed create may still leave until ${row.send_by}` };
  return null;
}

/**
 * The first earlier attempt of the task (attempt_no below `before`) with evidence of a job, or
 * null. Called under the task's row lock before a new attempt is prepared or claimed.
 */
export async function earlierJobEvidence(db: DbOrTx, taskId: string, before: number): Promise<JobEvidence | null> {
  if (before <= 1) return null;
  for (const row of await evidenceOf(db, sql`a.task_id = ${taskId} AND a.attempt_no < ${before}`)) {
    const found = describe(row);
    if (found) return found;
  }
  return null;
}
