// The re-sent create of an unknown outcome, at a provider that keeps our key and refuses a second
// create that carries it (capabilities.resendable: Kling's external_task_id, "unique within a single
// user account"; docs/providers.md "Proof of absence", docs/decisions/0064). A lookup miss there
// proves nothing (no documented not-found answer, no read-after-write for a new task), but the
// provider itself can settle the question: the same attempt sends the very same create again,
// same key, and whichever of the two creates lands second is refused.
//   accepted          → the job is this attempt's (the first create never made one, or made this
//                       one): the poll records it like a lookup hit, and the inbox binds it;
//   refused, key taken → a job with our key exists: recorded as evidence (key_taken_at), and the
//                       lookup by key goes on until the job is readable;
//   anything else      → proves nothing (the provider documents no order of its checks: a refusal
//                       for concurrency may come from the very job we look for); the attempt stays
//                       unknown and its deadline parks it in MANUAL_REVIEW.
// Never another provider, never another attempt or key. Each re-send is counted in Postgres before
// it leaves (at most UNKNOWN_RESEND_LIMIT per attempt, one per poll, no sooner than the poll's
// pace), and none leaves once the task is parked, past its deadline or cancelled, or the mode or
// this process's submit switch forbids new provider work.
import { Context } from '@temporalio/activity';
import { and, eq, isNull, sql } from 'drizzle-orm';
import type { FenceToken } from '../db/fence';
import { taskAttempt, type AttemptRow, type TaskRow } from '../db/schema';
import { storableText } from '../db/storable';
import { inTaskTransaction } from '../db/task-tx';
import { modeForbids } from '../domain/modes';
import type { SystemMode } from '../domain/states';
import { callbackUrl, createCallbackTokens } from '../providers/callback-token';
import type { ProviderAdapter, ProviderJob, SubmitOutcome } from '../providers/types';
import { pastDeadline } from './deadline';
import type { TaskActivityDeps } from './deps';
import { providerInput } from './provider-input';

interface ResendInput {
  readonly token: FenceToken;
  readonly mode: SystemMode;
  readonly task: TaskRow;
  /** The attempt as the poll read it: unknown outcome, no job. */
  readonly attempt: AttemptRow;
  readonly adapter: ProviderAdapter;
  readonly now: Date;
  /** The poll's previous interval (null: none yet): re-sends keep at least that far apart. */
  readonly previousIntervalMs: number | null;
  readonly signal: AbortSignal;
}

type ResendResult =
  /** Nothing sent, and why (the limit, the pace, the mode…). */
  | { readonly kind: 'not-sent'; readonly why: string }
  /** The provider took the create: the job is the attempt's. */
  | { readonly kind: 'accepted'; readonly job: ProviderJob }
  /** The provider refused it because a job with our key exists. */
  | { readonly kind: 'key-taken'; readonly reason: string }
  /** Any other answer, or none: nothing learned. */
  | { readonly kind: 'inconclusive'; readonly reason: string };

/** Why a re-send may not leave now; null when it may (the claim in Postgres decides last). */
function resendRefusal(deps: TaskActivityDeps, r: Omit<ResendInput, 'token' | 'signal'>): string | null {
  const { attempt, task, now } = r;
  if (!r.adapter.capabilities.resendable) return 'the provider does not refuse a duplicate key';
  if (attempt.submit_state !== 'SUBMIT_UNKNOWN' || attempt.provider_job_id) return 'the outcome is no longer unknown';
  // A parked task (MANUAL_REVIEW) is an operator's: it still takes evidence, never a new create.
  if (task.status !== 'SUBMIT_UNKNOWN' || task.active_attempt_id !== attempt.attempt_id) return `the task is ${task.status}`;
  if (attempt.key_taken_at) return 'the provider already refused a re-send as a duplicate: the job exists';
  if (attempt.resends >= deps.settings.unknownResendLimit) return `${attempt.resends} re-sends, the limit`;
  const gapMs = Math.max(deps.settings.pollInitialMs, r.previousIntervalMs ?? 0);
  if (attempt.resent_at && now.getTime() - attempt.resent_at.getTime() < gapMs) return 'the last re-send is too recent';
  if (task.cancel_requested_at) return 'the task is being cancelled';
  if (pastDeadline(task, now, deps.settings.providerCallTimeoutMs)) return "the task's deadline has passed";
  if (modeForbids(r.mode, 'submit')) return `mode ${r.mode} starts no provider work`;
  const closed = deps.submitSwitch?.closedReason();
  if (closed) return `submit switch closed: ${closed}`;
  return null;
}

