// `ops review list|resolve`: the MANUAL_REVIEW queue. Resolving goes through the workflow's
// `resolveReview` Update (temporal/facade.ts), which validates the resolution against the facts,
// applies it with a CAS and audits it in the same transaction (activities/review.ts).
import { sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import type { TaskFacts } from '../domain/facts';
import { reviewProblem, type ReviewResolution } from '../domain/review';
import type { GenerationFacade } from '../temporal/facade';

export interface ReviewItem {
  readonly task_id: string;
  readonly tenant_id: string;
  readonly provider: string;
  readonly attempt_state: string | null;
  readonly provider_job_id: string | null;
  readonly since: Date;
  readonly waiting_seconds: number;
  /** Why it was escalated (the escalating transition's detail). */
  readonly reason: string | null;
}

export async function listReviews(db: Db, limit = 100): Promise<ReviewItem[]> {
  const { rows } = await db.execute(sql`
    SELECT t.task_id::text, t.tenant_id::text, t.provider, a.submit_state AS attempt_state, a.provider_job_id,
           tr.created_at AS since, extract(epoch FROM now() - tr.created_at)::int AS waiting_seconds,
           tr.detail->>'reason' AS reason
    FROM generation_task t
    LEFT JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
    LEFT JOIN LATERAL (
      SELECT created_at, detail FROM task_transition
      WHERE task_id = t.task_id AND to_status = 'MANUAL_REVIEW' ORDER BY to_version DESC LIMIT 1
    ) tr ON true
    WHERE t.status = 'MANUAL_REVIEW'
    ORDER BY tr.created_at ASC NULLS FIRST
    LIMIT ${limit}`);
  return (rows as unknown as ReviewItem[]).map((r) => ({ ...r, since: new Date(r.since) }));
}

export type ResolveArgs =
  | { kind: 'bind-job'; providerJobId: string; operator: string; reason: string }
  | { kind: 'not-submitted'; operator: string; reason: string }
  | { kind: 'fail'; operator: string; reason: string };

/** What the task was charged (its settled_amount), or null while it is not settled. */
export async function settledAmountOf(db: Db, taskId: string): Promise<string | null> {
  const { rows } = await db.execute(sql`SELECT settled_amount::text FROM generation_task WHERE task_id = ${taskId}::uuid`);
  return (rows[0] as { settled_amount: string | null } | undefined)?.settled_amount ?? null;
}

/** Resolves one MANUAL_REVIEW task; throws with the validator's message when the facts do not allow it. */
export async function resolveReview(facade: GenerationFacade, taskId: string, args: ResolveArgs): Promise<TaskFacts> {
  const resolution: ReviewResolution = args;
  const problem = reviewProblem(resolution);
  if (problem) throw new Error(problem);
  return facade.resolveReview(taskId, resolution);
}
