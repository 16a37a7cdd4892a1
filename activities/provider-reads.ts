// Reads of a known job (status, cancel) that can never succeed, and jobs that stay in flight past
// their provider's maximum run time, end in MANUAL_REVIEW with the evidence instead of being
// retried forever while the task holds its reservation and its provider slot
// (docs/decisions/0012-bounded-provider-reads.md). Failures are counted on the attempt in
// Postgres, so the bound holds across activity retries, workers and workflow resets.
import { storableText } from '../db/storable';
import { and, eq, inArray, isNull, sql } from 'drizzle-orm';
import type { FenceToken } from '../db/fence';
import { holdFenceForFacts } from '../db/modes';
import { callbackInbox, taskAttempt, type AttemptRow } from '../db/schema';
import { FINISHED_PROVIDER_JOB_STATES } from '../domain/states';
import { ProviderHttpError } from '../providers/provider-http';
import type { ProviderAdapter } from '../providers/types';
import type { TaskActivityDeps } from './deps';
import { escalate } from './escalate';

export interface ReadFailure {
  /**
   * gone: the provider no longer knows a job it gave us (404/410); refused: another 4xx, or a
   * non-transient refusal without an HTTP status (a Kling business code), which a retry will not
   * fix; transient: network, 5xx, 429, 408 (bounded by the maximum run time only,
   * so a provider outage does not park every task).
   */
  readonly kind: 'gone' | 'refused' | 'transient';
  readonly status: number | null;
  readonly message: string;
}

export function classifyReadFailure(err: unknown): ReadFailure {
  const message = err instanceof Error ? err.message : String(err);
  if (!(err instanceof ProviderHttpError) || err.transient) return { kind: 'transient', status: err instanceof ProviderHttpError ? err.status : null, message };
  // No HTTP status, but the provider said no in its own terms (Kling: HTTP 200 with a business
  // code that is not a server error): a retry will not fix it.
  if (err.status === null) return { kind: 'refused', status: null, message };
  if (err.status === 404 || err.status === 410) return { kind: 'gone', status: err.status, message };
  return { kind: err.status >= 400 && err.status < 500 ? 'refused' : 'transient', status: err.status, message };
}

/** The provider's maximum run time: the setting (PROVIDER_MAX_RUN_MS) over the adapter's capability. */
export const maxRunMsFor = (deps: TaskActivityDeps, adapter: ProviderAdapter): number | null =>
  deps.settings.maxRunMs[adapter.capabilities.name] ?? adapter.capabilities.maxRunMs ?? null;

/** The evidence that the attempt's job ran past its provider's maximum run time, or null. */
export function pastMaxRun(deps: TaskActivityDeps, adapter: ProviderAdapter, attempt: AttemptRow, now: Date): Record<string, unknown> | null {
  const limit = maxRunMsFor(deps, adapter);
  const since = attempt.submit_started_at ?? attempt.created_at;
  if (!attempt.provider_job_id || limit === null || now.getTime() - since.getTime() <= limit) return null;
  return {
    reason: `the provider still reports job ${attempt.provider_job_id} in flight (or cannot be read) past its maximum run time`,
    provider_job_id: attempt.provider_job_id,
    provider_status: attempt.provider_status,
    submitted_at: since.toISOString(),
    max_run_ms: limit,
    last_error: attempt.last_error,
  };
}

/** Task states in which a known job is still awaited from the provider: the only ones a bounded read parks. */
const AWAITING_PROVIDER: readonly string[] = ['SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED', 'SUBMIT_UNKNOWN'];

/**
 * Parks the attempt's task in MANUAL_REVIEW with `detail` as the transition's evidence; true if it
 * moved. Only while the task still waits on the provider for this attempt, and not while the
 * provider's final word for it waits in the inbox (a success already reported is applied, not parked).
 */
export async function escalateAttempt(
  deps: TaskActivityDeps,
  token: FenceToken,
  taskId: string,
  attemptId: string,
  detail: Record<string, unknown>,
): Promise<boolean> {
  return escalate(deps, token, taskId, {
    sourceEvent: 'workflow.escalate',
    attemptId,
    detail,
    when: async (tx, task) => {
      if (task.active_attempt_id !== attemptId || !AWAITING_PROVIDER.includes(task.status)) return false;
      const waiting = await tx
        .select({ id: callbackInbox.inbox_id })
        .from(callbackInbox)
        .where(
          and(
            eq(callbackInbox.task_id, taskId),
            eq(callbackInbox.attempt_id, attemptId),
            isNull(callbackInbox.processed_at),
            inArray(callbackInbox.event_type, [...FINISHED_PROVIDER_JOB_STATES]),
          ),
        )
        .limit(1);
      return waiting.length === 0;
    },
  });
}

/**
 * Counts one gone or refused read of the attempt's job; at the limit it parks the task (true). A
 * transient failure is recorded as the last error but not counted (the maximum run time bounds it).
 */
export async function recordReadFailure(deps: TaskActivityDeps, token: FenceToken, taskId: string, attempt: AttemptRow, err: unknown): Promise<boolean> {
  const failure = classifyReadFailure(err);
  // Only gone and refused reads count toward the limit: a transient one is bounded by the maximum
  // run time, so an outage followed by one 404 does not park a healthy job.
  const counted = failure.kind !== 'transient';
  const count = await deps.db.transaction(async (tx) => {
    await holdFenceForFacts(tx, token);
    const [row] = await tx
      .update(taskAttempt)
      .set({ ...(counted ? { read_failures: sql`${taskAttempt.read_failures} + 1` } : {}), last_error: storableText(failure.message.slice(0, 2000)) })
      .where(and(eq(taskAttempt.attempt_id, attempt.attempt_id), eq(taskAttempt.provider_job_id, attempt.provider_job_id ?? '')))
      .returning({ n: taskAttempt.read_failures });
    return row?.n ?? 0;
  });
  if (!counted || count < deps.settings.readFailureLimit) return false;
  return escalateAttempt(deps, token, taskId, attempt.attempt_id, {
    reason: failure.kind === 'gone' ? `the provider no longer knows job ${attempt.provider_job_id}` : `reads of job ${attempt.provider_job_id} are refused`,
    provider_job_id: attempt.provider_job_id,
    failure: failure.kind,
    http_status: failure.status,
    consecutive_read_failures: count,
    last_error: storableText(failure.message.slice(0, 500)),
  });
}

/** A good read: the failure count starts again. */
export async function clearReadFailures(deps: TaskActivityDeps, token: FenceToken, attempt: AttemptRow): Promise<void> {
  if (attempt.read_failures === 0) return;
  await deps.db.transaction(async (tx) => {
    await holdFenceForFacts(tx, token);
    await tx.update(taskAttempt).set({ read_failures: 0 }).where(eq(taskAttempt.attempt_id, attempt.attempt_id));
  });
}
