// Tenants and API keys. A key is shown once at issue time; only its sha256 is stored.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { and, eq, isNull } from 'drizzle-orm';
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
    .where(and(eq(apiKey.key_hash, hashApiKey(key)), isNull(apiKey.revoked_at)));
  return row ?? null;
}

export async function findTenantByName(db: DbOrTx, name: string): Promise<{ tenantId: string } | null> {
  const [row] = await db.select({ tenantId: tenant.tenant_id }).from(tenant).where(eq(tenant.name, name));
  return row ?? null;
}

export async function insertTenant(db: DbOrTx, name: string): Promise<string> {
  const tenantId = randomUUID();
  await db.insert(tenant).values({ tenant_id: tenantId, name });
  return tenantId;
}

/** Stores a key for the tenant (a given key, e.g. DEMO_API_KEY, or a new one) and returns it. */
export async function issueApiKey(db: DbOrTx, tenantId: string, key: string = generateApiKey()): Promise<string> {
  await db
    .insert(apiKey)
    .values({ key_id: randomUUID(), tenant_id: tenantId, key_hash: hashApiKey(key), key_prefix: key.slice(0, 12) })
    .onConflictDoNothing({ target: apiKey.key_hash });
  return key;
}
