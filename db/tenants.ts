// Tenants and API keys. A key is shown once at issue time; only its sha256 is stored. A key
// revoked with a grace period (a rotation) keeps working until its revoked_at.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { and, asc, eq, gt, isNull, or, sql } from 'drizzle-orm';
import type { Db, DbOrTx } from './client';
import { apiKey, tenant } from './schema';

const KEY_PREFIX = 'vo_live_';

export const hashApiKey = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

export function generateApiKey(): string {
  return `${KEY_PREFIX}${randomBytes(24).toString('base64url')}`;
}

export async function findTenantByApiKey(db: Db, key: string): Promise<{ tenantId: string; name: string } | null> {
  const [row] = await db
    .select({ tenantId: tenant.tenant_id, name: tenant.name })
    .from(apiKey)
    .innerJoin(tenant, eq(tenant.tenant_id, apiKey.tenant_id))
    .where(and(eq(apiKey.key_hash, hashApiKey(key)), or(isNull(apiKey.revoked_at), gt(apiKey.revoked_at, sql`now()`))));
  return row ?? null;
}

export async function findTenantByName(db: DbOrTx, name: string): Promise<{ tenantId: string } | null> {
  const [row] = await db.select({ tenantId: tenant.tenant_id }).from(tenant).where(eq(tenant.name, name));
  return row ?? null;
}

/** The tenant's output retention in days (null: config OUTPUT_RETENTION_DAYS; 0: keep forever). storage/output-lifecycle.ts reads it. */
export async function setOutputRetention(db: DbOrTx, tenantId: string, days: number | null): Promise<void> {
  await db.update(tenant).set({ output_retention_days: days }).where(eq(tenant.tenant_id, tenantId));
}

export async function insertTenant(db: DbOrTx, name: string): Promise<string> {
  const tenantId = randomUUID();
  await db.insert(tenant).values({ tenant_id: tenantId, name });
  return tenantId;
}

/** The key is already issued, to another tenant: nothing was stored. */
export class ApiKeyConflictError extends Error {
  constructor(
    readonly keyId: string,
    readonly ownerTenantId: string,
  ) {
    super('this API key is already issued to another tenant; refused');
    this.name = 'ApiKeyConflictError';
  }
}

export interface IssuedKey {
  readonly keyId: string;
  readonly keyHash: string;
  readonly key: string;
  /** False when the tenant already held this key (nothing was written). */
  readonly issued: boolean;
}

/**
 * Stores a key for the tenant (a given key, e.g. DEMO_API_KEY, or a new one). A key the tenant
 * already holds is a no-op; one that belongs to another tenant throws ApiKeyConflictError.
 */
export async function issueApiKey(db: DbOrTx, tenantId: string, key: string = generateApiKey()): Promise<IssuedKey> {
  const keyHash = hashApiKey(key);
  const [row] = await db
    .insert(apiKey)
    .values({ key_id: randomUUID(), tenant_id: tenantId, key_hash: keyHash, key_prefix: key.slice(0, 12) })
    .onConflictDoNothing({ target: apiKey.key_hash })
    .returning({ keyId: apiKey.key_id });
  if (row) return { keyId: row.keyId, keyHash, key, issued: true };
  const [held] = await db.select({ keyId: apiKey.key_id, tenantId: apiKey.tenant_id }).from(apiKey).where(eq(apiKey.key_hash, keyHash));
  if (!held || held.tenantId !== tenantId) throw new ApiKeyConflictError(held?.keyId ?? 'unknown', held?.tenantId ?? 'unknown');
  return { keyId: held.keyId, keyHash, key, issued: false };
}

export interface ApiKeyRow {
  readonly key_id: string;
  readonly key_prefix: string;
  readonly created_at: Date;
  readonly revoked_at: Date | null;
}

/** A tenant's keys, oldest first: ids and prefixes, never the key or its hash. */
export function listApiKeys(db: DbOrTx, tenantId: string): Promise<ApiKeyRow[]> {
  return db
    .select({ key_id: apiKey.key_id, key_prefix: apiKey.key_prefix, created_at: apiKey.created_at, revoked_at: apiKey.revoked_at })
    .from(apiKey)
    .where(eq(apiKey.tenant_id, tenantId))
    .orderBy(asc(apiKey.created_at));
}

/**
 * Revokes the tenant's key `afterSeconds` from now (0: at once), or sooner if it was already due
 * sooner. Null when the tenant has no such key still valid.
 */
export async function revokeApiKey(db: DbOrTx, tenantId: string, keyId: string, afterSeconds = 0): Promise<{ keyHash: string; revokedAt: Date } | null> {
  const at = sql`now() + make_interval(secs => ${afterSeconds})`;
  const [row] = await db
    .update(apiKey)
    .set({ revoked_at: sql`least(coalesce(${apiKey.revoked_at}, 'infinity'), ${at})` })
    .where(and(eq(apiKey.key_id, keyId), eq(apiKey.tenant_id, tenantId), or(isNull(apiKey.revoked_at), gt(apiKey.revoked_at, sql`now()`))))
    .returning({ keyHash: apiKey.key_hash, revokedAt: apiKey.revoked_at });
  return row?.revokedAt ? { keyHash: row.keyHash, revokedAt: row.revokedAt } : null;
}
