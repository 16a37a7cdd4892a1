// Compare-and-set on an attempt (docs/design.md §4): every change of an attempt's state, or of the
// job bound to it, bumps its status_version here, under a condition on the state it moves from.
import { and, eq, inArray, notInArray, sql, type SQL } from 'drizzle-orm';
import type { PgUpdateSetSource } from 'drizzle-orm/pg-core';
import type { AttemptState } from '../domain/states';
import type { DbOrTx } from './client';
import { taskAttempt } from './schema';
import { moveCreatePace } from './provider-control';

/** The columns an attempt CAS may set (its identity and version are not among them). */
export type AttemptChange = Omit<PgUpdateSetSource<typeof taskAttempt>, 'attempt_id' | 'task_id' | 'attempt_no' | 'status_version'>;

/** What must hold for the change to apply. Empty: the attempt changes whatever its state. */
export interface AttemptExpectation {
  /** The attempt is in this state (or one of these). */
  readonly from?: AttemptState | readonly AttemptState[];
  /** The attempt is in none of these states. */
  readonly notFrom?: readonly AttemptState[];
  /** A further condition on the row (e.g. no provider job bound yet). */
  readonly where?: SQL;
}

/**
 * Applies `change` to the attempt and bumps its status_version, if `expect` holds. Returns
 * whether it did (false: the attempt moved on, or is not there).
 */
export async function casAttempt(tx: DbOrTx, attemptId: string, expect: AttemptExpectation, change: AttemptChange): Promise<boolean> {
  const from = expect.from === undefined ? undefined : typeof expect.from === 'string' ? [expect.from] : expect.from;
  const moved = await tx
    .update(taskAttempt)
    .set({ ...change, status_version: sql`${taskAttempt.status_version} + 1` })
    .where(
      and(
        eq(taskAttempt.attempt_id, attemptId),
        from ? (from.length === 1 ? eq(taskAttempt.submit_state, from[0]!) : inArray(taskAttempt.submit_state, [...from])) : undefined,
        expect.notFrom ? notInArray(taskAttempt.submit_state, [...expect.notFrom]) : undefined,
        expect.where,
      ),
    )
    .returning({ id: taskAttempt.attempt_id });
  return moved.length > 0;
}

/** A task's attempts so far, split by what bounds them: throttled creates and every other attempt. */
export interface AttemptCounts {
  /** Attempts that count against MAX_SUBMIT_ATTEMPTS (all but the throttled). */
  readonly counted: number;
  /** Attempts the provider throttled (HTTP 429): MAX_THROTTLED_SUBMITS bounds them. */
  readonly throttled: number;
}

/** The task's attempt counts, read in the caller's transaction (its writes included). */
export async function attemptCounts(tx: DbOrTx, taskId: string): Promise<AttemptCounts> {
  const [row] = await tx
    .select({
      counted: sql<number>`count(*) FILTER (WHERE NOT ${taskAttempt.throttled})::int`,
      throttled: sql<number>`count(*) FILTER (WHERE ${taskAttempt.throttled})::int`,
    })
    .from(taskAttempt)
    .where(eq(taskAttempt.task_id, taskId));
  return row ?? { counted: 0, throttled: 0 };
}

/**
 * The submit claim's last write: PREPARED → SUBMITTING and, with `pace`, the provider's create pace
 * moved on, in one statement: the claim holds the provider's control row lock, and a claim that
 * calls the provider pays one round trip for both (docs/decisions/0069). `sendBy`: the create must
 * leave before it (docs/decisions/0063). Returns whether the attempt moved (false: it was no longer
 * PREPARED).
 */
export async function claimForSubmit(
  tx: DbOrTx,
  attemptId: string,
  startedAt: Date,
  sendBy: Date,
  pace: { readonly provider: string; readonly tat: Date } | null,
): Promise<boolean> {
  const { rows } = await tx.execute(sql`
    ${pace ? sql`WITH pace AS (${moveCreatePace(pace.provider, pace.tat)})` : sql``}
    UPDATE task_attempt
    SET submit_state = 'SUBMITTING', submit_started_at = ${startedAt}, send_by = ${sendBy}, status_version = status_version + 1
    WHERE attempt_id = ${attemptId} AND submit_state = 'PREPARED'
    RETURNING attempt_id`);
  return rows.length > 0;
}

/**
 * A claim whose create was never handed to the HTTP client before its send-by moment: SUBMITTING →
 * PREPARED, to be claimed again with a new one. Only the claim stamped `sendBy` can do it, and
 * only while nothing else has moved the attempt (an execution that found it SUBMITTING records the
 * outcome as unknown, and then it stays unknown).
 */
export async function unclaimUnsent(tx: DbOrTx, attemptId: string, sendBy: Date): Promise<boolean> {
  const { rows } = await tx.execute(sql`
    UPDATE task_attempt
    SET submit_state = 'PREPARED', submit_started_at = NULL, send_by = NULL, status_version = status_version + 1
    WHERE attempt_id = ${attemptId} AND submit_state = 'SUBMITTING' AND send_by = ${sendBy}
    RETURNING attempt_id`);
  return rows.length > 0;
}
