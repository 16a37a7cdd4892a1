// HTTP ↔ the catalog and quotes (api/models.routes.ts, api/models.service.ts).
import type { Request, Response } from 'express';
import type { ApiContext } from './context';
import { tenantOf } from './auth';
import { createRouteAvailability, listModels, quoteCreate } from './models.service';
import { modelRoutes } from './models.routes';
import { problems, zodFieldErrors } from './problem';

export function modelHandlers(ctx: ApiContext) {
  const availability = createRouteAvailability({ db: ctx.db, admission: ctx.admission, providers: ctx.providers });
  return {
    async list(_req: Request, res: Response) {
      res.json(await listModels(availability));
    },
    async quote(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const body = modelRoutes.quote.request.body.schema.safeParse(req.body ?? {});
      if (!body.success) throw problems.validation(zodFieldErrors(body.error));
      // Refused exactly when a create would be (the mode, the region, the outbox backlog): 503.
      await ctx.admission.assertCanCreate();
      const quote = await quoteCreate(ctx.db, availability, {
        tenantId,
        body: body.data,
        ttlSeconds: ctx.settings.quoteTtlSeconds,
        webhookAllowPrivate: ctx.settings.webhooks.allowPrivate,
        webhookMaxOrigins: ctx.settings.webhooks.maxTaskUrlOrigins,
      });
      res.json(quote);
    },
  };
}
