// provider_create_cap (docs/decisions/0070): a provider model whose account allowance of creates is
// spent for now, and the attempts that wait for its reset unsent. This module owns its writes.
import { and, eq, isNotNull, sql } from 'drizzle-orm';
import type { DbOrTx } from './client';
import { providerCreateCap, taskAttempt, type AttemptRow, type ProviderCreateCapRow } from './schema';

/** What a claim may do about a capped model: go (no cap, or it is the probe after the reset) or wait until then. */
export type CapGate = { readonly kind: 'go'; readonly probe: boolean } | { readonly kind: 'wait'; readonly until: Date; readonly since: Date };

/**
 * The claim's look at its model's cap, in its transaction. Past the reset, the first claim takes
 * the probe (the row moves `probeMs` on, so the others keep waiting while its create is answered)
 * and goes; before it, every claim waits. One statement either way.
 */
export async function gateCreateCap(tx: DbOrTx, provider: string, model: string, now: Date, probeMs: number): Promise<CapGate> {
  const { rows } = await tx.execute<{ capped_until: Date | string; capped_at: Date | string; probe: boolean }>(sql`
    WITH probe AS (
      UPDATE provider_create_cap SET capped_until = ${new Date(now.getTime() + probeMs)}
      WHERE provider = ${provider} AND provider_model = ${model} AND capped_until <= ${now}
      RETURNING capped_until, capped_at)
    SELECT capped_until, capped_at, true AS probe FROM probe
    UNION ALL
    SELECT capped_until, capped_at, false AS probe FROM provider_create_cap
    WHERE provider = ${provider} AND provider_model = ${model} AND capped_until > ${now} AND NOT EXISTS (SELECT 1 FROM probe)`);
  const row = rows[0];
  if (!row) return { kind: 'go', probe: false };
  if (row.probe) return { kind: 'go', probe: true };
  return { kind: 'wait', until: new Date(row.capped_until), since: new Date(row.capped_at) };
}

/** The provider refused a create of this model for its spent allowance: no claim of it calls before `until`. */
export async function recordCapRefusal(tx: DbOrTx, provider: string, model: string, now: Date, until: Date, error: string): Promise<void> {
  await tx
    .insert(providerCreateCap)
    .values({ provider, provider_model: model, capped_until: until, capped_at: now, last_error: error })
    .onConflictDoUpdate({
      target: [providerCreateCap.provider, providerCreateCap.provider_model],
      set: { capped_until: until, refusals: sql`${providerCreateCap.refusals} + 1`, last_error: error },
    });
}

/** An accepted create of a capped model: the allowance has room again. */
export async function liftCreateCap(tx: DbOrTx, provider: string, model: string): Promise<void> {
  await tx.delete(providerCreateCap).where(and(eq(providerCreateCap.provider, provider), eq(providerCreateCap.provider_model, model)));
}

/** The PREPARED attempt waits for the reset: when it first did, and until when (shown by GET /v1/tasks/:id). */
export async function markAttemptCapped(tx: DbOrTx, attemptId: string, now: Date, until: Date): Promise<void> {
  await tx
    .update(taskAttempt)
    .set({ capped_since: sql`coalesce(${taskAttempt.capped_since}, ${now})`, capped_until: until })
    .where(and(eq(taskAttempt.attempt_id, attemptId), eq(taskAttempt.submit_state, 'PREPARED')));
}

/** Every capped model, and how many attempts wait for it (`ops provider caps`, the fact gauges). */
export async function createCaps(db: DbOrTx): Promise<(ProviderCreateCapRow & { waiting: number })[]> {
  const caps = await db.select().from(providerCreateCap);
  const waiting = await db
    .select({ provider: taskAttempt.provider, model: taskAttempt.provider_model, n: sql<number>`count(*)::int` })
    .from(taskAttempt)
    .where(and(eq(taskAttempt.submit_state, 'PREPARED'), isNotNull(taskAttempt.capped_until)))
    .groupBy(taskAttempt.provider, taskAttempt.provider_model);
  return caps.map((c) => ({ ...c, waiting: waiting.find((w) => w.provider === c.provider && w.model === c.provider_model)?.n ?? 0 }));
}

/**
 * The attempt's wait for its model's daily allowance, shaped like a slot queue entry (GET
 * /v1/tasks/:id `queue`, reason `daily_cap`), with how many attempts of the model wait for it.
 */
export async function capWaitOf(db: DbOrTx, attempt: AttemptRow) {
  if (attempt.submit_state !== 'PREPARED' || !attempt.capped_since || !attempt.capped_until) return null;
  const [row] = await db
    .select({ n: sql<number>`count(*)::int` })
    .from(taskAttempt)
    .where(
      and(
        eq(taskAttempt.provider, attempt.provider),
        eq(taskAttempt.provider_model, attempt.provider_model),
        eq(taskAttempt.submit_state, 'PREPARED'),
        isNotNull(taskAttempt.capped_until),
      ),
    );
  return {
    provider: attempt.provider,
    position: null,
    waiting: row?.n ?? 1,
    since: attempt.capped_since,
    grantedAt: null,
    reason: 'daily_cap',
    until: attempt.capped_until,
  };
}
