// `ops review classify|resolve --class`: the MANUAL_REVIEW queue by cause (domain/review-class.ts)
// and one action applied to one class as an audited batch (ops/batch.ts), each task resolved
// through its workflow's resolveReview Update like a single `ops review resolve`.
import { sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { ACTIONS_FOR, classifyReview, type ReviewAction, type ReviewClass } from '../domain/review-class';
import type { ReviewResolution } from '../domain/review';
import { FINISHED_PROVIDER_JOB_STATES } from '../domain/states';
import type { GenerationFacade } from '../temporal/facade';
import { applyPlan, checkPlan, fingerprintOf, makePlan, type BatchItem, type BatchPlan, type BatchResult } from './batch';

export interface ClassifiedReview extends BatchItem {
  readonly class: ReviewClass;
  readonly reason: string | null;
  readonly attemptState: string | null;
  readonly providerJobId: string | null;
  /** The attempt was ever claimed for its create (SUBMITTING): its outcome can only be proved, never assumed. */
  readonly everClaimed: boolean;
  readonly since: Date;
}

interface Row {
  task_id: string;
  tenant_id: string;
  provider: string;
  status: string;
  status_version: number;
  attempt_id: string | null;
  submit_state: string | null;
  provider_job_id: string | null;
  ever_claimed: boolean;
  source_event: string | null;
  detail: Record<string, unknown> | null;
  since: Date;
  inbox_rows: number;
  inbox_last: string | null;
  final_state: string | null;
}

/** Tasks in MANUAL_REVIEW (or just the one given), each with its class and evidence fingerprint. */
export async function classifyReviews(db: Db, opts: { limit?: number; taskId?: string } = {}): Promise<ClassifiedReview[]> {
  const { rows } = await db.execute(sql`
    SELECT t.task_id::text, t.tenant_id::text, t.provider, t.status, t.status_version::int AS status_version,
           a.attempt_id::text, a.submit_state, a.provider_job_id, (a.submit_started_at IS NOT NULL) AS ever_claimed, tr.source_event, tr.detail, tr.created_at AS since,
           ev.n AS inbox_rows, ev.last AS inbox_last, fin.event_type AS final_state
    FROM generation_task t
    LEFT JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
    LEFT JOIN LATERAL (
      SELECT created_at, detail, source_event FROM task_transition
      WHERE task_id = t.task_id AND to_status = 'MANUAL_REVIEW' ORDER BY to_version DESC LIMIT 1
    ) tr ON true
    LEFT JOIN LATERAL (
      SELECT count(*)::int AS n, max(received_at)::text AS last FROM callback_inbox WHERE task_id = t.task_id
    ) ev ON true
    LEFT JOIN LATERAL (
      SELECT event_type FROM callback_inbox
      WHERE attempt_id = a.attempt_id AND event_type IN (${sql.join(
        FINISHED_PROVIDER_JOB_STATES.map((s) => sql`${s}`),
        sql`, `,
      )})
      ORDER BY provider_updated_at DESC NULLS LAST, received_at DESC LIMIT 1
    ) fin ON true
    WHERE t.status = 'MANUAL_REVIEW' ${opts.taskId ? sql`AND t.task_id = ${opts.taskId}` : sql``}
    ORDER BY tr.created_at ASC NULLS FIRST
    LIMIT ${opts.limit ?? 1000}`);
  return (rows as unknown as Row[]).map((r) => {
    const cls = classifyReview({
      detail: r.detail,
      sourceEvent: r.source_event,
      attemptState: r.submit_state,
      providerJobId: r.provider_job_id,
      providerFinalState: r.final_state,
    });
    const reason = typeof r.detail?.['reason'] === 'string' ? r.detail['reason'] : null;
    return {
      taskId: r.task_id,
      tenantId: r.tenant_id,
      provider: r.provider,
      class: cls,
      reason,
      attemptState: r.submit_state,
      providerJobId: r.provider_job_id,
      everClaimed: r.ever_claimed,
      since: new Date(r.since),
      // What the decision rests on: the task's version, its attempt and job, and every inbox row it has.
      fingerprint: fingerprintOf({ v: r.status_version, a: r.attempt_id, s: r.submit_state, j: r.provider_job_id, n: r.inbox_rows, l: r.inbox_last, c: cls }),
      summary:
        `${cls}: ${r.submit_state ?? 'no attempt'}${r.provider_job_id ? ` job ${r.provider_job_id}` : ''}, ${r.inbox_rows} inbox row(s); ${reason ?? r.source_event ?? ''}`.slice(
          0,
          300,
        ),
    };
  });
}

/** The dry run: the plan for one action on one class (refused when the action does not suit the class). */
export async function planReviewBatch(db: Db, args: { cls: ReviewClass; action: ReviewAction; limit: number }): Promise<BatchPlan> {
  if (!ACTIONS_FOR[args.cls].includes(args.action)) throw new Error(`${args.action} does not suit ${args.cls}; one of ${ACTIONS_FOR[args.cls].join(', ')}`);
  const items = (await classifyReviews(db, { limit: 100_000 })).filter((r) => r.class === args.cls).slice(0, args.limit);
  return makePlan(
    'review.resolve',
    { class: args.cls, action: args.action },
    items.map(({ taskId, tenantId, provider, fingerprint, summary }) => ({ taskId, tenantId, provider, fingerprint, summary })),
  );
}

/**
 * The resolution an action stands for on one task. A replay re-binds the attempt's job, or, with
 * none, runs the task again as not-submitted only when its attempt was never claimed for a create:
 * one that was may have bought a job, and a replay must never confirm otherwise (an operator
 * who knows does so task by task with `ops review resolve --not-submitted`).
 */
function resolutionFor(action: ReviewAction, item: ClassifiedReview, operator: string, reason: string): ReviewResolution {
  if (action === 'fail') return { kind: 'fail', operator, reason };
  if (action === 'replay' && item.providerJobId) return { kind: 'bind-job', providerJobId: item.providerJobId, operator, reason };
  if (action === 'replay' && item.everClaimed) {
    throw new Error('replay refused: the attempt was claimed for a create and no job is bound, so it may have one; bind the job or fail the task');
  }
  return { kind: 'not-submitted', operator, reason };
}

/** Applies a dry run's plan: each task re-read and refused if its evidence changed, paced, one audited batch. */
export async function applyReviewBatch(
  db: Db,
  facade: GenerationFacade,
  plan: BatchPlan,
  args: { operator: string; reason: string; ratePerSecond: number },
): Promise<{ batchId: string; auditId: string; results: BatchResult[] }> {
  checkPlan(plan, 'review.resolve');
  const cls = plan.selector['class'] as ReviewClass;
  const action = plan.selector['action'] as ReviewAction;
  if (!ACTIONS_FOR[cls]?.includes(action)) throw new Error(`${action} does not suit ${cls}`);
  const current = new Map<string, ClassifiedReview>();
  return applyPlan(db, plan, {
    actor: `operator:${args.operator}`,
    reason: args.reason,
    ratePerSecond: args.ratePerSecond,
    async reread(taskId) {
      const [r] = await classifyReviews(db, { taskId });
      if (!r || r.class !== cls) return null;
      current.set(taskId, r);
      return r;
    },
    async act(item) {
      const facts = await facade.resolveReview(item.taskId, resolutionFor(action, current.get(item.taskId)!, args.operator, args.reason));
      return `${action}: now ${facts.status}`;
    },
  });
}
