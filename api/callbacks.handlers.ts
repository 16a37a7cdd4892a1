// POST /v1/callbacks/:provider/:token — verify the signature on the raw bytes, store the
// event in the inbox (deduped), answer 2xx, then wake the workflow (best effort). Callbacks
// carry data; the signal carries none.
//
// When the inbox cannot be written — Postgres is unreachable, or the mode makes facts read-only
// (READ_ONLY, MAINTENANCE) — the verified callback goes to the fallback spool (fsync'd) and is
// still acknowledged; the spool replayer feeds it through ingestCallback() later.
import type { Request, Response } from 'express';
import { eq } from 'drizzle-orm';
import { deserializeJob, recordProviderEvent, serializeJob } from '../db/inbox';
import { taskAttempt } from '../db/schema';
import { CallbackVerificationError, verifyProviderCallback, type ProviderJob } from '../providers/types';
import type { ApiContext } from './context';
import { isDatabaseUnavailable, problems } from './problem';
import { startSpoolReplayer, type SpooledCallback } from './spool';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A callback whose signature was checked, ready for the inbox. */
export interface CallbackEvent {
  readonly provider: string;
  readonly token: string;
  readonly job: ProviderJob;
  readonly providerEventId: string | null;
  readonly needsRefetch: boolean;
  readonly payload: unknown;
  readonly receivedRegion: string;
}

export type IngestOutcome = 'stored' | 'duplicate' | 'unknown_token';

/**
 * Writes a verified callback to the inbox (the one path for live and spooled callbacks) and
 * wakes its workflow when the row is new. Throws when Postgres is unreachable.
 */
export async function ingestCallback(ctx: ApiContext, cb: CallbackEvent): Promise<IngestOutcome> {
  const adapter = ctx.providers[cb.provider];
  if (!adapter) throw new Error(`no adapter for provider ${cb.provider}`);
  const [attempt] = UUID.test(cb.token)
    ? await ctx.db
        .select({ attemptId: taskAttempt.attempt_id, taskId: taskAttempt.task_id, provider: taskAttempt.provider, providerModel: taskAttempt.provider_model })
        .from(taskAttempt)
        .where(eq(taskAttempt.attempt_id, cb.token))
    : [];
  const known = attempt && attempt.provider === cb.provider;
  // An unsigned callback (Kling) only tells us which job to look at: read it from the
  // provider with our credentials rather than trusting the body.
  const job = cb.needsRefetch && known
    ? await adapter.getJob(cb.job.jobId, AbortSignal.timeout(10_000), { model: attempt.providerModel })
    : cb.job;
  const inboxId = await recordProviderEvent(ctx.db, {
    provider: cb.provider,
    job,
    // A re-fetched state has no event id of its own: dedupe it by its content.
    providerEventId: cb.needsRefetch ? null : cb.providerEventId,
    source: 'callback',
    attemptId: known ? attempt.attemptId : null,
    taskId: known ? attempt.taskId : null,
    receivedRegion: cb.receivedRegion,
    signatureValid: true,
    raw: cb.payload,
    ...(known ? {} : { processError: 'unknown correlation token' }),
  });
  if (known && inboxId) ctx.waker.wake(attempt.taskId);
  return !known ? 'unknown_token' : inboxId ? 'stored' : 'duplicate';
}

/** Replays one spooled callback into the inbox (used by the spool replayer). */
export async function replaySpooledCallback(ctx: ApiContext, rec: SpooledCallback): Promise<IngestOutcome> {
  const outcome = await ingestCallback(ctx, {
    provider: rec.provider,
    token: rec.token,
    job: deserializeJob(rec.job),
    providerEventId: rec.providerEventId,
    needsRefetch: rec.needsRefetch,
    payload: rec.payload,
    receivedRegion: rec.receivedRegion,
  });
  ctx.metrics.callbacksReceived.inc({ provider: rec.provider, outcome: `replayed_${outcome}` });
  return outcome;
}

export function callbackHandlers(ctx: ApiContext) {
  async function spool(res: Response, cb: CallbackEvent, why: SpooledCallback['why']) {
    await ctx.spool.append({
      provider: cb.provider,
      token: cb.token,
      receivedAt: new Date().toISOString(),
      receivedRegion: cb.receivedRegion,
      job: serializeJob(cb.job),
      providerEventId: cb.providerEventId,
      needsRefetch: cb.needsRefetch,
      payload: cb.payload,
      why,
    });
    ctx.metrics.callbacksReceived.inc({ provider: cb.provider, outcome: 'spooled' });
    ctx.logger.warn({ provider: cb.provider, why }, 'callback spooled; it is replayed into the inbox later');
    res.status(202).json({ received: true, spooled: true });
  }

  return {
    async receive(req: Request, res: Response) {
      const providerName = String(req.params['provider']);
      const token = String(req.params['token']);
      // Own keys only: `constructor`, `__proto__` and friends are not providers.
      const adapter = Object.hasOwn(ctx.providers, providerName) ? ctx.providers[providerName] : undefined;
      if (!adapter) throw problems.notFound('provider');
      // Our callback URLs carry the attempt id; anything else is no callback of ours (nothing is written).
      if (!UUID.test(token)) throw problems.notFound('callback token');
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
      const cb: CallbackEvent = {
        provider: providerName,
        token,
        job: verified.job,
        providerEventId: verified.providerEventId,
        needsRefetch: Boolean(verified.needsRefetch),
        payload: verified.payload,
        receivedRegion: ctx.settings.region,
      };
      const route = await ctx.admission.callbackRoute();
      if (route.route === 'spool') return spool(res, cb, route.why);
      let outcome: IngestOutcome;
      try {
        outcome = await ingestCallback(ctx, cb);
      } catch (err) {
        if (isDatabaseUnavailable(err)) return spool(res, cb, 'database-unavailable');
        throw err;
      }
      ctx.metrics.callbacksReceived.inc({ provider: providerName, outcome });
      res.status(200).json({ received: true, duplicate: outcome === 'duplicate' });
    },
  };
}

/** Starts the API's spool replayer: replays while the mode routes callbacks to the inbox. */
export function startCallbackReplayer(ctx: ApiContext, intervalMs: number) {
  return startSpoolReplayer({
    spool: ctx.spool,
    intervalMs,
    canReplay: async () => (await ctx.admission.callbackRoute()).route === 'inbox',
    ingest: async (rec) => {
      await replaySpooledCallback(ctx, rec);
    },
    logger: ctx.logger.child({ component: 'callback-spool' }),
  });
}
