// When a webhook delivery is tried again (docs/webhooks.md "Retries"). Pure: the relay passes
// the schedule (WEBHOOK_RETRY_SCHEDULE_MS) and the delivery's position in it.

/**
 * The delay before the attempt at `step` of `schedule` (step 0 is the first attempt), or null
 * when the schedule is used up and the delivery has failed.
 */
export function delayBeforeStep(schedule: readonly number[], step: number): number | null {
  if (!Number.isInteger(step) || step < 0 || step >= schedule.length) return null;
  return schedule[step] ?? null;
}

/** What follows a failed attempt made at `step`: the next step and its delay, or 'exhausted'. */
export function afterFailure(schedule: readonly number[], step: number): { kind: 'retry'; step: number; delayMs: number } | { kind: 'exhausted' } {
  const next = step + 1;
  const delayMs = delayBeforeStep(schedule, next);
  return delayMs === null ? { kind: 'exhausted' } : { kind: 'retry', step: next, delayMs };
}

/** Whether an endpoint failing since `failingSince` has failed long enough to be disabled. */
export function shouldDisable(failingSince: Date | null, now: Date, disableAfterMs: number): boolean {
  return failingSince !== null && now.getTime() - failingSince.getTime() >= disableAfterMs;
}
