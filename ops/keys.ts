// API key administration for the ops CLI: list, rotate, revoke. Every change holds the fence
// and is audited in ops_audit with key ids and sha256 hashes only; a new key is returned once
// (the CLI prints it once) and is never stored or shown again.
import type { Db } from '../db/client';
import { recordAudit } from '../db/audit';
import { acquireFence, holdFence } from '../db/fence';
import { findTenantByName, issueApiKey, listApiKeys, revokeApiKey, type ApiKeyRow } from '../db/tenants';
import { type FenceScope } from './tenants';

async function tenantNamed(db: Db, name: string): Promise<string> {
  const t = await findTenantByName(db, name);
  if (!t) throw new Error(`no tenant named ${name}`);
  return t.tenantId;
}

export async function listKeys(db: Db, tenant: string): Promise<{ tenant_id: string; keys: ApiKeyRow[] }> {
  const tenantId = await tenantNamed(db, tenant);
  return { tenant_id: tenantId, keys: await listApiKeys(db, tenantId) };
}

interface KeyChange {
  readonly tenant: string;
  readonly keyId: string;
  readonly reason: string;
  readonly actor: string;
  readonly fence: FenceScope;
}

/** Revokes one key of the tenant now. */
export async function revokeKey(db: Db, args: KeyChange): Promise<{ key_id: string; revoked_at: Date; audit_id: string }> {
  const tenantId = await tenantNamed(db, args.tenant);
  const { token } = await acquireFence(db, args.fence.scope, args.fence.region);
  return db.transaction(async (tx) => {
    await holdFence(tx, token);
    const revoked = await revokeApiKey(tx, tenantId, args.keyId);
    if (!revoked) throw new Error(`tenant ${args.tenant} has no valid key ${args.keyId}`);
    const auditId = await recordAudit(tx, {
      actor: args.actor,
      action: 'key.revoke',
      targetType: 'tenant',
      targetId: tenantId,
      reason: args.reason,
      detail: { key_id: args.keyId, key_hash: revoked.keyHash },
    });
    return { key_id: args.keyId, revoked_at: revoked.revokedAt, audit_id: auditId };
  });
}

/**
 * Issues a new key for the tenant and revokes the old one after `graceSeconds` (0: at once), so
 * clients can switch over. Returns the new key: the only time it is ever shown.
 */
export async function rotateKey(
  db: Db,
  args: KeyChange & { graceSeconds: number },
): Promise<{ key_id: string; api_key: string; old_key_id: string; old_revoked_at: Date; audit_id: string }> {
  const tenantId = await tenantNamed(db, args.tenant);
  const { token } = await acquireFence(db, args.fence.scope, args.fence.region);
  return db.transaction(async (tx) => {
    await holdFence(tx, token);
    const revoked = await revokeApiKey(tx, tenantId, args.keyId, args.graceSeconds);
    if (!revoked) throw new Error(`tenant ${args.tenant} has no valid key ${args.keyId}`);
    const fresh = await issueApiKey(tx, tenantId);
    const auditId = await recordAudit(tx, {
      actor: args.actor,
      action: 'key.rotate',
      targetType: 'tenant',
      targetId: tenantId,
      reason: args.reason,
      detail: {
        old_key_id: args.keyId,
        old_key_hash: revoked.keyHash,
        old_revoked_at: revoked.revokedAt.toISOString(),
        key_id: fresh.keyId,
        key_hash: fresh.keyHash,
      },
    });
    return { key_id: fresh.keyId, api_key: fresh.key, old_key_id: args.keyId, old_revoked_at: revoked.revokedAt, audit_id: auditId };
  });
}
