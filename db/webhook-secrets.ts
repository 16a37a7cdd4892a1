// An endpoint's signing secrets (docs/decisions/0018-tenant-webhooks.md). Signing needs the
// secret itself, so it cannot be hashed like an API key: it is sealed with AES-256-GCM under a
// key derived from WEBHOOK_SECRET_KEY, the endpoint id bound in as associated data (a sealed
// secret copied to another endpoint's row does not open). The plain secret leaves this module
// only to sign, and to be answered once to the tenant (create, rotate).
import { createCipheriv, createDecipheriv, createHash, randomBytes, randomUUID } from 'node:crypto';
import { and, eq, gt, isNull, or, sql } from 'drizzle-orm';
import type { DbOrTx } from './client';
import { webhookEndpointSecret } from './schema';

export interface SecretBox {
  seal(endpointId: string, secret: string): string;
  open(endpointId: string, sealed: string): string;
}

export function createSecretBox(keyMaterial: string): SecretBox {
  const key = createHash('sha256').update(`vidorch-webhook-secret:${keyMaterial}`).digest();
  return {
    seal(endpointId, secret) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(Buffer.from(endpointId));
      const body = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
      return `v1.${iv.toString('base64url')}.${body.toString('base64url')}.${cipher.getAuthTag().toString('base64url')}`;
    },
    open(endpointId, sealed) {
      const [version, iv, body, tag] = sealed.split('.');
      if (version !== 'v1' || !iv || !body || !tag) throw new Error('not a sealed webhook secret');
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
      decipher.setAAD(Buffer.from(endpointId));
      decipher.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
    },
  };
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