const unresolved = (attemptId: string) =>
  and(eq(taskAttempt.attempt_id, attemptId), eq(taskAttempt.submit_state, 'SUBMIT_UNKNOWN'), isNull(taskAttempt.provider_job_id));

export function createResend(deps: TaskActivityDeps) {
  const tokens = createCallbackTokens(deps.settings.callbackTokenSecret);

  /** Counts the re-send before it leaves; false when another poll took it, or the attempt moved on. */
  async function claim(r: ResendInput): Promise<boolean> {
    const { value } = await inTaskTransaction(
      deps.db,
      deps.fence,
      r.task.task_id,
      async (tx, lock) => {
        // Under the task's lock: still waiting on this unknown outcome, not cancelled, the mode still allowing new work.
        const { task } = lock;
        if (
          modeForbids(lock.mode, 'submit') ||
          task?.status !== 'SUBMIT_UNKNOWN' ||
          task.active_attempt_id !== r.attempt.attempt_id ||
          task.cancel_requested_at
        ) {
          return false;
        }
        const rows = await tx
          .update(taskAttempt)
          .set({ resends: sql`${taskAttempt.resends} + 1`, resent_at: r.now })
          .where(and(unresolved(r.attempt.attempt_id), eq(taskAttempt.resends, r.attempt.resends), isNull(taskAttempt.key_taken_at)))
          .returning({ id: taskAttempt.attempt_id });
        return rows.length > 0;
      },
      { token: r.token },
    );
    return value;
  }

  /** What the re-send's answer says, on the attempt while it is still unresolved. */
  async function record(r: ResendInput, change: { last_error: string; key_taken_at?: Date }): Promise<void> {
    await inTaskTransaction(
      deps.db,
      deps.fence,
      r.task.task_id,
      (tx) =>
        tx
          .update(taskAttempt)
          .set({ ...change, last_error: storableText(change.last_error.slice(0, 2000)) })
          .where(unresolved(r.attempt.attempt_id)),
      { token: r.token },
    );
  }

  return async function resendUnknown(r: ResendInput): Promise<ResendResult> {
    const refused = resendRefusal(deps, r);
    if (refused) return { kind: 'not-sent', why: refused };
    if (!(await claim(r))) return { kind: 'not-sent', why: 'claimed by another poll, or the attempt moved on' };
    const n = `re-send ${r.attempt.resends + 1}/${deps.settings.unknownResendLimit}`;
    let outcome: SubmitOutcome;
    try {
      // The very request the attempt's submit sent: same key, same input, same callback URL.
      outcome = await r.adapter.submit({
        attemptId: r.attempt.attempt_id,
        model: r.attempt.provider_model,
        input: providerInput(r.task.request),
        webhookUrl: callbackUrl(deps.settings.publicBaseUrl, r.attempt.provider, tokens.tokenFor(r.attempt.attempt_id)),
        deadlineAt: r.task.deadline_at,
        signal: r.signal,
      });
    } catch (err) {
      outcome = { kind: 'unknown', reason: `adapter threw: ${(err as Error).message}` };
    }
    Context.current().log.info('unknown outcome: create re-sent with the same key', {
      taskId: r.task.task_id,
      attemptId: r.attempt.attempt_id,
      resend: n,
      outcome: outcome.kind === 'unknown' && outcome.keyTaken ? 'key-taken' : outcome.kind,
    });
    if (outcome.kind === 'accepted') return { kind: 'accepted', job: { ...outcome.job, correlationToken: r.attempt.attempt_id } };
    if (outcome.kind === 'unknown' && outcome.keyTaken) {
      await record(r, { last_error: `${n}: ${outcome.reason}`, key_taken_at: r.now });
      return { kind: 'key-taken', reason: outcome.reason };
    }
    await record(r, { last_error: `${n} proved nothing (${outcome.kind}): ${outcome.reason}` });
    return { kind: 'inconclusive', reason: outcome.reason };
  };
}
