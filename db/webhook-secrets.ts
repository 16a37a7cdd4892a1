// An endpoint's signing secrets (docs/decisions/0018-tenant-webhooks.md). Signing needs the
// secret itself, so it cannot be hashed like an API key: it is sealed with AES-256-GCM under a
// key derived from WEBHOOK_SECRET_KEY, the endpoint id bound in as associated data (a sealed
// secret copied to another endpoint's row does not open). The key rotates (createSecretBox). The plain secret leaves this module
// only to sign, and to be answered once to the tenant (create, rotate).
import { createCipheriv, createDecipheriv, createHash, randomBytes, randomUUID } from 'node:crypto';
import { and, desc, eq, gt, isNull, ne, or, sql } from 'drizzle-orm';
import type { DbOrTx } from './client';
import { webhookEndpointSecret } from './schema';

export interface SecretBox {
  seal(endpointId: string, secret: string): string;
  open(endpointId: string, sealed: string): string;
  /** Whether `sealed` does not open under the current key (a retired one sealed it): `ops webhook reseal` seals it again. */
  isStale(endpointId: string, sealed: string): boolean;
}

const TAG_BYTES = 16;

/** At most this many secrets sign for an endpoint: the current one, and the previous one in its overlap. */
const MAX_SIGNING_SECRETS = 2;

const unexpired = or(isNull(webhookEndpointSecret.expires_at), gt(webhookEndpointSecret.expires_at, sql`now()`));
/** The current secret first (no expiry), then the newest. */
const newestFirst = [sql`${webhookEndpointSecret.expires_at} IS NULL DESC`, desc(webhookEndpointSecret.created_at), desc(webhookEndpointSecret.secret_id)];

/**
 * WEBHOOK_SECRET_KEY seals; each of WEBHOOK_SECRET_KEY_PREVIOUS still opens, so the key can be
 * rotated (docs/webhooks.md "Rotating the sealing key"). A sealed value does not name its key:
 * it is tried under the current key, then each retired one, and GCM's tag (always the full 16
 * bytes: a shorter tag is refused, not accepted) tells which opens it. The format stays the one
 * every deployed version reads (`v1.<iv>.<body>.<tag>`), so a rolling deploy or a rollback never
 * meets a value it cannot parse.
 */
export function createSecretBox(keyMaterial: string, previous: readonly string[] = []): SecretBox {
  const derive = (material: string) => createHash('sha256').update(`vidorch-webhook-secret:${material}`).digest();
  const current = derive(keyMaterial);
  const retired = previous.filter((p) => p !== keyMaterial).map(derive);
  const parse = (sealed: string) => {
    const [version, iv, body, tag, ...rest] = sealed.split('.');
    if (version !== 'v1' || !iv || !body || !tag || rest.length > 0) throw new Error('not a sealed webhook secret');
    const tagBytes = Buffer.from(tag, 'base64url');
    if (tagBytes.length !== TAG_BYTES) throw new Error('not a sealed webhook secret');
    return { iv: Buffer.from(iv, 'base64url'), body: Buffer.from(body, 'base64url'), tag: tagBytes };
  };
  const openWith = (key: Buffer, endpointId: string, p: ReturnType<typeof parse>): string | null => {
    try {
      const decipher = createDecipheriv('aes-256-gcm', key, p.iv, { authTagLength: TAG_BYTES });
      decipher.setAAD(Buffer.from(endpointId));
      decipher.setAuthTag(p.tag);
      return Buffer.concat([decipher.update(p.body), decipher.final()]).toString('utf8');
    } catch {
      return null; // not this key (the tag does not verify), or not this endpoint's value
    }
  };
  return {
    seal(endpointId, secret) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', current, iv, { authTagLength: TAG_BYTES });
      cipher.setAAD(Buffer.from(endpointId));
      const body = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
      return `v1.${iv.toString('base64url')}.${body.toString('base64url')}.${cipher.getAuthTag().toString('base64url')}`;
    },
    open(endpointId, sealed) {
      const p = parse(sealed);
      for (const key of [current, ...retired]) {
        const plain = openWith(key, endpointId, p);
        if (plain !== null) return plain;
      }
      throw new Error("a webhook secret opens under neither WEBHOOK_SECRET_KEY nor WEBHOOK_SECRET_KEY_PREVIOUS (or it is not this endpoint's)");
    },
    isStale(endpointId, sealed) {
      try {
        return openWith(current, endpointId, parse(sealed)) === null;
      } catch {
        return true; // not a sealed value at all: open() says so
      }
    },
  };
}

/**
 * Seals every signing secret still in use (not expired) that does not open under the current key
 * again under it, one row at a time, each guarded by its old value (a rotation racing this leaves
 * that row to the next run: `raced`). Rows that open under no configured key are named by secret
 * and endpoint id, and left as they are.
 */
