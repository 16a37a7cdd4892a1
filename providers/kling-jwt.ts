// Kling's API token: a JWT (HS256) with iss = access key, exp and nbf, signed with the secret
// key. Tokens are reused until shortly before they expire, then regenerated.
import { createHmac } from 'node:crypto';

export interface KlingTokenOptions {
  readonly accessKey: string;
  readonly secretKey: string;
  /** Lifetime of one token, in seconds (default 1800, as in Kling's sample). */
  readonly ttlSeconds?: number;
  /** Regenerate when fewer than this many seconds remain (default 300). */
  readonly refreshMarginSeconds?: number;
  readonly now?: () => number;
}

const b64url = (v: string | Buffer): string => Buffer.from(v).toString('base64url');

/** Signs a Kling token valid from `nowS - 5` (clock skew) to `nowS + ttl`. */
export function signKlingJwt(accessKey: string, secretKey: string, nowS: number, ttlSeconds: number): string {
  const header = b64url(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const payload = b64url(JSON.stringify({ iss: accessKey, exp: nowS + ttlSeconds, nbf: nowS - 5 }));
  const sig = createHmac('sha256', secretKey).update(`${header}.${payload}`).digest('base64url');
  return `${header}.${payload}.${sig}`;
}

/** A cached token source; `token()` always returns one valid for at least the refresh margin. */
export function createKlingTokenSource(opts: KlingTokenOptions): { token(): string; current(): string | null } {
  const ttl = opts.ttlSeconds ?? 1800;
  const margin = Math.min(opts.refreshMarginSeconds ?? 300, Math.floor(ttl / 2));
  const now = opts.now ?? Date.now;
  let cached: { token: string; exp: number } | null = null;
  return {
    token() {
      const nowS = Math.floor(now() / 1000);
      if (!cached || cached.exp - nowS <= margin) {
        cached = { token: signKlingJwt(opts.accessKey, opts.secretKey, nowS, ttl), exp: nowS + ttl };
      }
      return cached.token;
    },
    current: () => cached?.token ?? null,
  };
}
