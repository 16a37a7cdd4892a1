// POST /v1/callbacks/:provider/:token — verify the signature on the raw bytes, store the
// event in the inbox (deduped), answer 2xx, then wake the workflow (best effort). Callbacks
// carry data; the signal carries none.
//
// When the inbox cannot be written — Postgres is unreachable, or the mode makes facts read-only
// (READ_ONLY, MAINTENANCE) — the verified callback goes to the fallback spool (fsync'd) and is
// still acknowledged; the spool replayer feeds it through ingestCallback() later.
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { eq } from 'drizzle-orm';
import { deserializeJob, lockAttemptForIngest, recordAttemptCallback, recordProviderEvent, serializeJob } from '../db/inbox';
import { taskAttempt } from '../db/schema';
import { ProviderHttpError } from '../providers/provider-http';
import { CallbackVerificationError, verifyProviderCallback, type ProviderJob, type VerifiedCallback } from '../providers/types';
import type { ApiContext } from './context';
import { HttpProblem, isDatabaseUnavailable, problems, weakEtag, type FieldError } from './problem';
import { SpoolFullError, startSpoolReplayer, type SpooledCallback } from './spool';

/** A callback whose signature and URL token were checked, ready for the inbox. */
export interface CallbackEvent {
  readonly provider: string;
  /** The attempt the URL token stands for (spool records call it `token`). */
  readonly attemptId: string;
  readonly job: ProviderJob;
  readonly providerEventId: string | null;
  readonly needsRefetch: boolean;
  readonly payload: unknown;
  readonly receivedRegion: string;
}

/** 'unknown_token' and 'mismatch' store nothing (docs/security.md "Callbacks"). */
export type IngestOutcome = 'stored' | 'duplicate' | 'unknown_token' | 'mismatch';

/** A callback request as the route (api/app.ts) hands it to the handler. */
export interface CallbackRequest {
  readonly provider: string;
  readonly token: string;
  readonly headers: IncomingHttpHeaders;
  /** The body's bytes as received. */
  readonly body: Buffer;
  /** The peer's address (the rate limit's source). */
  readonly source: string;
}

/** A 2xx answer of POST /v1/callbacks (api/callbacks.routes.ts): status and prepared bytes. */
export interface CallbackAnswer {
  readonly status: 200 | 202;
  readonly body: Buffer;
  /** The weak ETag express gave these bodies before they were prepared (202 only, as before). */
  readonly etag?: string;
}

// The answers are constant: serialised once (no serialisation, no ETag hash per callback).
const ANSWER_STORED: CallbackAnswer = { status: 200, body: Buffer.from(JSON.stringify({ received: true, duplicate: false })) };
const ANSWER_DUPLICATE: CallbackAnswer = { status: 200, body: Buffer.from(JSON.stringify({ received: true, duplicate: true })) };
const SPOOLED_BODY = Buffer.from(JSON.stringify({ received: true, spooled: true }));
const ANSWER_SPOOLED: CallbackAnswer = { status: 202, body: SPOOLED_BODY, etag: weakEtag(SPOOLED_BODY) };

/** Writes a 2xx callback answer in one write: headers and body, with its length (no chunking). */
export function writeCallbackAnswer(res: ServerResponse, a: CallbackAnswer): void {
  res.statusCode = a.status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', a.body.length);
  if (a.etag) res.setHeader('ETag', a.etag);
  res.end(a.body);
}

/** Longest provider field we store; longer is a 400 naming the field (and never a provider read). */
const FIELD_LIMITS: readonly [string, (v: VerifiedCallback) => string | null, number][] = [
  ['job id', (v) => v.job.jobId, 256],
  ['event id', (v) => v.providerEventId, 256],
  ['status', (v) => v.job.rawStatus, 64],
  ['correlation token', (v) => v.job.correlationToken, 256],
  ['output url', (v) => v.job.outputUrl, 8192],
];

