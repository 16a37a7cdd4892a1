// Bearer API keys. Every read and write below this middleware is scoped to req.tenant. Who a key
// is, and what a lookup may cost, is api/api-keys.ts's.
import type { NextFunction, Request, Response } from 'express';
import type { ApiKeyAuth } from './api-keys';
import { problems } from './problem';

declare module 'express-serve-static-core' {
  interface Request {
    /** The tenant of the request's API key, the key's id, and when its revocation takes effect (a rotation's grace), if it has one. */
    tenant?: { tenantId: string; name: string; keyId: string; revokedAt: Date | null };
  }
}

export function requireTenant(keys: ApiKeyAuth) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    const header = req.get('authorization') ?? '';
    const match = /^Bearer\s+(\S{16,512})$/i.exec(header);
    if (!match) return next(problems.unauthorized());
    const tenant = await keys.authenticate(match[1]!, req.ip ?? req.socket.remoteAddress ?? 'unknown');
    if (!tenant) return next(problems.unauthorized());
    req.tenant = tenant;
    next();
  };
}

export function tenantOf(req: Request): { tenantId: string; name: string; keyId: string; revokedAt: Date | null } {
  if (!req.tenant) throw problems.unauthorized();
  return req.tenant;
}
