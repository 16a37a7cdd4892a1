// ProviderAdapter for fal's queue API (https://docs.fal.ai/model-endpoints/queue):
// POST {base}/{model_id}?fal_webhook=… → request_id; GET {base}/{app_id}/requests/{id}/status;
// GET {base}/{app_id}/requests/{id} (result); PUT …/cancel. Auth `Authorization: Key <key>`.
// fal has no client idempotency key and no listing of our requests: our attempt id rides as the
// last path segment of the webhook URL, so a late completion webhook still finds its attempt, but
// nothing can be looked up actively (tier 'none'). Status and cancel are addressed by the app id
// (the model id without its endpoint path, as fal's answers name it), so getJob/cancel need
// `ref.model`; the result is read at the `response_url` fal's status answer names. The status
// answer only says where a request is; how it ended comes from the result fetch, which fal answers
// only for a while after completion (capabilities.resultRetentionMs paces the polls inside it).
// Every submit carries fal's time-to-start limit (X-Fal-Request-Timeout) up to the task's deadline.
import { z } from 'zod';
import { providerProgress } from '../domain/progress';
import type { ProviderJobState } from '../domain/states';
import { FAL_HEADERS, FalJwks, falSignedMessage, verifyFalSignature } from './fal-webhooks';
import { createProviderHttp, headerValue, numericMetrics, ProviderHttpError, type HttpAnswer } from './provider-http';
import './result-retention';
import { callbackTokenOf } from './callback-token';
import {
  CallbackVerificationError,
  type JobRef,
  NO_LOOKUP,
  type ProviderAdapter,
  type ProviderCapabilities,
  type ProviderJob,
  type SubmitOutcome,
  type SubmitRequest,
  type VerifiedCallback,
} from './types';

export interface FalAdapterOptions {
  /** e.g. https://queue.fal.run or http://127.0.0.1:7081/fal */
  readonly baseUrl: string;
  /** fal API key ("key_id:key_secret"). */
  readonly apiKey: string;
  /** e.g. https://rest.alpha.fal.ai/.well-known/jwks.json */
  readonly jwksUrl: string;
  /** Timeout of one HTTP call. */
  readonly timeoutMs: number;
  /**
   * Our fal account's user id. fal signs every customer's webhooks with the same keys (one
   * JWKS), so a valid signature only proves "from fal"; the signed X-Fal-Webhook-User-Id header
   * says for whom. Webhooks for any other user are refused.
   */
  readonly expectedUserId: string;
  /** JWKS cache TTL (default 24 h) and the minimum interval between refetches on failure (default 60 s). */
  readonly jwksTtlMs?: number;
  readonly jwksMinRefetchIntervalMs?: number;
  /** Accepted clock skew of the webhook timestamp, in seconds (default 300). */
  readonly toleranceSeconds?: number;
  /** Account limits, when they differ from the defaults in FAL_CAPABILITIES. */
  readonly limits?: { readonly requestsPerSecond?: number; readonly maxConcurrency?: number };
  /**
   * The start limit of a submit that carries no deadline (default: the maximum run time, 6 h,
   * past which the task parks anyway: a request not started by then is dropped by fal, unbilled).
   */
  readonly startTimeoutMs?: number;
  readonly fetch?: typeof fetch;
  readonly now?: () => number;
}

/** "If the result is 10 KB or larger, fal keeps it for 6 minutes" (else 1 hour). */
export const FAL_LARGE_RESULT_RETENTION_MS = 6 * 60_000;
/**
 * What a result fetch of a COMPLETED request answered 404 means: fal no longer keeps it (or not
 * yet: the read is retried, counted like any gone read, and parks the task in MANUAL_REVIEW at
 * PROVIDER_READ_FAILURE_LIMIT, docs/decisions/0014). Never a FAILED on first sight.
 */
export const FAL_RESULT_GONE = 'the result answered 404: fal no longer keeps it (kept 1 h after completion, 6 min at 10 KB or more)';

/**
 * fal's time-to-start limit (https://docs.fal.ai/documentation/model-apis/common-parameters,
 * "X-Fal-Request-Timeout (start_timeout)"): seconds from the submit, covering queue wait, runner
 * acquisition and fal's own retries; once a runner starts the request runs to its end. Past it
 * the request ends with a 504 and `X-Fal-Request-Timeout-Type: user`, unbilled.
 */
