// The wait on a provider, carried by Temporal's activity retries instead of the workflow's
// timer loop (docs/decisions/0050-waits-in-activity-retries.md). One attempt is what one poll and
// the inbox step after it are: read the job, record what it says, apply the inbox. While that
// leaves the task where the workflow last saw it (the same status version and attempt state,
// still waiting), the attempt fails BENIGN with the next poll's delay and Temporal runs the next
// one then, on the same rate-limited poll queue, with no workflow task in between. Anything the
// workflow decides on ends the wait: the task moved (a job state, a cancel honoured, an
// escalation), or the poll's result is one the workflow acts on itself.
import { ApplicationFailure, ApplicationFailureCategory, TemporalFailure } from '@temporalio/common';
import { plusUpToHalf } from '../domain/backoff';
import { FailureType } from '../domain/errors';
import type { TaskFacts } from '../domain/facts';
import type { AttemptState } from '../domain/states';
import { withHeartbeat } from './deps';
import type { PollOutcome, PollResult } from './poll-provider';

/** Where the workflow last saw the task: the wait lasts while the facts still say this. */
export interface ProviderWaitSince {
  readonly statusVersion: number;
  readonly attemptState: AttemptState | null;
}

/** Poll results the workflow acts on itself (escalate, re-read, re-dispatch): each ends the wait. */
const WORKFLOW_ACTS_ON: readonly PollResult['result'][] = ['overdue', 'absent', 'parked', 'escalated', 'nothing-to-poll'];

/** A read already due is retried this soon (a delay of 0 would leave the retry policy's backoff). */
const MIN_NEXT_READ_MS = 100;

/**
 * An attempt that failed on its own (a database blip, a dropped connection) is retried this soon,
 * plus up to half again. Left to the retry policy, its backoff would count the wait's earlier
 * attempts and start at its 30 s cap; the poll queue's rate bounds how often these come anyway.
 */
export const TRANSIENT_RETRY_MS = 2_000;

/** Whether the facts after a poll and its inbox step leave the task waiting where it was. */
export function stillWaiting(facts: TaskFacts, since: ProviderWaitSince): boolean {
  // pollInMs is set only while the task waits on its provider with a next poll time (db/task-tx.ts).
  return facts.pollInMs !== null && facts.statusVersion === since.statusVersion && facts.attemptState === since.attemptState;
}

/**
 * An error of ours that carries no intent of its own (a plain Error, not a Temporal failure) is
 * retried on the wait's clock (TRANSIENT_RETRY_MS), not the policy's; a Temporal failure (a
 * fence, a paused mode, a non-retryable one, a cancel) goes as it is.
 */
function onOurClock(err: unknown): unknown {
  if (err instanceof TemporalFailure || !(err instanceof Error)) return err;
  return ApplicationFailure.create({
    type: err.name,
    message: err.message,
    cause: err,
    nextRetryDelay: plusUpToHalf(TRANSIENT_RETRY_MS, Math.random),
  });
}

export function createProviderWaitActivities(steps: {
  /** A poll that applies the inbox in its own transaction when it can (activities/poll-provider.ts PollOutcome). */
  readonly pollAndApply: (taskId: string) => Promise<PollOutcome>;
  readonly applyInbox: (taskId: string) => Promise<TaskFacts>;
}) {
  /** One attempt: a poll, and the inbox step after it unless the poll's result ends the wait. */
  async function attempt(taskId: string, since: ProviderWaitSince): Promise<PollResult> {
    const { polled, applied } = await steps.pollAndApply(taskId);
    if (WORKFLOW_ACTS_ON.includes(polled.result)) return polled;
    // The inbox step the workflow would run next, here: a progress change or a repeated state
    // is applied (and streamed) without waking the workflow. A read of a known job applied it
    // already, in the transaction that recorded it (docs/decisions/0051); the others (a lookup of
    // an unknown outcome, a counted read failure) leave it to a step of its own, as callbacks may
    // be waiting in the inbox.
    const facts = applied ?? (await steps.applyInbox(taskId));
    if (!stillWaiting(facts, since)) return polled;
    const nextReadMs = Math.max(MIN_NEXT_READ_MS, facts.pollInMs ?? MIN_NEXT_READ_MS);
    throw ApplicationFailure.create({
      type: FailureType.ProviderUnchanged,
      message: `the provider's job has not moved the task; next read in ${(nextReadMs / 1000).toFixed(1)} s`,
      nextRetryDelay: nextReadMs,
      category: ApplicationFailureCategory.BENIGN,
    });
  }

  return {
    /**
     * Reads the job and applies what it says; returns the poll's result once the workflow has
     * something to decide, and otherwise fails ProviderUnchanged with the next read's delay.
     * The workflow cancels it when a wake arrives (a callback, a cancel, an operator).
     */
    async awaitProviderChange(taskId: string, since: ProviderWaitSince): Promise<PollResult> {
      // One heartbeat for the whole attempt, the inbox step included: a cancel (a wake) reaches
      // it at a heartbeat's answer, and a stuck step is noticed after the heartbeat timeout.
      return withHeartbeat(async () => {
        try {
          return await attempt(taskId, since);
        } catch (err) {
          throw onOurClock(err);
        }
      });
    },
  };
}
