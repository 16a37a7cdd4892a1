// Browser tokens (docs/decisions/0077-browser-tokens.md): short-lived, read-only credentials a
// page may hold instead of the tenant's secret key. A token is signed (HMAC-SHA256 under
// BROWSER_TOKEN_SECRET) and carries its tenant, the key that minted it, its expiry and, if
// limited, the task ids it may read; its validity needs no stored row. Each use asks Postgres
// one question: is the token revoked, or the key that minted it.
import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import { and, eq, sql } from 'drizzle-orm';
import { z } from 'zod';
import type { DbOrTx } from '../db/client';
import { apiKey, browserTokenRevocation } from '../db/schema';

export const BROWSER_TOKEN_PREFIX = 'vbt_';

const claims = z.strictObject({
  v: z.literal(1),
  /** token id (revocation names it) */
  jti: z.uuid(),
  ten: z.uuid(),
  /** the minting key */
  kid: z.uuid(),
  /** unix seconds */
  exp: z.int(),
  /** null: every task of the tenant and its stream; else only these tasks and their streams */
  tasks: z.array(z.uuid()).nullable(),
});
export type BrowserTokenClaims = z.infer<typeof claims>;

export interface BrowserTokens {
  mint(a: { tenantId: string; keyId: string; ttlSeconds: number; taskIds: readonly string[] | null; now: Date }): { token: string; claims: BrowserTokenClaims };
  /** The token's claims when its signature holds and it has not expired; null otherwise. */
  verify(token: string, now: Date): BrowserTokenClaims | null;
}

export function createBrowserTokens(secret: string): BrowserTokens {
  const sign = (payload: string) => createHmac('sha256', secret).update(payload).digest();
  return {
    mint(a) {
      const c: BrowserTokenClaims = {
        v: 1,
        jti: randomUUID(),
        ten: a.tenantId,
        kid: a.keyId,
        exp: Math.floor(a.now.getTime() / 1000) + a.ttlSeconds,
        tasks: a.taskIds ? [...a.taskIds] : null,
      };
      const payload = Buffer.from(JSON.stringify(c)).toString('base64url');
      return { token: `${BROWSER_TOKEN_PREFIX}${payload}.${sign(payload).toString('base64url')}`, claims: c };
    },
    verify(token, now) {
      if (!token.startsWith(BROWSER_TOKEN_PREFIX)) return null;
      const [payload, mac, extra] = token.slice(BROWSER_TOKEN_PREFIX.length).split('.');
      if (!payload || !mac || extra !== undefined) return null;
      const expected = sign(payload);
      const given = Buffer.from(mac, 'base64url');
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
      let parsed;
      try {
        parsed = claims.safeParse(JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')));
      } catch {
        return null;
      }
      if (!parsed.success || parsed.data.exp * 1000 <= now.getTime()) return null;
      return parsed.data;
    },
  };
}

/** Whether a verified token may still be used: not revoked, and its minting key not revoked (nor past its grace). */
export async function browserTokenUsable(db: DbOrTx, c: BrowserTokenClaims): Promise<boolean> {
  const [row] = await db
    .select({
      keyValid: sql<boolean>`(${apiKey.revoked_at} IS NULL OR ${apiKey.revoked_at} > now())`,
      revoked: sql<boolean>`EXISTS (SELECT 1 FROM ${browserTokenRevocation} WHERE ${browserTokenRevocation.token_id} = ${c.jti}::uuid AND ${browserTokenRevocation.tenant_id} = ${c.ten}::uuid)`,
    })
    .from(apiKey)
    .where(and(eq(apiKey.key_id, c.kid), eq(apiKey.tenant_id, c.ten)));
  return Boolean(row && row.keyValid && !row.revoked);
}

/** Revokes a token of this tenant by id (repeating it is harmless). `expiresAt`: when the row may go (the longest a token lives). */
export async function revokeBrowserToken(db: DbOrTx, tenantId: string, tokenId: string, expiresAt: Date): Promise<void> {
  await db.insert(browserTokenRevocation).values({ token_id: tokenId, tenant_id: tenantId, expires_at: expiresAt }).onConflictDoNothing();
}

/**
 * The routes a browser token may call (paths under /v1): reads of tasks and their event streams.
 * A token limited to tasks reads only those (another id: 404) and neither the list nor the
 * tenant's stream. Anything else: null (the request is refused 401).
 */
export function tokenRouteAccess(method: string, path: string, c: BrowserTokenClaims): 'allowed' | 'not-found' | null {
  if (method !== 'GET' && method !== 'HEAD') return null;
  const task = /^\/tasks\/([^/]+)(\/events)?$/.exec(path);
  if (task) return c.tasks === null || c.tasks.includes(task[1]!.toLowerCase()) ? 'allowed' : 'not-found';
  if (path === '/tasks' || path === '/events') return c.tasks === null ? 'allowed' : null;
  return null;
}
