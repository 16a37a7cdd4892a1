// What GET /v1/models and POST /v1/quotes say about each provider now (issue #52): the operator's
// switch and limit (provider_control), the attempts waiting for a slot (slot_wait), the jobs in
// flight (the bulkhead's count) and how long a slot was held by the jobs that succeeded recently
// (submit start to the task's end), from which the wait for a slot is estimated. Reads only.
import { sql } from 'drizzle-orm';
import type { DbOrTx } from './client';
import type { ProviderControlRow } from './provider-control';
import { holdsSlot } from './slot-queue';

export interface ProviderFacts {
  readonly breakerForce: ProviderControlRow['breaker_force'];
  /** The operator's limit, else the slot queue's ceiling the last claim used; null: the adapter's. */
  readonly slotLimit: number | null;
  readonly inFlight: number;
  /** Attempts waiting for a slot now. */
  readonly waiting: number;
  /** Median seconds a succeeded job held its slot, over `windowHours`; null without one. */
  readonly medianRunSeconds: number | null;
}

/** Every provider with any fact, by name (a provider with none has no row: nothing waits, nothing runs). */
export async function providerFacts(db: DbOrTx, windowHours: number): Promise<Record<string, ProviderFacts>> {
  const { rows } = await db.execute<{
    provider: string;
    breaker_force: ProviderControlRow['breaker_force'];
    slot_limit: number | null;
    in_flight: number;
    waiting: number;
    median_s: number | null;
  }>(sql`
    WITH ctl AS (SELECT provider, breaker_force, COALESCE(max_in_flight, queue_limit) AS slot_limit FROM provider_control),
    w AS (SELECT provider, count(*)::int AS waiting FROM slot_wait WHERE granted_at IS NULL GROUP BY provider),
    f AS (SELECT a.provider, count(*)::int AS in_flight FROM task_attempt a WHERE ${holdsSlot} GROUP BY a.provider),
    run AS (
      SELECT a.provider, percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM t.terminal_at - a.submit_started_at))::float8 AS median_s
      FROM generation_task t JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
      WHERE t.terminal_at IS NOT NULL AND t.terminal_at > now() - make_interval(hours => ${windowHours}::int)
        AND t.status = 'SUCCEEDED' AND a.submit_started_at IS NOT NULL
      GROUP BY a.provider),
    p AS (SELECT provider FROM ctl UNION SELECT provider FROM w UNION SELECT provider FROM f UNION SELECT provider FROM run)
    SELECT p.provider, ctl.breaker_force, ctl.slot_limit, COALESCE(f.in_flight, 0) AS in_flight, COALESCE(w.waiting, 0) AS waiting, run.median_s
    FROM p LEFT JOIN ctl USING (provider) LEFT JOIN w USING (provider) LEFT JOIN f USING (provider) LEFT JOIN run USING (provider)`);
  return Object.fromEntries(
    rows.map((r) => [
      r.provider,
      {
        breakerForce: r.breaker_force,
        slotLimit: r.slot_limit,
        inFlight: r.in_flight,
        waiting: r.waiting,
        medianRunSeconds: r.median_s === null ? null : Number(r.median_s),
      },
    ]),
  );
}
