// POST /v1/callbacks/:provider/:token — verify the signature on the raw bytes, store the
// event in the inbox (deduped), answer 2xx, then wake the workflow (best effort). Callbacks
// carry data; the signal carries none.
import type { Request, Response } from 'express';
import { eq } from 'drizzle-orm';
import { recordProviderEvent } from '../db/inbox';
import { taskAttempt } from '../db/schema';
import { CallbackVerificationError, verifyProviderCallback } from '../providers/types';
import type { ApiContext } from './context';
import { problems } from './problem';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function callbackHandlers(ctx: ApiContext) {
  return {
    async receive(req: Request, res: Response) {
      const providerName = String(req.params['provider']);
      const token = String(req.params['token']);
      const adapter = ctx.providers[providerName];
      if (!adapter) throw problems.notFound('provider');
      const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      let verified;
      try {
        verified = await verifyProviderCallback(adapter, raw, req.headers);
      } catch (err) {
        if (err instanceof CallbackVerificationError) {
          ctx.metrics.callbacksReceived.inc({ provider: providerName, outcome: err.reason === 'keys-unavailable' ? 'keys_unavailable' : 'bad_signature' });
          ctx.logger.warn({ provider: providerName, reason: err.reason }, 'callback rejected');
          // We could not check the signature (the provider's keys are unreachable): ask for a redelivery.
          if (err.reason === 'keys-unavailable') throw problems.unavailable('signing keys unavailable; redeliver later', 30);
          throw problems.badSignature(err.reason);
        }
        throw err;
      }
      const [attempt] = UUID.test(token)
        ? await ctx.db
            .select({ attemptId: taskAttempt.attempt_id, taskId: taskAttempt.task_id, provider: taskAttempt.provider, providerModel: taskAttempt.provider_model })
            .from(taskAttempt)
            .where(eq(taskAttempt.attempt_id, token))
        : [];
      const known = attempt && attempt.provider === providerName;
      // An unsigned callback (Kling) only tells us which job to look at: read it from the
      // provider with our credentials rather than trusting the body.
      const job = verified.needsRefetch && known
        ? await adapter.getJob(verified.job.jobId, AbortSignal.timeout(10_000), { model: attempt.providerModel })
        : verified.job;
      const inboxId = await recordProviderEvent(ctx.db, {
        provider: providerName,
        job,
        // A re-fetched state has no event id of its own: dedupe it by its content.
        providerEventId: verified.needsRefetch ? null : verified.providerEventId,
        source: 'callback',
        attemptId: known ? attempt.attemptId : null,
        taskId: known ? attempt.taskId : null,
        receivedRegion: ctx.settings.region,
        signatureValid: true,
        raw: verified.payload,
        ...(known ? {} : { processError: 'unknown correlation token' }),
      });
      const outcome = !known ? 'unknown_token' : inboxId ? 'stored' : 'duplicate';
      ctx.metrics.callbacksReceived.inc({ provider: providerName, outcome });
      res.status(200).json({ received: true, duplicate: inboxId === null });
      if (known && inboxId) {
        ctx.facade.wakeTask(attempt.taskId).catch(() => undefined);
      }
    },
  };
}