export const FAL_START_TIMEOUT_HEADER = 'x-fal-request-timeout';
/** fal's answer header saying the 504 is the start limit we set (not an infrastructure timeout). */
const FAL_TIMEOUT_TYPE_HEADER = 'x-fal-request-timeout-type';
/** fal takes more than 0.1 s and its client more than 1 s; we never send less than this. */
const MIN_START_TIMEOUT_S = 2;

/**
 * The X-Fal-Request-Timeout of a submit, in whole seconds: the time left to the task's deadline
 * (no provider work of the task starts after it, docs/timeouts.md), else `fallbackMs`.
 */
export function falStartTimeoutSeconds(deadlineAt: Date | null | undefined, nowMs: number, fallbackMs: number): number {
  const ms = deadlineAt ? deadlineAt.getTime() - nowMs : fallbackMs;
  return Math.max(MIN_START_TIMEOUT_S, Math.floor(ms / 1000));
}

export const FAL_CAPABILITIES: ProviderCapabilities = {
  name: 'fal',
  // No idempotency key, no listing by our token: an unknown submit waits for the webhook
  // (which carries the token in its URL) until the deadline, then goes to review.
  unknownOutcomeTier: 'none',
  // No key and no listing of our jobs: nothing can be looked up, so nothing can be proved.
  absenceProof: 'none',
  lookupFields: [],
  callbackSignature: 'ed25519-jwks',
  // fal bills completed work; failed and cancelled-in-queue requests are not billed.
  chargeableStates: ['succeeded'],
  outputUrlTtlMs: 24 * 3_600_000,
  canRefreshOutputUrl: false,
  listingWindowMs: 0,
  // A result is kept 1 h after completion, 6 min when it is 10 KB or more: plan for the shorter.
  resultRetentionMs: FAL_LARGE_RESULT_RETENTION_MS,
  // No request rate is documented (fal limits concurrency and queues the excess): an assumption, set per account.
  requestsPerSecond: 10,
  maxConcurrency: 10,
  pollOnly: false,
  queuesExcessWork: true,
  canCancel: true,
  // Not documented: a generous bound on queue plus run time (config PROVIDER_MAX_RUN_MS overrides).
  maxRunMs: 6 * 3_600_000,
};

const FAL_STATUS: Record<string, ProviderJobState> = {
  IN_QUEUE: 'queued',
  IN_PROGRESS: 'running',
};

const submitAnswerSchema = z.looseObject({
  request_id: z.string().min(1),
  status_url: z.string().optional(),
  response_url: z.string().optional(),
  cancel_url: z.string().optional(),
  queue_position: z.number().nullish(),
});

/** The status answer: where the request is, never how it ended (that is the result's answer). */
export const falStatusSchema = z.looseObject({
  status: z.enum(['IN_QUEUE', 'IN_PROGRESS', 'COMPLETED']),
  queue_position: z.number().nullish(),
  response_url: z.string().nullish(),
  metrics: z.record(z.string(), z.unknown()).nullish(),
  /** Present when the status is read with `?logs=1`: the model's log lines so far. */
  logs: z
    .array(z.looseObject({ message: z.string().optional() }))
    .nullish()
    .catch(null),
});

/** A failed request's answer: `detail` (a string, or the model's typed errors) and, for request errors, `error_type`. */
const falErrorSchema = z.looseObject({
  detail: z.union([z.string(), z.array(z.looseObject({ msg: z.string().optional() }))]).optional(),
  error_type: z.string().optional(),
});

/** The error a result fetch answered, and whether it is the request's outcome (else: retry the read). */
function falResultError(a: HttpAnswer): { final: boolean; errorType: string | null; detail: string } {
  let body: z.infer<typeof falErrorSchema> = {};
  try {
    body = falErrorSchema.catch({}).parse(JSON.parse(a.text ?? ''));
  } catch {
    // not JSON: no detail
  }
  const detail = typeof body.detail === 'string' ? body.detail : (body.detail ?? []).map((d) => d.msg ?? 'error').join('; ');
  const errorType = a.headers.get('x-fal-error-type') ?? body.error_type ?? null;
  // A 4xx (but auth, 408, 429) is the model's answer; a 5xx is one only when fal names the
  // request's error type, or says it is the start limit we set (X-Fal-Request-Timeout passed).
  const clientError = a.status >= 400 && a.status < 500 && ![401, 403, 408, 429].includes(a.status);
  const startLimit = a.headers.get(FAL_TIMEOUT_TYPE_HEADER) === 'user';
  const fallback = startLimit ? 'not started within X-Fal-Request-Timeout' : `HTTP ${a.status}`;
  return { final: clientError || errorType !== null || startLimit, errorType, detail: detail || fallback };
}

