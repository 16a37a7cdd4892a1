// Tenants and API keys. A key is shown once at issue time; only its sha256 is stored. A key
// revoked with a grace period (a rotation) keeps working until its revoked_at. Issuing and
// revoking a key NOTIFY API_KEYS_CHANNEL (delivered at commit): every API process evicts the key
// from its lookup cache and ends the key's open event streams (api/api-keys.ts).
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { and, asc, eq, gt, inArray, isNull, or, sql } from 'drizzle-orm';
import type { Db, DbOrTx } from './client';
import { apiKey, tenant } from './schema';

const KEY_PREFIX = 'vo_live_';

export const hashApiKey = (key: string): string => createHash('sha256').update(key, 'utf8').digest('hex');

export function generateApiKey(): string {
  return `${KEY_PREFIX}${randomBytes(24).toString('base64url')}`;
}

/** The pg_notify channel of key changes: `{"k":"revoked","key_id":…,"revoked_at":…}` or `{"k":"issued"}`. */
export const API_KEYS_CHANNEL = 'vidorch_api_keys';

/** A key that authenticates now, and when its revocation takes effect (a rotation's grace), if it has one. */
export interface ValidApiKey {
  readonly tenantId: string;
  readonly name: string;
  readonly keyId: string;
  readonly revokedAt: Date | null;
}

/** The valid key with this sha256 (hashApiKey), or null. */
export async function findValidApiKey(db: DbOrTx, keyHash: string): Promise<ValidApiKey | null> {
  const [row] = await db
    .select({ tenantId: tenant.tenant_id, name: tenant.name, keyId: apiKey.key_id, revokedAt: apiKey.revoked_at })
    .from(apiKey)
    .innerJoin(tenant, eq(tenant.tenant_id, apiKey.tenant_id))
    .where(and(eq(apiKey.key_hash, keyHash), or(isNull(apiKey.revoked_at), gt(apiKey.revoked_at, sql`now()`))));
  return row ?? null;
}

export async function findTenantByApiKey(db: Db, key: string): Promise<{ tenantId: string; name: string } | null> {
  const row = await findValidApiKey(db, hashApiKey(key));
  return row ? { tenantId: row.tenantId, name: row.name } : null;
}

/** Of these key ids, those no longer valid now, or with a revocation set for later (and when). */
export async function keyRevocations(db: DbOrTx, keyIds: readonly string[]): Promise<Array<{ keyId: string; revokedAt: Date }>> {
  if (keyIds.length === 0) return [];
  const rows = await db
    .select({ keyId: apiKey.key_id, revokedAt: apiKey.revoked_at })
    .from(apiKey)
    .where(inArray(apiKey.key_id, [...keyIds]));
  const found = new Map(rows.map((r) => [r.keyId, r.revokedAt]));
  // A key id with no row (deleted) is revoked as of now.
  return keyIds.flatMap((keyId) => {
    const at = found.has(keyId) ? found.get(keyId) : new Date(0);
    return at ? [{ keyId, revokedAt: at }] : [];
  });
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
  if (row) {
    // A lookup of this key cached as unknown before it existed is forgotten.
    await db.execute(sql`SELECT pg_notify(${API_KEYS_CHANNEL}, ${JSON.stringify({ k: 'issued' })})`);
    return { keyId: row.keyId, keyHash, key, issued: true };
  }
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
  if (!row?.revokedAt) return null;
  await db.execute(sql`SELECT pg_notify(${API_KEYS_CHANNEL}, ${JSON.stringify({ k: 'revoked', key_id: keyId, revoked_at: row.revokedAt.toISOString() })})`);
  return { keyHash: row.keyHash, revokedAt: row.revokedAt };
}
