// Operator controls per provider (provider_control, read by every submit claim): the breaker's
// force switch and the bulkhead limit, each change audited in the same transaction. The status
// shows what Postgres knows: the switch, the limit, jobs in flight and waiting by the attempt
// facts, and the provider's recent proven rejections. Breaker state and our own refusals are
// per worker process (its /metrics), not facts.
import { sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { inFlightByProvider, lockProviderControl, providerControls, setProviderControl } from '../db/provider-control';
import { grantFreeSlots, IN_FLIGHT_SUBMIT_STATES } from '../db/slot-queue';
import type { BreakerForce } from '../providers/resilience/circuit-breaker';
import { recordAudit } from '../db/audit';

export interface ProviderStatus {
  readonly provider: string;
  /** The operator's switch: null = automatic (the breaker decides). */
  readonly force: BreakerForce;
  /** The operator's bulkhead limit (null = the adapter's). */
  readonly max_in_flight: number | null;
  /** The adapter's own limit (capabilities.maxConcurrency), if any. */
  readonly adapter_limit: number | null;
  /** The limit the bulkhead applies once ramped up (null = none). */
  readonly limit: number | null;
  /** Attempts SUBMITTING, SUBMITTED, RUNNING or SUBMIT_UNKNOWN: what the bulkhead counts. */
  readonly in_flight: number;
  /** Of which SUBMIT_UNKNOWN (being reconciled). */
  readonly unknown: number;
  /** Attempts PREPARED: waiting for their claim (refused by a guard, or about to go). */
  readonly waiting: number;
  readonly oldest_waiting_seconds: number | null;
  /** Attempts the provider rejected (proved not accepted) within the window. */
  readonly rejected_recent: number;
  readonly window_seconds: number;
  readonly reason: string | null;
  readonly updated_by: string | null;
  readonly updated_at: Date | null;
}

const inFlight = sql.raw(IN_FLIGHT_SUBMIT_STATES.map((s) => `'${s}'`).join(', '));

/** Every known provider (`adapterLimits`), plus any with a control row or attempts, sorted. */
export async function providerStatus(
  db: Db,
  opts: { adapterLimits: Readonly<Record<string, number | null>>; windowSeconds: number },
): Promise<ProviderStatus[]> {
  const controls = await providerControls(db);
  const { rows } = await db.execute<{ provider: string; unknown: number; waiting: number; oldest_waiting_seconds: number | null; rejected_recent: number }>(sql`
    SELECT provider,
      count(*) FILTER (WHERE submit_state = 'SUBMIT_UNKNOWN')::int AS unknown,
      count(*) FILTER (WHERE submit_state = 'PREPARED')::int AS waiting,
      extract(epoch FROM now() - min(created_at) FILTER (WHERE submit_state = 'PREPARED'))::float8 AS oldest_waiting_seconds,
      count(*) FILTER (WHERE submit_state = 'REJECTED')::int AS rejected_recent
    FROM task_attempt
    WHERE submit_state IN (${inFlight}, 'PREPARED')
       OR (submit_state = 'REJECTED' AND submit_finished_at > now() - make_interval(secs => ${opts.windowSeconds}))
    GROUP BY provider`);
  // Slots held, counted exactly as the bulkhead counts them.
  const slots = await inFlightByProvider(db);
  const facts = new Map(rows.map((r) => [r.provider, r]));
  const names = [...new Set([...Object.keys(opts.adapterLimits), ...controls.map((c) => c.provider), ...facts.keys()])].sort();
  return names.map((provider) => {
    const c = controls.find((r) => r.provider === provider);
    const f = facts.get(provider);
    const adapterLimit = opts.adapterLimits[provider] ?? null;
    const maxInFlight = c?.max_in_flight ?? null;
    return {
      provider,
      force: c?.breaker_force ?? null,
      max_in_flight: maxInFlight,
      adapter_limit: adapterLimit,
      limit: maxInFlight ?? adapterLimit,
      in_flight: slots[provider] ?? 0,
      unknown: f?.unknown ?? 0,
      waiting: f?.waiting ?? 0,
      oldest_waiting_seconds: f?.oldest_waiting_seconds === null || f?.oldest_waiting_seconds === undefined ? null : Math.round(f.oldest_waiting_seconds),
      rejected_recent: f?.rejected_recent ?? 0,
      window_seconds: opts.windowSeconds,
      reason: c?.reason ?? null,
      updated_by: c?.updated_by ?? null,
      updated_at: c?.updated_at ?? null,
    };
  });
}

export type ProviderControlChange = { readonly kind: 'force'; readonly force: BreakerForce } | { readonly kind: 'limit'; readonly maxInFlight: number | null };

export interface ProviderControlResult {
  readonly provider: string;
  readonly from: { readonly force: BreakerForce; readonly max_in_flight: number | null };
  readonly to: { readonly force: BreakerForce; readonly max_in_flight: number | null };
  readonly auditId: string;
}

const actionOf = (change: ProviderControlChange): string =>
  change.kind === 'limit'
    ? 'provider.limit'
    : change.force === null
      ? 'provider.clear'
      : change.force === 'open'
        ? 'provider.force-open'
        : 'provider.force-close';

/**
 * Changes one provider's control row and audits it, in one transaction. The row lock is the
 * one bulkhead admissions take, so every claim after the commit sees the change: no restart.
 */
export async function changeProviderControl(
  db: Db,
  args: { provider: string; change: ProviderControlChange; actor: string; reason: string },
): Promise<ProviderControlResult> {
  return db.transaction(async (tx) => {
    const row = await lockProviderControl(tx, args.provider);
    const from = { force: row.breaker_force, max_in_flight: row.max_in_flight };
    const to = args.change.kind === 'force' ? { ...from, force: args.change.force } : { ...from, max_in_flight: args.change.maxInFlight };
    const limitChanged = args.change.kind === 'limit' && to.max_in_flight !== null;
    await setProviderControl(tx, args.provider, { ...to, reason: args.reason, actor: args.actor }, { queueLimit: limitChanged });
    // A raised limit goes to the waiters now, in this transaction (docs/providers.md "The slot
    // queue"); the next claim brings the ceiling back under the bulkhead's ramp if one runs.
    if (limitChanged) await grantFreeSlots(tx, args.provider, new Date());
    const auditId = await recordAudit(tx, {
      actor: args.actor,
      action: actionOf(args.change),
      targetType: 'provider',
      targetId: args.provider,
      reason: args.reason,
      detail: { from, to },
    });
    return { provider: args.provider, from, to, auditId };
  });
}