export const falWebhookSchema = z.looseObject({
  request_id: z.string().min(1),
  gateway_request_id: z.string().nullish(),
  status: z.enum(['OK', 'ERROR']),
  payload: z.unknown().optional(),
  error: z.string().nullish(),
  payload_error: z.string().nullish(),
});

/**
 * The fal endpoints we send and their documented input (@fal-ai/client types/endpoints.d.ts:
 * Kling text-to-video takes `prompt`, `duration` "5" | "10", `aspect_ratio`, `negative_prompt`,
 * `cfg_scale`; no image, no resolution). docs/providers.md "Documented evidence: fal".
 */
export const FAL_KLING_TEXT_MODELS = ['fal-ai/kling-video/v2/master/text-to-video', 'fal-ai/kling-video/v2.1/master/text-to-video'] as const;
/** What each renders, having no resolution input (Kling's capability map: kling-v2-master 720p, kling-v2-1-master 1080p). */
const FAL_KLING_RESOLUTION: Record<(typeof FAL_KLING_TEXT_MODELS)[number], string> = {
  'fal-ai/kling-video/v2/master/text-to-video': '720p',
  'fal-ai/kling-video/v2.1/master/text-to-video': '1080p',
};
/** The input we send them: typed so that test/providers/sdk-types.ts checks it against the SDK's input types. */
export interface FalKlingTextInput {
  prompt: string;
  duration: '5' | '10';
  aspect_ratio: '16:9';
}
/** Why a request cannot go to fal, named by our API's field. */
export interface FalRefusal {
  readonly field: 'model' | 'resolution' | 'duration_seconds' | 'input_image_url';
  readonly message: string;
}

/** Our task input ({prompt, duration, resolution, first_frame_image?}) → the model's documented input, or why it cannot be sent. */
export function falInput(model: string, input: Record<string, unknown>): { readonly input: FalKlingTextInput } | { readonly refused: FalRefusal } {
  if (!(FAL_KLING_TEXT_MODELS as readonly string[]).includes(model))
    return { refused: { field: 'model', message: `${model} is not a fal endpoint we send (${FAL_KLING_TEXT_MODELS.join(', ')})` } };
  if (typeof input['first_frame_image'] === 'string') return { refused: { field: 'input_image_url', message: `${model} is text to video: it takes no image` } };
  // No resolution input: the model renders one resolution, so nothing else can be delivered.
  const renders = FAL_KLING_RESOLUTION[model as (typeof FAL_KLING_TEXT_MODELS)[number]];
  if (input['resolution'] !== undefined && input['resolution'] !== renders)
    return { refused: { field: 'resolution', message: `${model} renders ${renders} only` } };
  const duration = String(input['duration']);
  if (duration !== '5' && duration !== '10') return { refused: { field: 'duration_seconds', message: `${model} takes 5 or 10 seconds` } };
  return { input: { prompt: typeof input['prompt'] === 'string' ? input['prompt'] : '', duration, aspect_ratio: '16:9' } };
}

/** Model ids under a namespace ("workflows/owner/app"): the namespace is part of the app's address (@fal-ai/client utils `parseEndpointId`). */
const FAL_ENDPOINT_NAMESPACES = ['workflows', 'comfy'];

/**
 * The app id addressing status/result/cancel: the model id without its endpoint path ("owner/app",
 * or "namespace/owner/app"), as the URLs of fal's submit answer name it
 * (https://fal.ai/docs/api-reference/inference-api, "Model IDs and paths").
 */
export function falAppId(model: string): string {
  const parts = model.split('/').filter((p) => p.length > 0);
  const n = FAL_ENDPOINT_NAMESPACES.includes(parts[0] ?? '') ? 3 : 2;
  if (parts.length < n) throw new Error(`fal: model id "${model}" is not "[namespace/]owner/app[/path]"`);
  return parts.slice(0, n).join('/');
}

