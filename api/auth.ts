// Bearer API keys. Every read and write below this middleware is scoped to req.tenant.
import type { NextFunction, Request, Response } from 'express';
import type { Db } from '../db/client';
import { findTenantByApiKey } from '../db/tenants';
import { problems } from './problem';

declare module 'express-serve-static-core' {
  interface Request {
    tenant?: { tenantId: string; name: string };
  }
}

export function requireTenant(db: Db) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    const header = req.get('authorization') ?? '';
    const match = /^Bearer\s+(\S{16,512})$/i.exec(header);
    if (!match) return next(problems.unauthorized());
    const tenant = await findTenantByApiKey(db, match[1]!);
    if (!tenant) return next(problems.unauthorized());
    req.tenant = tenant;
    next();
  };
}

export function tenantOf(req: Request): { tenantId: string; name: string } {
  if (!req.tenant) throw problems.unauthorized();
  return req.tenant;
}