function oversizedFields(v: VerifiedCallback): FieldError[] {
  return FIELD_LIMITS.filter(([, get, max]) => (get(v)?.length ?? 0) > max).map(([field, , max]) => ({ field, message: `longer than ${max} characters` }));
}

/**
 * Writes a verified callback to the inbox (the one path for live and spooled callbacks) and
 * wakes its workflow when the row is new. Nothing is stored for an attempt we do not have, or
 * for a job that is not the attempt's: a job echoing another correlation token, a job id other
 * than the one already bound, or (unsigned callbacks) a re-fetched job whose external id is not
 * our attempt id. Throws when Postgres is unreachable.
 */
export async function ingestCallback(ctx: ApiContext, cb: CallbackEvent): Promise<IngestOutcome> {
  const adapter = ctx.providers[cb.provider];
  if (!adapter) throw new Error(`no adapter for provider ${cb.provider}`);
  // Wherever a provider echoes our token (Replicate's webhook URL, Kling's external_task_id), it
  // must be ours. The attempt row is the one the URL token names, so its id is cb.attemptId.
  const echoesUs = (job: ProviderJob) =>
    job.correlationToken === null || job.correlationToken === cb.attemptId || ctx.callbackTokens.isTokenOf(cb.attemptId, job.correlationToken);
  if (!cb.needsRefetch) {
    // A signed callback: the attempt's checks and the deduped insert in one statement.
    const r = await recordAttemptCallback(ctx.db.$client, {
      provider: cb.provider,
      attemptId: cb.attemptId,
      job: cb.job,
      providerEventId: cb.providerEventId,
      echoesAttempt: echoesUs(cb.job),
      receivedRegion: cb.receivedRegion,
      raw: cb.payload,
    });
    if (r.outcome === 'stored') ctx.waker.wake(r.taskId);
    return r.outcome;
  }
  const [attempt] = await ctx.db
    .select({
      attemptId: taskAttempt.attempt_id,
      taskId: taskAttempt.task_id,
      provider: taskAttempt.provider,
      providerModel: taskAttempt.provider_model,
      jobId: taskAttempt.provider_job_id,
    })
    .from(taskAttempt)
    .where(eq(taskAttempt.attempt_id, cb.attemptId));
  if (!attempt || attempt.provider !== cb.provider) return 'unknown_token';
  if (attempt.jobId && cb.job.jobId !== attempt.jobId) return 'mismatch';
  if (!echoesUs(cb.job)) return 'mismatch';
  // An unsigned callback (Kling) only tells us which job to look at: read it from the
  // provider with our credentials rather than trusting the body, and bind it only when the
  // provider says it carries our attempt id.
  const job = await adapter.getJob(cb.job.jobId, AbortSignal.timeout(10_000), { model: attempt.providerModel });
  // A provider that keeps our key on the job (tier lookup-by-key: Kling's external_task_id)
  // must show it: a job without it, or with another, is not this attempt's.
  const keepsOurKey = adapter.capabilities.unknownOutcomeTier === 'lookup-by-key';
  if (!echoesUs(job) || (keepsOurKey && job.correlationToken !== attempt.attemptId)) return 'mismatch';
  // Stored while the attempt row is held FOR SHARE, as the signed ingest does (db/inbox.ts): a
  // reader of the attempt's job evidence is serialised with it (docs/decisions/0063).
  const inboxId = await ctx.db.transaction(async (tx) => {
    await lockAttemptForIngest(tx, attempt.attemptId);
    return recordProviderEvent(tx, {
      provider: cb.provider,
      job,
      // A re-fetched state has no event id of its own: dedupe it by its content.
      providerEventId: null,
      source: 'callback',
      attemptId: attempt.attemptId,
      taskId: attempt.taskId,
      receivedRegion: cb.receivedRegion,
      signatureValid: true,
      raw: cb.payload,
    });
  });
  if (inboxId) ctx.waker.wake(attempt.taskId);
  return inboxId ? 'stored' : 'duplicate';
}