/** The video (or first media) URL of a fal result payload. */
export function falOutputUrl(payload: unknown): string | null {
  if (!payload || typeof payload !== 'object') return null;
  const p = payload as Record<string, unknown>;
  const urlOf = (v: unknown): string | null =>
    v && typeof v === 'object' && typeof (v as { url?: unknown }).url === 'string' ? (v as { url: string }).url : null;
  for (const k of ['video', 'output', 'file']) {
    const u = urlOf(p[k]);
    if (u) return u;
  }
  for (const k of ['videos', 'images']) {
    const list = p[k];
    if (Array.isArray(list)) {
      const u = urlOf(list[0]);
      if (u) return u;
    }
  }
  return null;
}

const isCancel = (errorType: string | null | undefined, error: string | null | undefined): boolean =>
  /cancel/i.test(errorType ?? '') || /cancel/i.test(error ?? '');

function job(jobId: string, state: ProviderJobState, rawStatus: string, extra: Partial<ProviderJob> = {}): ProviderJob {
  return {
    jobId,
    state,
    rawStatus,
    updatedAt: null,
    outputUrl: null,
    error: null,
    correlationToken: null,
    metrics: null,
    ...extra,
  };
}

export function createFalAdapter(opts: FalAdapterOptions): ProviderAdapter {
  const base = opts.baseUrl.replace(/\/+$/, '');
  const now = opts.now ?? Date.now;
  const toleranceS = opts.toleranceSeconds ?? 300;
  const startTimeoutMs = opts.startTimeoutMs ?? FAL_CAPABILITIES.maxRunMs ?? 6 * 3_600_000;
  const http = createProviderHttp({ name: 'fal', timeoutMs: opts.timeoutMs, fetch: opts.fetch, secrets: () => [opts.apiKey] });
  const jwks = new FalJwks({
    jwksUrl: opts.jwksUrl,
    ...(opts.jwksTtlMs !== undefined ? { ttlMs: opts.jwksTtlMs } : {}),
    ...(opts.jwksMinRefetchIntervalMs !== undefined ? { minRefetchIntervalMs: opts.jwksMinRefetchIntervalMs } : {}),
    timeoutMs: opts.timeoutMs,
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
    now,
  });
  const capabilities: ProviderCapabilities = { ...FAL_CAPABILITIES, ...opts.limits };
  const headers = (json: boolean): Record<string, string> => ({
    authorization: `Key ${opts.apiKey}`,
    accept: 'application/json',
    ...(json ? { 'content-type': 'application/json' } : {}),
  });

  function appFor(ref: JobRef | undefined, what: string): string {
    if (!ref?.model) throw new ProviderHttpError(`fal ${what}: the model id is needed to address a request (pass ref.model)`, null, false);
    try {
      return falAppId(ref.model);
    } catch (err) {
      throw new ProviderHttpError((err as Error).message, null, false);
    }
  }
  const requestUrl = (app: string, id: string): string => `${base}/${app}/requests/${encodeURIComponent(id)}`;
  /**
   * Where the result is read: the `response_url` fal's status answer names ("do not build these
   * URLs yourself"), when it is this request's under our base URL; our key is never sent anywhere
   * else, so any other answer falls back to the URL fal's documented rule gives.
   */
  const resultUrl = (app: string, id: string, named: string | null | undefined): string =>
    named && named.startsWith(`${base}/`) && named.endsWith(`/requests/${encodeURIComponent(id)}`) ? named : requestUrl(app, id);

  async function submit(req: SubmitRequest): Promise<SubmitOutcome> {
    const mapped = falInput(req.model, req.input);
    // Refused before sending: the API refuses the same combinations at create (domain/catalog.ts).
    if ('refused' in mapped) return http.rejected(false, null, `${mapped.refused.field}: ${mapped.refused.message}`);
    const body = JSON.stringify(mapped.input);
    const url = `${base}/${req.model.replace(/^\/+/, '')}?fal_webhook=${encodeURIComponent(req.webhookUrl)}`;
    // A request not started by the task's deadline is dropped by fal, unbilled, instead of
    // starting work nobody waits for (docs/providers.md "Documented evidence: fal").
    const startTimeout = String(falStartTimeoutSeconds(req.deadlineAt, now(), startTimeoutMs));
    const sendHeaders = { ...headers(true), [FAL_START_TIMEOUT_HEADER]: startTimeout };
    const answer = await http.send(url, { method: 'POST', route: '/{model}', headers: sendHeaders, body }, req.signal);
    if ('kind' in answer) return answer;
    return http.classifySubmit(answer, (json) => {
      const p = submitAnswerSchema.safeParse(json);
      if (!p.success) return { malformed: p.error.message };
      return job(p.data.request_id, 'queued', 'IN_QUEUE', { correlationToken: callbackTokenOf(req.webhookUrl) });
    });
  }

  async function getJob(jobId: string, signal?: AbortSignal, ref?: JobRef): Promise<ProviderJob> {
    const what = `getJob ${jobId}`;
    const app = appFor(ref, what);
    // `logs=1`: the status answer then carries the model's logs (docs/events.md "Progress").
    const raw = await http.read(
      `${requestUrl(app, jobId)}/status?logs=1`,
      { method: 'GET', route: '/{app}/requests/{id}/status', headers: headers(false) },
      what,
      signal,
    );
    const p = falStatusSchema.safeParse(raw);
    if (!p.success) throw http.malformed(what, p.error.message);
    const s = p.data;
    const metrics = numericMetrics(s.metrics);
    if (s.status !== 'COMPLETED') {
      const progress = providerProgress({
        queuePosition: s.status === 'IN_QUEUE' ? s.queue_position : null,
        logs: (s.logs ?? [])
          .map((l) => l.message ?? '')
          .filter((m) => m.length > 0)
          .join('\n'),
      });
      return job(jobId, FAL_STATUS[s.status] as ProviderJobState, s.status, { metrics, progress });
    }
    return readResult(resultUrl(app, jobId, s.response_url), jobId, metrics, signal);
  }

  /**
   * COMPLETED: the result fetch says how it ended (output, or the model's error). A 404 is a gone
   * read, never an outcome: retried like any, and bounded by PROVIDER_READ_FAILURE_LIMIT
   * (activities/provider-reads.ts), so a result that does not come back parks the task in
   * MANUAL_REVIEW, where a late webhook or an operator can still settle it.
   */
  async function readResult(url: string, jobId: string, metrics: Record<string, number> | null, signal?: AbortSignal): Promise<ProviderJob> {
    const what = `result ${jobId}`;
    const a = await http.send(url, { method: 'GET', route: '/{app}/requests/{id}', headers: headers(false) }, signal);
    if ('kind' in a) throw new ProviderHttpError(`fal ${what}: ${a.kind === 'accepted' ? 'no answer' : a.reason}`, null, true);
    if (a.status === 404) throw new ProviderHttpError(`fal ${what}: ${FAL_RESULT_GONE}`, 404, false);
    // Unreadable (cut short, or over the size limit): no outcome, the read is retried.
    if (a.text === null) throw http.malformed(what, `the answer could not be read (${a.readError ?? 'unknown'})`);
    if (a.status >= 200 && a.status <= 299) {
      let result: unknown;
      try {
        result = JSON.parse(a.text ?? '');
      } catch {
        throw http.malformed(what, 'the result is not JSON');
      }
      const outputUrl = falOutputUrl(result);
      if (!outputUrl) throw http.malformed(what, 'no video URL in the result');
      return job(jobId, 'succeeded', 'COMPLETED', { outputUrl, metrics });
    }
    const e = falResultError(a);
    if (!e.final) throw new ProviderHttpError(http.redact(`fal ${what}: HTTP ${a.status}: ${http.clip(e.detail)}`), a.status, true);
    const state = isCancel(e.errorType, e.detail) ? 'canceled' : 'failed';
    return job(jobId, state, 'COMPLETED', { error: http.clip(`${e.errorType ?? `HTTP ${a.status}`}: ${e.detail}`), metrics });
  }

  async function cancel(jobId: string, signal?: AbortSignal, ref?: JobRef): Promise<void> {
    const what = `cancel ${jobId}`;
    const app = appFor(ref, what);
    try {
      await http.read(`${requestUrl(app, jobId)}/cancel`, { method: 'PUT', route: '/{app}/requests/{id}/cancel', headers: headers(false) }, what, signal);
    } catch (err) {
      // 400 ALREADY_COMPLETED or 404 NOT_FOUND: nothing left to cancel; the job's own state (or
      // its absence, read while CANCEL_REQUESTED) says how it ended.
      if (err instanceof ProviderHttpError && ((err.status === 400 && /ALREADY_COMPLETED/.test(err.message)) || err.status === 404)) return;
      throw err;
    }
  }

  function checkHeaders(hdrs: Record<string, string | string[] | undefined>) {
    const requestId = headerValue(hdrs, FAL_HEADERS.requestId);
    const userId = headerValue(hdrs, FAL_HEADERS.userId);
    const timestamp = headerValue(hdrs, FAL_HEADERS.timestamp);
    const signature = headerValue(hdrs, FAL_HEADERS.signature);
    if (!requestId || !userId || !timestamp || !signature) {
      throw new CallbackVerificationError('missing X-Fal-Webhook-* headers', 'missing-headers');
    }
    if (!/^\d+$/.test(timestamp)) throw new CallbackVerificationError('X-Fal-Webhook-Timestamp is not a unix time', 'missing-headers');
    if (Math.abs(now() / 1000 - Number(timestamp)) > toleranceS) {
      throw new CallbackVerificationError('webhook timestamp outside the tolerance window', 'stale-timestamp');
    }
    if (userId !== opts.expectedUserId) {
      throw new CallbackVerificationError('webhook is for another fal user', 'bad-signature');
    }
    return { requestId, userId, timestamp, signature };
  }

  /** After the signature holds: parse and normalise the body. */
  function toVerified(rawBody: Buffer, requestId: string): VerifiedCallback {
    let json: unknown;
    try {
      json = JSON.parse(rawBody.toString('utf8'));
    } catch {
      throw new CallbackVerificationError('webhook body is not JSON', 'bad-payload');
    }
    const p = falWebhookSchema.safeParse(json);
    if (!p.success) throw new CallbackVerificationError(`webhook body is not a fal result: ${http.clip(p.error.message)}`, 'bad-payload');
    const w = p.data;
    if (w.request_id !== requestId) throw new CallbackVerificationError('body request_id differs from the signed header', 'bad-payload');
    const providerEventId = `completed:${w.request_id}`;
    if (w.status === 'ERROR') {
      const state = isCancel(null, w.error) ? 'canceled' : 'failed';
      const detail = w.error ?? 'error';
      return { providerEventId, job: job(w.request_id, state, 'COMPLETED', { error: http.clip(detail) }), payload: json };
    }
    const outputUrl = falOutputUrl(w.payload);
    // OK but the payload could not be serialised (payload_error): the result must be fetched.
    if (!outputUrl) return { providerEventId, job: job(w.request_id, 'queued', 'COMPLETED'), payload: json, needsRefetch: true };
    return { providerEventId, job: job(w.request_id, 'succeeded', 'COMPLETED', { outputUrl }), payload: json };
  }

  function verifyCallback(rawBody: Buffer, hdrs: Record<string, string | string[] | undefined>): VerifiedCallback {
    const h = checkHeaders(hdrs);
    const message = falSignedMessage(h.requestId, h.userId, h.timestamp, rawBody);
    if (jwks.cached.length === 0) {
      jwks.refreshInBackground();
      throw new CallbackVerificationError('fal webhook keys not loaded yet', 'keys-unavailable');
    }
    if (!verifyFalSignature(jwks.cached, message, h.signature)) {
      // Maybe the key rotated: refetch for the provider's redelivery.
      jwks.refreshInBackground();
      throw new CallbackVerificationError('webhook signature does not match', 'bad-signature');
    }
    if (!jwks.fresh) jwks.refreshInBackground();
    return toVerified(rawBody, h.requestId);
  }

  async function verifyCallbackAsync(rawBody: Buffer, hdrs: Record<string, string | string[] | undefined>): Promise<VerifiedCallback> {
    const h = checkHeaders(hdrs);
    const message = falSignedMessage(h.requestId, h.userId, h.timestamp, rawBody);
    if (!jwks.fresh) {
      try {
        await jwks.refresh();
      } catch {
        // Stale keys still verify old-key signatures; with none at all we cannot decide.
        if (jwks.cached.length === 0) throw new CallbackVerificationError('fal webhook keys unavailable', 'keys-unavailable');
      }
    }
    let ok = verifyFalSignature(jwks.cached, message, h.signature);
    if (!ok && jwks.mayRefetch) {
      // An unknown signer: fetch the key set once more (rotation), then decide.
      await jwks.refresh().catch(() => undefined);
      ok = verifyFalSignature(jwks.cached, message, h.signature);
    }
    if (!ok) throw new CallbackVerificationError('webhook signature does not match', 'bad-signature');
    return toVerified(rawBody, h.requestId);
  }

  return {
    capabilities,
    submit,
    getJob,
    cancel,
    findByCorrelationToken: () => Promise.resolve(NO_LOOKUP),
    verifyCallback,
    verifyCallbackAsync,
  };
}
