// Bearer credentials. Every read and write below this middleware is scoped to req.tenant. Who an
// API key is, and what a lookup may cost, is api/api-keys.ts's; a browser token (`vbt_…`,
// api/browser-tokens.ts) is the tenant's too, for the read routes it may call and nothing else.
import type { NextFunction, Request, Response } from 'express';
import type { Db } from '../db/client';
import type { ApiKeyAuth } from './api-keys';
import { BROWSER_TOKEN_PREFIX, browserTokenUsable, tokenRouteAccess, type BrowserTokens } from './browser-tokens';
import { HttpProblem, problems } from './problem';

declare module 'express-serve-static-core' {
  interface Request {
    /**
     * The tenant of the request's credential, the API key's id (a browser token's: the key that
     * minted it), and when its revocation takes effect (a rotation's grace; a token's expiry).
     */
    tenant?: { tenantId: string; name: string; keyId: string; revokedAt: Date | null };
    /** Set when the credential is a browser token. */
    browserToken?: { tokenId: string };
  }
}

export interface Credentials {
  readonly keys: ApiKeyAuth;
  readonly db: Db;
  readonly browserTokens: BrowserTokens;
}

const tokenRefused = (what: string) =>
  new HttpProblem(401, 'unauthorized', 'This credential may not make this request', what, [], { 'WWW-Authenticate': 'Bearer' });

export function requireTenant(c: Credentials) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    const header = req.get('authorization') ?? '';
    const match = /^Bearer\s+(\S{16,2048})$/i.exec(header);
    if (!match) return next(problems.unauthorized());
    const credential = match[1]!;
    if (credential.startsWith(BROWSER_TOKEN_PREFIX)) {
      const claims = c.browserTokens.verify(credential, new Date());
      if (!claims || !(await browserTokenUsable(c.db, claims))) return next(problems.unauthorized());
      const access = tokenRouteAccess(req.method, req.path, claims);
      if (access === null) return next(tokenRefused(`a browser token may not call ${req.method} /v1${req.path}`));
      if (access === 'not-found') return next(problems.notFound('task'));
      req.tenant = { tenantId: claims.ten, name: 'browser-token', keyId: claims.kid, revokedAt: new Date(claims.exp * 1000) };
      req.browserToken = { tokenId: claims.jti };
      return next();
    }
    if (credential.length > 512) return next(problems.unauthorized());
    const tenant = await c.keys.authenticate(credential, req.ip ?? req.socket.remoteAddress ?? 'unknown');
    if (!tenant) return next(problems.unauthorized());
    req.tenant = tenant;
    next();
  };
}

export function tenantOf(req: Request): { tenantId: string; name: string; keyId: string; revokedAt: Date | null } {
  if (!req.tenant) throw problems.unauthorized();
  return req.tenant;
}

/** For the routes only the secret key may call (minting and revoking tokens). */
export function requireSecretKey(req: Request, _res: Response, next: NextFunction) {
  next(req.browserToken ? tokenRefused('only the secret API key may call this') : undefined);
}

/**
 * CORS for the routes a browser token may call, for CORS_ALLOWED_ORIGINS only: an allowed
 * origin's preflight is answered with what it may send; any other origin gets no CORS headers,
 * so its page cannot read the answer.
 */
export function corsForTokenRoutes(origins: ReadonlySet<string>) {
  return (req: Request, res: Response, next: NextFunction) => {
    const origin = req.get('origin');
    const tokenRoute = /^\/(tasks|events|tasks\/[^/]+|tasks\/[^/]+\/events)$/.test(req.path);
    if (!tokenRoute) return next();
    res.vary('Origin');
    const allowed = origin !== undefined && origins.has(origin);
    if (allowed) {
      res.setHeader('Access-Control-Allow-Origin', origin);
      res.setHeader('Access-Control-Expose-Headers', 'RateLimit-Remaining, Retry-After');
    }
    if (req.method !== 'OPTIONS') return next();
    if (allowed) {
      res.setHeader('Access-Control-Allow-Methods', 'GET');
      res.setHeader('Access-Control-Allow-Headers', 'Authorization, Last-Event-ID');
      res.setHeader('Access-Control-Max-Age', '600');
    }
    res.status(204).end();
  };
}
