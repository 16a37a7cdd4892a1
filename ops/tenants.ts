// Tenant administration used by the ops CLI (and by tests): create a tenant with an API key
// and an opening grant, all in one transaction, audited.
import { randomUUID } from 'node:crypto';
import type { Db } from '../db/client';
import { acquireFence, holdFence } from '../db/fence';
import { grantCredits } from '../db/ledger';
import { opsAudit } from '../db/schema';
import { findTenantByName, insertTenant, issueApiKey } from '../db/tenants';
import { normalize } from '../domain/money';

/** Which fence to write under: the process's region and scope. */
export interface FenceScope {
  readonly scope: string;
  readonly region: string;
}

export interface CreatedTenant {
  readonly tenant_id: string;
  /** Shown once; null when the tenant existed and no key was given. */
  readonly api_key: string | null;
  readonly created: boolean;
}

export async function createTenant(
  db: Db,
  args: { name: string; credits: string; apiKey?: string; ifMissing: boolean; actor: string; fence: FenceScope },
): Promise<CreatedTenant> {
  const credits = normalize(args.credits);
  const { token } = await acquireFence(db, args.fence.scope, args.fence.region);
  return db.transaction(async (tx) => {
    await holdFence(tx, token);
    const existing = await findTenantByName(tx, args.name);
    if (existing) {
      if (!args.ifMissing) throw new Error(`tenant ${args.name} exists`);
      // Make sure a given key works (e.g. DEMO_API_KEY), without minting a new one.
      const key = args.apiKey ? await issueApiKey(tx, existing.tenantId, args.apiKey) : null;
      return { tenant_id: existing.tenantId, api_key: key, created: false };
    }
    const tenantId = await insertTenant(tx, args.name);
    const key = await issueApiKey(tx, tenantId, args.apiKey);
    await grantCredits(tx, token, {
      tenantId,
      amount: credits,
      businessKey: `tenant:${tenantId}:opening-grant`,
      note: 'opening grant',
    });
    await tx.insert(opsAudit).values({
      audit_id: randomUUID(),
      actor: args.actor,
      action: 'tenant.create',
      target_type: 'tenant',
      target_id: tenantId,
      reason: `create tenant ${args.name}`,
      detail: { credits },
    });
    return { tenant_id: tenantId, api_key: key, created: true };
  });
}

export async function grantTenantCredits(
  db: Db,
  args: { name: string; credits: string; reason: string; actor: string; fence: FenceScope },
): Promise<{ tenant_id: string; granted: string }> {
  const credits = normalize(args.credits);
  const { token } = await acquireFence(db, args.fence.scope, args.fence.region);
  return db.transaction(async (tx) => {
    await holdFence(tx, token);
    const t = await findTenantByName(tx, args.name);
    if (!t) throw new Error(`no tenant named ${args.name}`);
    const auditId = randomUUID();
    await grantCredits(tx, token, {
      tenantId: t.tenantId,
      amount: credits,
      businessKey: `grant:${auditId}`,
      note: args.reason,
    });
    await tx.insert(opsAudit).values({
      audit_id: auditId,
      actor: args.actor,
      action: 'tenant.grant',
      target_type: 'tenant',
      target_id: t.tenantId,
      reason: args.reason,
      detail: { credits },
    });
    return { tenant_id: t.tenantId, granted: credits };
  });
}

/** One ops_audit row, under the fence, for an operator action that has no table of its own (e.g. `spool requeue`). */
export async function auditOps(
  db: Db,
  fence: FenceScope,
  a: { actor: string; action: string; targetType: string; targetId: string; reason: string; detail: Record<string, unknown> },
): Promise<void> {
  const { token } = await acquireFence(db, fence.scope, fence.region);
  await db.transaction(async (tx) => {
    await holdFence(tx, token);
    await tx.insert(opsAudit).values({
      audit_id: randomUUID(), actor: a.actor, action: a.action, target_type: a.targetType, target_id: a.targetId, reason: a.reason, detail: a.detail,
    });
  });
}
