// Operator views and controls of the slot queue (docs/providers.md "The slot queue"): who waits
// for a provider's slots and why, and a tenant's in-flight caps and fair-share weight. A change
// is audited in the transaction that makes it, and grants whatever it frees in that transaction.
import type { Db } from '../db/client';
import { recordAudit } from '../db/audit';
import { providerQueue, setTenantCapacity, type QueueEntry, type TenantSlotDefaults } from '../db/slot-queue';
import { findTenantByName } from '../db/tenants';

export interface ProviderQueueReport {
  readonly provider: string;
  readonly in_flight: number;
  readonly limit: number | null;
  readonly policy: string;
  readonly aging_seconds: number;
  readonly waiting: number;
  readonly granted: number;
  readonly entries: readonly (Omit<QueueEntry, 'since' | 'grantedAt'> & { readonly waited_seconds: number; readonly granted_at: string | null })[];
}

/** The provider's queue in grant order: position, task, tenant, priority, wait, why. */
export async function providerQueueReport(db: Db, provider: string, now = new Date()): Promise<ProviderQueueReport> {
  const q = await providerQueue(db, provider, now);
  return {
    provider,
    in_flight: q.inFlight,
    limit: q.limit,
    policy: q.policy.mode,
    aging_seconds: Math.round(q.policy.agingMs / 1000),
    waiting: q.entries.filter((e) => e.grantedAt === null).length,
    granted: q.entries.filter((e) => e.grantedAt !== null).length,
    entries: q.entries.map(({ since, grantedAt, ...e }) => ({
      ...e,
      waited_seconds: Math.round((now.getTime() - since.getTime()) / 1000),
      granted_at: grantedAt?.toISOString() ?? null,
    })),
  };
}

export interface TenantLimitChange {
  readonly name: string;
  /** A provider, or '*' for the cap over every provider. */
  readonly provider: string;
  readonly maxInFlight: number | null;
  readonly weight: number | null;
  readonly actor: string;
  readonly reason: string;
}

/** Sets a tenant's cap (and weight) at a provider or overall; audited as tenant.limit. */
export async function setTenantLimit(db: Db, change: TenantLimitChange, defaults: TenantSlotDefaults) {
  return db.transaction(async (tx) => {
    const t = await findTenantByName(tx, change.name);
    if (!t) throw new Error(`no tenant named ${change.name}`);
    const { before } = await setTenantCapacity(
      tx,
      { tenantId: t.tenantId, provider: change.provider, maxInFlight: change.maxInFlight, weight: change.weight, actor: change.actor, reason: change.reason },
      defaults,
      new Date(),
    );
    const from = { max_in_flight: before?.max_in_flight ?? null, weight: before?.weight ?? null };
    const to = { max_in_flight: change.maxInFlight, weight: change.weight };
    const auditId = await recordAudit(tx, {
      actor: change.actor,
      action: 'tenant.limit',
      targetType: 'tenant',
      targetId: t.tenantId,
      reason: change.reason,
      detail: { provider: change.provider, from, to },
    });
    return { tenant_id: t.tenantId, provider: change.provider, from, to, auditId };
  });
}
