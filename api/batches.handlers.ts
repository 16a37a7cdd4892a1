// HTTP ↔ the batch create (api/batches.service.ts).
import type { Request, Response } from 'express';
import type { ApiContext } from './context';
import { tenantOf } from './auth';
import { batchRoutes } from './batches.routes';
import { runBatch } from './batches.service';
import { problems, zodFieldErrors } from './problem';

const OUTCOME: Record<number, string> = {
  202: 'created',
  400: 'invalid',
  402: 'insufficient_credits',
  422: 'conflict',
  429: 'rate_limited',
  503: 'unavailable',
};

export function batchHandlers(ctx: ApiContext) {
  return {
    async create(req: Request, res: Response) {
      const { tenantId, keyId } = tenantOf(req);
      const rawKey = req.get('idempotency-key');
      if (rawKey === undefined) throw problems.missingHeader('Idempotency-Key');
      const key = batchRoutes.create.request.headers.shape['Idempotency-Key'].safeParse(rawKey);
      if (!key.success) throw problems.validation(zodFieldErrors(key.error, 'header:Idempotency-Key'));
      const fence = await ctx.admission.assertCanCreate();
      const token = { scope: ctx.settings.fenceScope, region: ctx.settings.region, epoch: fence.epoch };
      const outcome = await runBatch({ db: ctx.db, logger: ctx.logger, takeCreate: (t) => ctx.rateLimiter.take('create', t) }, token, {
        tenantId,
        idempotencyKey: key.data,
        body: req.body,
        chunkSize: ctx.settings.batch.chunkSize,
        defaultDeadlineSeconds: ctx.settings.defaultDeadlineSeconds,
        webhook: { allowPrivate: ctx.settings.webhooks.allowPrivate, maxOrigins: ctx.settings.webhooks.maxTaskUrlOrigins },
        apiKeyId: keyId,
        heldRoutes: await ctx.admission.heldRoutes(),
      });
      if (!outcome.replayed) {
        const created = new Set(outcome.created.map((c) => c.task.task_id));
        for (const item of outcome.answer.items) {
          const kind = item.status === 202 ? (item.task_id && created.has(item.task_id) ? 'created' : 'replayed') : (OUTCOME[item.status] ?? 'rejected');
          ctx.metrics.tasksCreated.inc({ outcome: kind });
        }
      }
      // No fast path: a batch's tasks are started by the outbox relay (a thousand starts never
      // hold the answer, nor flood Temporal from one request).
      if (outcome.replayed) res.setHeader('Idempotent-Replayed', 'true');
      if (outcome.retryAfterSeconds > 0) res.setHeader('Retry-After', String(outcome.retryAfterSeconds));
      res.status(200).json(outcome.answer);
    },
  };
}