/** Replays one spooled callback into the inbox (used by the spool replayer). */
export async function replaySpooledCallback(ctx: ApiContext, rec: SpooledCallback): Promise<IngestOutcome> {
  const outcome = await ingestCallback(ctx, {
    provider: rec.provider,
    attemptId: rec.token,
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
  async function spool(cb: CallbackEvent, why: SpooledCallback['why']): Promise<CallbackAnswer> {
    await ctx.spool.append({
      provider: cb.provider,
      token: cb.attemptId,
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
    return ANSWER_SPOOLED;
  }

  async function verify(providerName: string, req: CallbackRequest): Promise<VerifiedCallback> {
    // Own keys only: `constructor`, `__proto__` and friends are not providers.
    const adapter = Object.hasOwn(ctx.providers, providerName) ? ctx.providers[providerName] : undefined;
    if (!adapter) throw problems.notFound('provider');
    try {
      return await verifyProviderCallback(adapter, req.body, req.headers);
    } catch (err) {
      if (!(err instanceof CallbackVerificationError)) throw err;
      ctx.metrics.callbacksReceived.inc({ provider: providerName, outcome: err.reason === 'keys-unavailable' ? 'keys_unavailable' : 'bad_signature' });
      ctx.logger.warn({ provider: providerName, reason: err.reason }, 'callback rejected');
      // We could not check the signature (the provider's keys are unreachable): ask for a redelivery.
      if (err.reason === 'keys-unavailable') throw problems.unavailable('signing keys unavailable; redeliver later', 30);
      throw problems.badSignature(err.reason);
    }
  }

  async function route(cb: CallbackEvent): Promise<CallbackAnswer> {
    const where = await ctx.admission.callbackRoute();
    try {
      if (where.route === 'spool') return await spool(cb, where.why);
      let outcome: IngestOutcome;
      try {
        outcome = await ingestCallback(ctx, cb);
      } catch (err) {
        if (isDatabaseUnavailable(err)) return await spool(cb, 'database-unavailable');
        // The authenticated re-fetch failed (the provider is down, or the job id is not one it knows).
        if (err instanceof ProviderHttpError) throw problems.unavailable('the provider could not confirm the job; redeliver later', 30);
        throw err;
      }
      ctx.metrics.callbacksReceived.inc({ provider: cb.provider, outcome });
      if (outcome === 'unknown_token') throw problems.notFound('callback token');
      if (outcome === 'mismatch')
        throw new HttpProblem(
          409,
          'callback-mismatch',
          'The callback is not about this attempt',
          "the job does not carry this callback URL's correlation token",
        );
      return outcome === 'duplicate' ? ANSWER_DUPLICATE : ANSWER_STORED;
    } catch (err) {
      if (err instanceof SpoolFullError) throw problems.unavailable('callbacks cannot be stored now; redeliver later', 60);
      throw err;
    }
  }

  return {
    /** The 2xx answer of a callback, or throws the HttpProblem (or other error) to answer instead. */
    async receive(req: CallbackRequest): Promise<CallbackAnswer> {
      const providerName = req.provider;
      // The token is checked first, in constant time and without I/O: a forged or guessed URL
      // costs nothing and reaches neither the database nor a provider.
      const attemptId = ctx.callbackTokens.attemptIdOf(req.token);
      if (!attemptId) {
        ctx.metrics.callbacksReceived.inc({ provider: 'unknown', outcome: 'bad_token' });
        throw problems.notFound('callback token');
      }
      await ctx.callbackLimiter.admit(req.source, attemptId);
      const verified = await verify(providerName, req);
      const oversized = oversizedFields(verified);
      if (oversized.length > 0) throw problems.validation(oversized);
      return await route({
        provider: providerName,
        attemptId,
        job: verified.job,
        providerEventId: verified.providerEventId,
        needsRefetch: Boolean(verified.needsRefetch),
        payload: verified.payload,
        receivedRegion: ctx.settings.region,
      });
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