export async function resealSigningSecrets(
  db: DbOrTx,
  box: SecretBox,
): Promise<{ examined: number; resealed: number; raced: number; unreadable: Array<{ secret_id: string; endpoint_id: string }> }> {
  const rows = await db.select().from(webhookEndpointSecret).where(unexpired);
  let resealed = 0;
  let raced = 0;
  const unreadable: Array<{ secret_id: string; endpoint_id: string }> = [];
  for (const row of rows) {
    if (!box.isStale(row.endpoint_id, row.sealed)) continue;
    let plain: string;
    try {
      plain = box.open(row.endpoint_id, row.sealed);
    } catch {
      unreadable.push({ secret_id: row.secret_id, endpoint_id: row.endpoint_id });
      continue;
    }
    const updated = await db
      .update(webhookEndpointSecret)
      .set({ sealed: box.seal(row.endpoint_id, plain) })
      .where(and(eq(webhookEndpointSecret.secret_id, row.secret_id), eq(webhookEndpointSecret.sealed, row.sealed)))
      .returning({ id: webhookEndpointSecret.secret_id });
    if (updated.length > 0) resealed += 1;
    else raced += 1;
  }
  return { examined: rows.length, resealed, raced, unreadable };
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
 * Rotation, under the endpoint's lock (db/webhooks.ts lockEndpoint): the current secret becomes
 * the previous one, signing beside the new one until `overlapMs` from now; every other secret of
 * the endpoint is deleted (the previous one of a rotation still in its overlap, and the expired
 * ones). So an endpoint holds at most MAX_SIGNING_SECRETS, and a rotation writes three rows at
 * most however often it is called. Returns the new secret and when the previous one stops.
 */
export async function rotateSigningSecret(
  tx: DbOrTx,
  box: SecretBox,
  endpointId: string,
  overlapMs: number,
): Promise<{ secret: string; previousExpiresAt: Date }> {
  const until = sql`now() + make_interval(secs => ${overlapMs / 1000})`;
  const [current] = await tx
    .select({ id: webhookEndpointSecret.secret_id })
    .from(webhookEndpointSecret)
    .where(and(eq(webhookEndpointSecret.endpoint_id, endpointId), unexpired))
    .orderBy(...newestFirst)
    .limit(1);
  await tx
    .delete(webhookEndpointSecret)
    .where(and(eq(webhookEndpointSecret.endpoint_id, endpointId), current ? ne(webhookEndpointSecret.secret_id, current.id) : undefined));
  if (current) {
    await tx
      .update(webhookEndpointSecret)
      .set({ expires_at: sql`LEAST(COALESCE(${webhookEndpointSecret.expires_at}, 'infinity'), ${until})` })
      .where(eq(webhookEndpointSecret.secret_id, current.id));
  }
  const secret = await addSigningSecret(tx, box, endpointId);
  const { rows } = await tx.execute(sql`SELECT ${until} AS at`);
  return { secret, previousExpiresAt: new Date((rows[0] as { at: string | Date }).at) };
}

/**
 * The plain secrets that sign for the endpoint now (at most MAX_SIGNING_SECRETS: the current one
 * first, then the previous one in its overlap), and the ids of those that open under no
 * configured key. Those are left out: the tenant's receiver accepts any one signature, so the ones
 * that open still sign (during a rotation's overlap, the new secret). Throws when secrets are in
 * use and none opens: nothing could sign (docs/webhooks.md "Rotating the sealing key").
 */
export async function signingSecrets(db: DbOrTx, box: SecretBox, endpointId: string): Promise<{ secrets: string[]; unopenable: string[] }> {
  const rows = await db
    .select()
    .from(webhookEndpointSecret)
    .where(and(eq(webhookEndpointSecret.endpoint_id, endpointId), unexpired))
    .orderBy(...newestFirst)
    .limit(MAX_SIGNING_SECRETS);
  const secrets: string[] = [];
  const unopenable: string[] = [];
  let failure: unknown = null;
  for (const r of rows) {
    try {
      secrets.push(box.open(endpointId, r.sealed));
    } catch (err) {
      unopenable.push(r.secret_id);
      failure ??= err;
    }
  }
  if (rows.length > 0 && secrets.length === 0) throw failure instanceof Error ? failure : new Error('no webhook secret of this endpoint opens');
  return { secrets, unopenable };
}

/** Forgets every secret of a deleted endpoint. */
export async function dropSigningSecrets(tx: DbOrTx, endpointId: string): Promise<void> {
  await tx.delete(webhookEndpointSecret).where(eq(webhookEndpointSecret.endpoint_id, endpointId));
}
