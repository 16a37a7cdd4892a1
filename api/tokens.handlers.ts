// POST /v1/tokens and DELETE /v1/tokens/:id (docs/decisions/0077-browser-tokens.md).
import type { Request, Response } from 'express';
import { and, eq, inArray, sql } from 'drizzle-orm';
import { generationTask } from '../db/schema';
import type { ApiContext } from './context';
import { tenantOf } from './auth';
import { revokeBrowserToken } from './browser-tokens';
import { problems, zodFieldErrors } from './problem';
import { tokenRoutes } from './tokens.routes';

export function tokenHandlers(ctx: ApiContext) {
  const { maxTtlSeconds } = ctx.settings.browserTokens;
  return {
    async mint(req: Request, res: Response) {
      const { tenantId, keyId } = tenantOf(req);
      const body = tokenRoutes.mint.request.body.schema.safeParse(req.body ?? {});
      if (!body.success) throw problems.validation(zodFieldErrors(body.error));
      const ttl = body.data.ttl_seconds ?? maxTtlSeconds;
      if (ttl > maxTtlSeconds) throw problems.validation([{ field: 'ttl_seconds', message: `at most ${maxTtlSeconds}` }]);
      const taskIds = body.data.task_ids ? [...new Set(body.data.task_ids.map((id) => id.toLowerCase()))] : null;
      if (taskIds) {
        const [row] = await ctx.db
          .select({ n: sql<number>`count(*)::int` })
          .from(generationTask)
          .where(and(eq(generationTask.tenant_id, tenantId), inArray(generationTask.task_id, taskIds)));
        // Another tenant's task is not found, like an unknown one.
        if ((row?.n ?? 0) !== taskIds.length) throw problems.notFound('task');
      }
      const { token, claims } = ctx.browserTokens.mint({ tenantId, keyId, ttlSeconds: ttl, taskIds, now: new Date() });
      res.status(201).json({ token, token_id: claims.jti, scope: 'read', task_ids: claims.tasks, expires_at: new Date(claims.exp * 1000).toISOString() });
    },

    async revoke(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const id = tokenRoutes.revoke.request.params.safeParse(req.params);
      if (!id.success) throw problems.notFound('token');
      // Kept as long as a token can live, then only clutter.
      await revokeBrowserToken(ctx.db, tenantId, id.data.id.toLowerCase(), new Date(Date.now() + maxTtlSeconds * 1000));
      res.status(204).end();
    },
  };
}
