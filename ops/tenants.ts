// Tenant administration used by the ops CLI (and by tests): create a tenant with an API key
// and an opening grant, all in one transaction, audited.
import type { Db } from '../db/client';
import { acquireFence, holdFence } from '../db/fence';
import { grantCredits } from '../db/ledger';
import { ApiKeyConflictError, findTenantByName, hashApiKey, insertTenant, issueApiKey, setOutputRetention } from '../db/tenants';
import { normalize } from '../domain/money';
import { recordAudit, type AuditEntry } from '../db/audit';

/** Which fence to write under: the process's region and scope. */
export interface FenceScope {
  readonly scope: string;
  readonly region: string;
}

export interface CreatedTenant {
  readonly tenant_id: string;
  /** The key in use: generated (shown once) or the one given; null when the tenant existed and no key was given. */
  readonly api_key: string | null;
  readonly key_id: string | null;
  /** Whether this run generated the key (only then does the CLI print it). */
  readonly key_generated: boolean;
  readonly created: boolean;
}

/**
 * Creates a tenant with an API key and its opening grant (or, with ifMissing, makes sure an
 * existing tenant holds the given key). A given key that belongs to another tenant is refused,
 * nothing is written but the refusal's audit row, and ApiKeyConflictError is thrown.
 */
export async function createTenant(
  db: Db,
  args: { name: string; credits: string; apiKey?: string; ifMissing: boolean; actor: string; fence: FenceScope },
): Promise<CreatedTenant> {
  const credits = normalize(args.credits);
  const { token } = await acquireFence(db, args.fence.scope, args.fence.region);
  try {
    return await db.transaction(async (tx) => {
      await holdFence(tx, token);
      const existing = await findTenantByName(tx, args.name);
      if (existing) {
        if (!args.ifMissing) throw new Error(`tenant ${args.name} exists`);
        if (!args.apiKey) return { tenant_id: existing.tenantId, api_key: null, key_id: null, key_generated: false, created: false };
        // Make sure the given key works (e.g. DEMO_API_KEY), without minting a new one.
        const key = await issueApiKey(tx, existing.tenantId, args.apiKey);
        if (key.issued) {
          await recordAudit(tx, {
            actor: args.actor,
            action: 'key.issue',
            targetType: 'tenant',
            targetId: existing.tenantId,
            reason: `tenant create --if-missing ${args.name}`,
            detail: { key_id: key.keyId, key_hash: key.keyHash },
          });
        }
        return { tenant_id: existing.tenantId, api_key: key.key, key_id: key.keyId, key_generated: false, created: false };
      }
      const tenantId = await insertTenant(tx, args.name);
      const key = await issueApiKey(tx, tenantId, args.apiKey);
      await grantCredits(tx, token, {
        tenantId,
        amount: credits,
        businessKey: `tenant:${tenantId}:opening-grant`,
        note: 'opening grant',
      });
      await recordAudit(tx, {
        actor: args.actor,
        action: 'tenant.create',
        targetType: 'tenant',
        targetId: tenantId,
        reason: `create tenant ${args.name}`,
        detail: { credits, key_id: key.keyId, key_hash: key.keyHash },
      });
      return { tenant_id: tenantId, api_key: key.key, key_id: key.keyId, key_generated: !args.apiKey, created: true };
    });
  } catch (err) {
    if (!(err instanceof ApiKeyConflictError)) throw err;
    // The transaction rolled back; the refusal itself is recorded.
    await db.transaction(async (tx) => {
      await holdFence(tx, token);
      await recordAudit(tx, {
        actor: args.actor,
        action: 'tenant.create.refused',
        targetType: 'tenant-name',
        targetId: args.name,
        reason: 'the given API key is issued to another tenant',
        detail: { key_id: err.keyId, key_hash: hashApiKey(args.apiKey ?? ''), owner_tenant_id: err.ownerTenantId },
      });
    });
    throw new Error(`${err.message} (the refusal is audited)`, { cause: err });
  }
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
    const auditId = await recordAudit(tx, {
      actor: args.actor,
      action: 'tenant.grant',
      targetType: 'tenant',
      targetId: t.tenantId,
      reason: args.reason,
      detail: { credits },
    });
    await grantCredits(tx, token, {
      tenantId: t.tenantId,
      amount: credits,
      businessKey: `grant:${auditId}`,
      note: args.reason,
    });
    return { tenant_id: t.tenantId, granted: credits };
  });
}

/** Sets how long a tenant's outputs are kept (null: the config default), audited. */
export async function setTenantOutputRetention(
  db: Db,
  args: { name: string; days: number | null; reason: string; actor: string; fence: FenceScope },
): Promise<{ tenant_id: string; output_retention_days: number | null }> {
  const { token } = await acquireFence(db, args.fence.scope, args.fence.region);
  return db.transaction(async (tx) => {
    await holdFence(tx, token);
    const t = await findTenantByName(tx, args.name);
    if (!t) throw new Error(`no tenant named ${args.name}`);
    await recordAudit(tx, {
      actor: args.actor,
      action: 'tenant.output-retention',
      targetType: 'tenant',
      targetId: t.tenantId,
      reason: args.reason,
      detail: { output_retention_days: args.days },
    });
    await setOutputRetention(tx, t.tenantId, args.days);
    return { tenant_id: t.tenantId, output_retention_days: args.days };
  });
}

/** One ops_audit row, under the fence, for an operator action that has no table of its own (e.g. `spool requeue`). */
export async function auditOps(db: Db, fence: FenceScope, a: AuditEntry): Promise<void> {
  const { token } = await acquireFence(db, fence.scope, fence.region);
  await db.transaction(async (tx) => {
    await holdFence(tx, token);
    await recordAudit(tx, a);
  });
}
