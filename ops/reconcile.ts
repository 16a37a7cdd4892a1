// `ops reconcile`: the recovery sets of docs/runbooks/failover.md — unpublished outbox, unprocessed
// inbox, SUBMIT_UNKNOWN attempts, long RUNNING provider jobs, outputs about to expire, credits
// reserved but not settled — counted (dry run) or acted on (apply). Applying only re-collects
// evidence through the workflows (docs/design.md §8): it starts a task's workflow when none runs
// and wakes it so it re-reads its facts (reconcilers/converge.ts, shared with the scheduled
// reconcilers). It never writes a task state or a ledger entry itself.
import { sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { markOutboxPublished } from '../db/outbox';
import { convergeTask } from '../reconcilers/converge';
import type { GenerationFacade } from '../temporal/facade';
import { recordAudit } from '../db/audit';

export interface ReconcileOptions {
  /** SUBMITTED/RUNNING with no change for this long counts as long running. */
  readonly longRunningSeconds: number;
  /** A non-terminal task with no change for this long has its workflow checked (apply). */
  readonly staleSeconds: number;
  /** Outputs whose provider URL expires within this long count as at risk. */
  readonly outputRiskSeconds: number;
  /** Task ids listed per set. */
  readonly sample: number;
}

export const DEFAULT_RECONCILE: ReconcileOptions = { longRunningSeconds: 30 * 60, staleSeconds: 10 * 60, outputRiskSeconds: 15 * 60, sample: 20 };

export interface RecoverySet {
  readonly count: number;
  readonly oldestAgeSeconds: number | null;
  /** Up to `sample` task ids, oldest first. */
  readonly taskIds: string[];
}

export interface ReconcileReport {
  readonly generatedAt: string;
  readonly unpublishedOutbox: RecoverySet;
  readonly unprocessedInbox: RecoverySet & { readonly unmatched: number };
  readonly submitUnknown: RecoverySet;
  readonly longRunning: RecoverySet & { readonly thresholdSeconds: number };
  readonly outputsAtRisk: RecoverySet;
  readonly staleOpen: RecoverySet & { readonly thresholdSeconds: number };
  readonly openReservations: { readonly count: number; readonly amount: string; readonly oldestAgeSeconds: number | null };
  readonly manualReview: RecoverySet;
  /** Invariant breaks; apply never "fixes" these, a person must look (docs/runbooks/failover.md). */
  readonly billingAnomalies: { readonly terminalUnsettled: number; readonly taskIds: string[]; readonly accountReservedDrift: string };
}

interface SetRow {
  n: number;
  oldest: number | null;
  ids: string[] | null;
}

async function recoverySet(db: Db, query: ReturnType<typeof sql>, sample: number): Promise<RecoverySet> {
  const { rows } = await db.execute(sql`
    SELECT count(*)::int AS n,
           max(age)::float AS oldest,
           (array_agg(task_id::text ORDER BY age DESC) FILTER (WHERE task_id IS NOT NULL))[1:${sample}] AS ids
    FROM (${query}) s`);
  const r = rows[0] as unknown as SetRow;
  return { count: r.n, oldestAgeSeconds: r.oldest === null ? null : Math.round(r.oldest), taskIds: r.ids ?? [] };
}

const ageOf = (column: ReturnType<typeof sql>) => sql`extract(epoch FROM now() - ${column})`;

export async function reconcileReport(db: Db, opts: ReconcileOptions = DEFAULT_RECONCILE): Promise<ReconcileReport> {
  const { sample } = opts;
  const unpublishedOutbox = await recoverySet(
    db,
    sql`SELECT aggregate_id AS task_id, ${ageOf(sql`created_at`)} AS age FROM outbox_event WHERE published_at IS NULL`,
    sample,
  );
  const inbox = await recoverySet(db, sql`SELECT task_id, ${ageOf(sql`received_at`)} AS age FROM callback_inbox WHERE processed_at IS NULL`, sample);
  const { rows: unmatchedRows } = await db.execute(sql`SELECT count(*)::int AS n FROM callback_inbox WHERE processed_at IS NULL AND task_id IS NULL`);
  const submitUnknown = await recoverySet(
    db,
    sql`SELECT t.task_id, ${ageOf(sql`coalesce(a.unknown_since, a.submit_started_at, a.created_at)`)} AS age
        FROM generation_task t JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
        WHERE a.submit_state = 'SUBMIT_UNKNOWN' AND t.terminal_at IS NULL`,
    sample,
  );
  const longRunning = await recoverySet(
    db,
    sql`SELECT task_id, ${ageOf(sql`updated_at`)} AS age FROM generation_task
        WHERE status IN ('SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED') AND terminal_at IS NULL
          AND updated_at < now() - make_interval(secs => ${opts.longRunningSeconds})`,
    sample,
  );
  const outputsAtRisk = await recoverySet(
    db,
    sql`SELECT t.task_id, ${ageOf(sql`a.output_deadline_at`)} AS age
        FROM generation_task t JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
        WHERE t.status IN ('PROVIDER_SUCCEEDED', 'FETCHING_OUTPUT', 'OUTPUT_AT_RISK')
          AND a.output_deadline_at < now() + make_interval(secs => ${opts.outputRiskSeconds})`,
    sample,
  );
  const staleOpen = await recoverySet(
    db,
    sql`SELECT task_id, ${ageOf(sql`updated_at`)} AS age FROM generation_task
        WHERE terminal_at IS NULL AND status <> 'MANUAL_REVIEW'
          AND updated_at < now() - make_interval(secs => ${opts.staleSeconds})`,
    sample,
  );
  const manualReview = await recoverySet(db, sql`SELECT task_id, ${ageOf(sql`updated_at`)} AS age FROM generation_task WHERE status = 'MANUAL_REVIEW'`, sample);
  const { rows: openRows } = await db.execute(sql`
    SELECT count(*)::int AS n, coalesce(sum(reserved_amount), 0)::text AS amount,
           max(extract(epoch FROM now() - created_at))::float AS oldest
    FROM generation_task WHERE terminal_at IS NULL`);
  const open = openRows[0] as { n: number; amount: string; oldest: number | null };
  const { rows: anomalyRows } = await db.execute(sql`
    SELECT t.task_id::text AS task_id FROM generation_task t
    WHERE t.terminal_at IS NOT NULL
      AND (SELECT coalesce(sum(amount) FILTER (WHERE entry_type = 'RESERVE'), 0)
             - coalesce(sum(amount) FILTER (WHERE entry_type IN ('SETTLE', 'RELEASE')), 0)
           FROM credit_ledger l WHERE l.task_id = t.task_id) <> 0
    LIMIT 1000`);
  const { rows: driftRows } = await db.execute(sql`
    SELECT ((SELECT coalesce(sum(reserved), 0) FROM credit_account)
          - (SELECT coalesce(sum(reserved_amount), 0) FROM generation_task WHERE terminal_at IS NULL))::text AS drift`);
  const anomalies = (anomalyRows as { task_id: string }[]).map((r) => r.task_id);
  return {
    generatedAt: new Date().toISOString(),
    unpublishedOutbox,
    unprocessedInbox: { ...inbox, unmatched: (unmatchedRows[0] as { n: number }).n },
    submitUnknown,
    longRunning: { ...longRunning, thresholdSeconds: opts.longRunningSeconds },
    outputsAtRisk,
    staleOpen: { ...staleOpen, thresholdSeconds: opts.staleSeconds },
    openReservations: { count: open.n, amount: open.amount, oldestAgeSeconds: open.oldest === null ? null : Math.round(open.oldest) },
    manualReview,
    billingAnomalies: {
      terminalUnsettled: anomalies.length,
      taskIds: anomalies.slice(0, opts.sample),
      accountReservedDrift: (driftRows[0] as { drift: string }).drift,
    },
  };
}

/** True when the report has nothing for anyone to act on. */
export function reportIsClean(r: ReconcileReport): boolean {
  return (
    r.unpublishedOutbox.count === 0 &&
    r.unprocessedInbox.count === 0 &&
    r.submitUnknown.count === 0 &&
    r.longRunning.count === 0 &&
    r.outputsAtRisk.count === 0 &&
    r.staleOpen.count === 0 &&
    r.billingAnomalies.terminalUnsettled === 0 &&
    Number(r.billingAnomalies.accountReservedDrift) === 0
  );
}

export interface ApplyResult {
  readonly outboxPublished: number;
  readonly workflowsStarted: number;
  readonly workflowsWoken: number;
  /** Non-terminal tasks whose workflow is closed: reset them from the Temporal UI. */
  readonly closedWorkflows: string[];
  readonly errors: { taskId: string; error: string }[];
}

/**
 * Acts on the recovery sets through the facade: publishes the unpublished outbox (starts the
 * workflows), and for every task in the other sets makes sure its workflow runs and wakes it.
 * Tasks in MANUAL_REVIEW are woken too: a woken review applies what reached the inbox (a late
 * callback) and may move on; it never resolves itself.
 */
export async function reconcileApply(
  db: Db,
  facade: GenerationFacade,
  args: { actor: string; reason: string; options?: ReconcileOptions; limit?: number },
): Promise<{ before: ReconcileReport; applied: ApplyResult }> {
  const options = args.options ?? DEFAULT_RECONCILE;
  const limit = args.limit ?? 10_000;
  const before = await reconcileReport(db, options);
  const errors: ApplyResult['errors'] = [];
  let outboxPublished = 0;
  let workflowsStarted = 0;
  let workflowsWoken = 0;
  const closedWorkflows: string[] = [];

  const { rows: outbox } = await db.execute(sql`
    SELECT e.event_id, t.task_id, t.tenant_id, t.provider FROM outbox_event e JOIN generation_task t ON t.task_id = e.aggregate_id
    WHERE e.published_at IS NULL AND e.event_type = 'GenerationTaskCreated' ORDER BY e.created_at LIMIT ${limit}`);
  for (const r of outbox as { event_id: string; task_id: string; tenant_id: string; provider: string }[]) {
    try {
      await facade.startGeneration({ taskId: r.task_id, tenantId: r.tenant_id, provider: r.provider });
      await markOutboxPublished(db, r.event_id);
      outboxPublished += 1;
    } catch (err) {
      errors.push({ taskId: r.task_id, error: (err as Error).message });
    }
  }

  const { rows: tasks } = await db.execute(sql`
    SELECT DISTINCT t.task_id, t.tenant_id, t.provider FROM generation_task t
    LEFT JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
    WHERE t.terminal_at IS NULL AND (
         t.status = 'MANUAL_REVIEW'
      OR EXISTS (SELECT 1 FROM callback_inbox i WHERE i.task_id = t.task_id AND i.processed_at IS NULL)
      OR a.submit_state = 'SUBMIT_UNKNOWN'
      OR (t.status IN ('SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED') AND t.updated_at < now() - make_interval(secs => ${options.longRunningSeconds}))
      OR (t.status IN ('PROVIDER_SUCCEEDED', 'FETCHING_OUTPUT', 'OUTPUT_AT_RISK') AND a.output_deadline_at < now() + make_interval(secs => ${options.outputRiskSeconds}))
      OR t.updated_at < now() - make_interval(secs => ${options.staleSeconds}))
    LIMIT ${limit}`);
  for (const t of tasks as { task_id: string; tenant_id: string; provider: string }[]) {
    try {
      const c = await convergeTask(facade, { taskId: t.task_id, tenantId: t.tenant_id, provider: t.provider });
      if (c === 'started') workflowsStarted += 1;
      else if (c === 'woken') workflowsWoken += 1;
      else if (c === 'closed') closedWorkflows.push(t.task_id);
    } catch (err) {
      errors.push({ taskId: t.task_id, error: (err as Error).message });
    }
  }

  const applied: ApplyResult = { outboxPublished, workflowsStarted, workflowsWoken, closedWorkflows, errors };
  await recordAudit(db, {
    actor: args.actor,
    action: 'reconcile.apply',
    targetType: 'system',
    targetId: 'reconcile',
    reason: args.reason,
    detail: { ...applied, closedWorkflows: closedWorkflows.length, errors: errors.length },
  });
  return { before, applied };
}
