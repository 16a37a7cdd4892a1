// HTTP ↔ webhook endpoints (docs/webhooks.md). Validation with zod (api/webhooks.schemas.ts);
// every error is a problem+json; another tenant's endpoint is 404 like an unknown one.
import type { Request, Response } from 'express';
import { acquireFence, FenceRejectedError } from '../db/fence';
import { listEndpoints } from '../db/webhooks';
import type { ApiContext } from './context';
import { tenantOf } from './auth';
import { problems, zodFieldErrors } from './problem';
import { presentDelivery, presentEndpoint } from './webhooks.present';
import {
  WebhookDeliveriesQuery,
  WebhookEndpointCreateBody,
  WebhookEndpointUpdateBody,
  webhookDeliveryIdParam,
  webhookEndpointIdParam,
} from './webhooks.schemas';
import {
  changeEndpoint,
  createEndpoint,
  endpointDeliveries,
  findEndpoint,
  redeliverToEndpoint,
  removeEndpoint,
  rotateEndpointSecret,
} from './webhooks.service';

function idParam(req: Request, name: 'id' | 'deliveryId'): string {
  const parsed = (name === 'id' ? webhookEndpointIdParam : webhookDeliveryIdParam).safeParse(req.params[name]);
  if (!parsed.success) throw problems.notFound(name === 'id' ? 'webhook endpoint' : 'webhook delivery');
  return parsed.data;
}

export function webhookHandlers(ctx: ApiContext) {
  const rules = ctx.settings.webhooks;
  /** Endpoint writes are admitted where cancels are (the active region, a mode that takes changes). */
  async function writeToken() {
    await ctx.admission.assertCanWrite();
    try {
      return (await acquireFence(ctx.db, ctx.settings.fenceScope, ctx.settings.region)).token;
    } catch (err) {
      if (err instanceof FenceRejectedError) throw problems.unavailable(err.message, 30);
      throw err;
    }
  }

  return {
    async create(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const body = WebhookEndpointCreateBody.safeParse(req.body ?? {});
      if (!body.success) throw problems.validation(zodFieldErrors(body.error));
      const token = await writeToken();
      const { endpoint, secret } = await createEndpoint(ctx.db, token, ctx.webhookSecrets, rules, tenantId, body.data);
      res
        .status(201)
        .location(`/v1/webhook-endpoints/${endpoint.endpoint_id}`)
        .json({ ...presentEndpoint(endpoint), secret });
    },

    async list(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      res.json({ endpoints: (await listEndpoints(ctx.db, tenantId)).map(presentEndpoint) });
    },

    async get(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      res.json(presentEndpoint(await findEndpoint(ctx.db, tenantId, idParam(req, 'id'))));
    },

    async update(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const id = idParam(req, 'id');
      const body = WebhookEndpointUpdateBody.safeParse(req.body ?? {});
      if (!body.success) throw problems.validation(zodFieldErrors(body.error));
      const token = await writeToken();
      res.json(presentEndpoint(await changeEndpoint(ctx.db, token, rules, tenantId, id, body.data)));
    },

    async remove(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const id = idParam(req, 'id');
      const token = await writeToken();
      await removeEndpoint(ctx.db, token, tenantId, id);
      res.status(204).end();
    },

    async rotateSecret(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const id = idParam(req, 'id');
      const token = await writeToken();
      const r = await rotateEndpointSecret(ctx.db, token, ctx.webhookSecrets, rules, tenantId, id);
      res.json({ id, secret: r.secret, previous_secret_expires_at: r.previousExpiresAt.toISOString() });
    },

    async deliveries(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const id = idParam(req, 'id');
      const q = WebhookDeliveriesQuery.safeParse(req.query);
      if (!q.success) throw problems.validation(zodFieldErrors(q.error, 'query'));
      const page = await endpointDeliveries(ctx.db, tenantId, id, q.data);
      res.json({ deliveries: page.rows.map(presentDelivery), next_cursor: page.next_cursor });
    },

    async redeliver(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const id = idParam(req, 'id');
      const deliveryId = idParam(req, 'deliveryId');
      const token = await writeToken();
      const row = await redeliverToEndpoint(ctx.db, token, tenantId, id, deliveryId);
      res.status(202).json({ id: row.delivery_id, state: row.state, next_attempt_at: row.next_attempt_at.toISOString() });
    },
  };
}
