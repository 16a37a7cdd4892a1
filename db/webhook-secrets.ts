// An endpoint's signing secrets (docs/decisions/0018-tenant-webhooks.md). Signing needs the
// secret itself, so it cannot be hashed like an API key: it is sealed with AES-256-GCM under a
// key derived from WEBHOOK_SECRET_KEY, the endpoint id bound in as associated data (a sealed
// secret copied to another endpoint's row does not open). The key rotates (createSecretBox). The plain secret leaves this module
// only to sign, and to be answered once to the tenant (create, rotate).
import { createCipheriv, createDecipheriv, createHash, randomBytes, randomUUID } from 'node:crypto';
import { and, eq, gt, isNull, or, sql } from 'drizzle-orm';
import type { DbOrTx } from './client';
import { webhookEndpointSecret } from './schema';

export interface SecretBox {
  seal(endpointId: string, secret: string): string;
  open(endpointId: string, sealed: string): string;
  /** Whether `sealed` is under a key other than the current one (or in the old format): `ops webhook reseal` seals it again. */
  isStale(sealed: string): boolean;
}

/**
 * WEBHOOK_SECRET_KEY seals; each of WEBHOOK_SECRET_KEY_PREVIOUS still opens, so the key can be
 * rotated: deploy the new key with the old one listed as previous, run `ops webhook reseal`, then
 * drop the old one. A sealed secret names its key by a fingerprint (`v2.<kid>.…`: the first 8
 * bytes of a hash of the derived key, which tells nothing of it); the first format (`v1.…`) names
 * none and is tried under each key in turn.
 */
export function createSecretBox(keyMaterial: string, previous: readonly string[] = []): SecretBox {
  const derive = (material: string) => {
    const key = createHash('sha256').update(`vidorch-webhook-secret:${material}`).digest();
    return { key, kid: createHash('sha256').update(key).digest('hex').slice(0, 16) };
  };
  const current = derive(keyMaterial);
  const keys = [current, ...previous.filter((p) => p !== keyMaterial).map(derive)];
  const byKid = new Map(keys.map((k) => [k.kid, k.key]));
  const openWith = (key: Buffer, endpointId: string, iv: string, body: string, tag: string) => {
    const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
    decipher.setAAD(Buffer.from(endpointId));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
  };
  return {
    seal(endpointId, secret) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', current.key, iv);
      cipher.setAAD(Buffer.from(endpointId));
      const body = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
      return `v2.${current.kid}.${iv.toString('base64url')}.${body.toString('base64url')}.${cipher.getAuthTag().toString('base64url')}`;
    },
    open(endpointId, sealed) {
      const parts = sealed.split('.');
      if (parts[0] === 'v2' && parts.length === 5 && parts.every(Boolean)) {
        const [, kid, iv, body, tag] = parts as [string, string, string, string, string];
        const key = byKid.get(kid);
        if (!key) throw new Error(`a webhook secret is sealed under key ${kid}, which is neither WEBHOOK_SECRET_KEY nor in WEBHOOK_SECRET_KEY_PREVIOUS`);
        return openWith(key, endpointId, iv, body, tag);
      }
      if (parts[0] === 'v1' && parts.length === 4 && parts.every(Boolean)) {
        const [, iv, body, tag] = parts as [string, string, string, string];
        for (const { key } of keys) {
          try {
            return openWith(key, endpointId, iv, body, tag);
          } catch {
            // Not this key (GCM's tag does not verify): the next one.
          }
        }
        throw new Error('a webhook secret (first format) opens under neither WEBHOOK_SECRET_KEY nor WEBHOOK_SECRET_KEY_PREVIOUS');
      }
      throw new Error('not a sealed webhook secret');
    },
    isStale(sealed) {
      return !sealed.startsWith(`v2.${current.kid}.`);
    },
  };
}

/**
 * Seals every stored secret that is not under the current key again under it, one row at a
 * time, each guarded by its old value (a rotation racing this leaves that row to the next run).
 * Rows that open under no configured key are counted, not touched.
 */
export async function resealSigningSecrets(db: DbOrTx, box: SecretBox): Promise<{ examined: number; resealed: number; unreadable: number }> {
  const rows = await db.select().from(webhookEndpointSecret);
  let resealed = 0;
  let unreadable = 0;
  for (const row of rows) {
    if (!box.isStale(row.sealed)) continue;
    let plain: string;
    try {
      plain = box.open(row.endpoint_id, row.sealed);
    } catch {
      unreadable += 1;
      continue;
    }
    const updated = await db
      .update(webhookEndpointSecret)
      .set({ sealed: box.seal(row.endpoint_id, plain) })
      .where(and(eq(webhookEndpointSecret.secret_id, row.secret_id), eq(webhookEndpointSecret.sealed, row.sealed)))
      .returning({ id: webhookEndpointSecret.secret_id });
    resealed += updated.length;
  }
  return { examined: rows.length, resealed, unreadable };
}

/** A new Standard Webhooks secret: "whsec_" + base64 of 32 random bytes. */
export const newSigningSecret = (): string => `whsec_${randomBytes(32).toString('base64')}`;

/** Adds a signing secret to the endpoint; returns the plain secret (to answer once). */
export async function addSigningSecret(tx: DbOrTx, box: SecretBox, endpointId: string): Promise<string> {
  const secret = newSigningSecret();
  await tx.insert(webhookEndpointSecret).values({ secret_id: randomUUID(), endpoint_id: endpointId, sealed: box.seal(endpointId, secret) });
  return secret;
}

/**
 * Rotation: every secret still signing expires after `overlapMs` (they sign beside the new one
 * until then), and a new one is added. Returns the new secret and when the old ones stop.
 */
export async function rotateSigningSecret(
  tx: DbOrTx,
  box: SecretBox,
  endpointId: string,
  overlapMs: number,
): Promise<{ secret: string; previousExpiresAt: Date }> {
  const until = sql`now() + make_interval(secs => ${overlapMs / 1000})`;
  await tx
    .update(webhookEndpointSecret)
    .set({ expires_at: sql`LEAST(COALESCE(${webhookEndpointSecret.expires_at}, 'infinity'), ${until})` })
    .where(
      and(eq(webhookEndpointSecret.endpoint_id, endpointId), or(isNull(webhookEndpointSecret.expires_at), gt(webhookEndpointSecret.expires_at, sql`now()`))),
    );
  const secret = await addSigningSecret(tx, box, endpointId);
  const { rows } = await tx.execute(sql`SELECT ${until} AS at`);
  return { secret, previousExpiresAt: new Date((rows[0] as { at: string | Date }).at) };
}

/** The plain secrets that sign for the endpoint now, newest first. */
export async function signingSecrets(db: DbOrTx, box: SecretBox, endpointId: string): Promise<string[]> {
  const rows = await db
    .select()
    .from(webhookEndpointSecret)
    .where(
      and(eq(webhookEndpointSecret.endpoint_id, endpointId), or(isNull(webhookEndpointSecret.expires_at), gt(webhookEndpointSecret.expires_at, sql`now()`))),
    )
    .orderBy(sql`${webhookEndpointSecret.created_at} DESC`);
  return rows.map((r) => box.open(endpointId, r.sealed));
}

/** Forgets every secret of a deleted endpoint. */
export async function dropSigningSecrets(tx: DbOrTx, endpointId: string): Promise<void> {
  await tx.delete(webhookEndpointSecret).where(eq(webhookEndpointSecret.endpoint_id, endpointId));
}
