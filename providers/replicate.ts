// ProviderAdapter for Replicate's predictions HTTP API (https://replicate.com/docs/reference/http).
// Correlation: Replicate has no idempotency key, so our attempt id rides as the last path segment
// of the webhook URL; an unknown submit is reconciled by listing recent predictions (tier
// 'list-by-token'). Every provider body is parsed with zod; secrets never reach error messages.
import { z } from 'zod';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import type { ProviderJobState } from '../domain/states';
import {
  CallbackVerificationError,
  type ProviderAdapter,
  type ProviderCapabilities,
  type ProviderJob,
  type SubmitOutcome,
  type SubmitRequest,
  type VerifiedCallback,
} from './types';
import { classifyNetworkError, parseRetryAfter, type NetworkErrorClass } from './http-errors';

export interface ReplicateAdapterOptions {
  /** e.g. https://api.replicate.com or http://127.0.0.1:7081/replicate (no trailing /v1). */
  readonly baseUrl: string;
  readonly apiToken: string;
  /** Standard Webhooks secret, "whsec_" + base64. */
  readonly webhookSecret: string;
  /** Timeout of one HTTP call (each listing page is one call). */
  readonly timeoutMs: number;
  readonly fetch?: typeof fetch;
  /** Upper bound of listing pages walked by findByCorrelationToken. */
  readonly maxListPages?: number;
}

export const REPLICATE_CAPABILITIES: ProviderCapabilities = {
  name: 'replicate',
  unknownOutcomeTier: 'list-by-token',
  callbackSignature: 'standard-webhooks',
  // Replicate bills failed and canceled predictions for the time they ran; aborted ones are not billed.
  chargeableStates: ['succeeded', 'failed', 'canceled'],
  outputUrlTtlMs: 3_600_000,
  canRefreshOutputUrl: false,
  listingWindowMs: 3_600_000,
  // 600 creates per minute; account-dependent concurrency (a conservative default; config may override).
  requestsPerSecond: 10,
  maxConcurrency: 50,
  pollOnly: false,
  queuesExcessWork: false,
  canCancel: true,
  // Predictions time out after running for 30 minutes (replicate.com/docs/topics/predictions/lifecycle);
  // the rest is room for the queue and cold boots.
  maxRunMs: 2 * 3_600_000,
};

const REPLICATE_STATUS: Record<string, ProviderJobState> = {
  starting: 'queued',
  processing: 'running',
  succeeded: 'succeeded',
  failed: 'failed',
  canceled: 'canceled',
  aborted: 'aborted',
};

const nullableString = z.string().nullish();

/** The fields of a Replicate prediction we rely on; unknown fields pass through. */
export const replicatePredictionSchema = z.looseObject({
  id: z.string().min(1),
  status: z.enum(['starting', 'processing', 'succeeded', 'failed', 'canceled', 'aborted']),
  version: nullableString,
  output: z.unknown().optional(),
  error: z.unknown().optional(),
  created_at: nullableString,
  started_at: nullableString,
  completed_at: nullableString,
  webhook: nullableString,
  metrics: z.record(z.string(), z.unknown()).nullish(),
});
export type ReplicatePrediction = z.infer<typeof replicatePredictionSchema>;

const listPageSchema = z.looseObject({
  next: nullableString,
  previous: nullableString,
  results: z.array(replicatePredictionSchema),
});

/** An HTTP/transport failure of a read call (getJob, cancel, list). */
export class ProviderHttpError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
    /** True when a retry may succeed (network, 5xx, 429). */
    readonly transient: boolean,
  ) {
    super(message);
    // Transient failures stay plain 'Error'; callers branch on the two non-transient names.
    this.name = status === 404 ? 'ProviderNotFound' : transient ? 'Error' : 'ProviderRequestRejected';
  }
}

function parseDate(s: string | null | undefined): Date | null {
  if (!s) return null;
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? null : d;
}

/** The last non-empty path segment of a URL, or null. */
export function lastPathSegment(url: string | null | undefined): string | null {
  if (!url) return null;
  try {
    const seg = new URL(url).pathname.split('/').filter((s) => s.length > 0).pop();
    return seg ? decodeURIComponent(seg) : null;
  } catch {
    return null;
  }
}

function errorText(e: unknown): string | null {
  if (e === null || e === undefined || e === '') return null;
  return typeof e === 'string' ? e : JSON.stringify(e);
}

/** Normalises a parsed Replicate prediction. */
export function predictionToJob(p: ReplicatePrediction): ProviderJob {
  const out = p.output;
  const first: unknown = Array.isArray(out) ? out[0] : out;
  let metrics: Record<string, number> | null = null;
  if (p.metrics) {
    metrics = {};
    for (const [k, v] of Object.entries(p.metrics)) {
      if (typeof v === 'number' && Number.isFinite(v)) metrics[k] = v;
    }
  }
  return {
    jobId: p.id,
    state: REPLICATE_STATUS[p.status] as ProviderJobState,
    rawStatus: p.status,
    updatedAt: parseDate(p.completed_at) ?? parseDate(p.started_at) ?? parseDate(p.created_at),
    outputUrl: typeof first === 'string' ? first : null,
    error: errorText(p.error),
    correlationToken: lastPathSegment(p.webhook),
    metrics,
  };
}

function headerValue(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() !== name) continue;
    if (Array.isArray(v)) return name === 'webhook-signature' ? v.join(' ') : v[0];
    return v;
  }
  return undefined;
}

export function createReplicateAdapter(opts: ReplicateAdapterOptions): ProviderAdapter {
  const doFetch = opts.fetch ?? globalThis.fetch;
  const base = opts.baseUrl.replace(/\/+$/, '');
  const baseOrigin = new URL(base).origin;
  const maxPages = opts.maxListPages ?? 20;
  const secrets = [opts.apiToken, opts.webhookSecret].filter((s) => s.length >= 4);
  let webhook: Webhook;
  try {
    webhook = new Webhook(opts.webhookSecret);
  } catch {
    throw new Error('replicate: invalid webhook secret (expected "whsec_" + base64)');
  }

  const redact = (s: string): string => secrets.reduce((acc, sec) => acc.split(sec).join('[redacted]'), s);
  const clip = (s: string): string => redact(s.length > 300 ? `${s.slice(0, 300)}…` : s);
  const signalFor = (caller?: AbortSignal): AbortSignal => {
    const t = AbortSignal.timeout(opts.timeoutMs);
    return caller ? AbortSignal.any([t, caller]) : t;
  };
  const headers = (json: boolean): Record<string, string> => ({
    authorization: `Bearer ${opts.apiToken}`,
    accept: 'application/json',
    ...(json ? { 'content-type': 'application/json' } : {}),
  });
  /** A short description of a provider error body (Replicate answers problem+json). */
  const describeBody = (text: string): string => {
    try {
      const j = JSON.parse(text) as { detail?: unknown; title?: unknown };
      const d = typeof j.detail === 'string' ? j.detail : typeof j.title === 'string' ? j.title : null;
      if (d) return clip(d);
    } catch {
      // not JSON
    }
    return clip(text.trim());
  };

  /** A GET/POST for read-like calls: throws ProviderHttpError, returns the parsed JSON body. */
  async function call(method: 'GET' | 'POST', url: string, what: string, caller?: AbortSignal): Promise<unknown> {
    let res: Response;
    let text: string;
    try {
      res = await doFetch(url, { method, headers: headers(false), signal: signalFor(caller), redirect: 'manual' });
      text = await res.text();
    } catch (err) {
      const c = classifyNetworkError(err, caller);
      throw new ProviderHttpError(`replicate ${what}: ${c.reason}`, null, !c.fatal);
    }
    if (res.status === 404) throw new ProviderHttpError(`replicate ${what}: not found`, 404, false);
    if (res.status < 200 || res.status > 299) {
      const transient = res.status >= 500 || res.status === 429 || res.status === 408;
      throw new ProviderHttpError(`replicate ${what}: HTTP ${res.status}: ${describeBody(text)}`, res.status, transient);
    }
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new ProviderHttpError(`replicate ${what}: response is not JSON`, res.status, true);
    }
  }

  function parseJob(body: unknown, what: string): ProviderJob {
    const parsed = replicatePredictionSchema.safeParse(body);
    if (!parsed.success) {
      throw new ProviderHttpError(`replicate ${what}: malformed prediction: ${clip(parsed.error.message)}`, null, true);
    }
    return predictionToJob(parsed.data);
  }

  const predictionUrl = (id: string): string => `${base}/v1/predictions/${encodeURIComponent(id)}`;

  async function submit(req: SubmitRequest): Promise<SubmitOutcome> {
    const rejected = (retryable: boolean, status: number | null, reason: string, retryAfterMs: number | null = null): SubmitOutcome => ({
      kind: 'rejected',
      retryable,
      status,
      retryAfterMs,
      reason: redact(reason),
    });
    const unknown = (reason: string): SubmitOutcome => ({ kind: 'unknown', reason: redact(reason) });

    if (req.signal?.aborted) return rejected(true, null, 'aborted by caller before sending');
    let body: string;
    try {
      body = JSON.stringify({
        version: req.model,
        input: req.input,
        webhook: req.webhookUrl,
        webhook_events_filter: ['start', 'completed'],
      });
    } catch (err) {
      return rejected(false, null, `request body not serialisable: ${(err as Error).message}`);
    }

    let res: Response;
    try {
      res = await doFetch(`${base}/v1/predictions`, {
        method: 'POST',
        headers: headers(true),
        body,
        signal: signalFor(req.signal),
        redirect: 'manual',
      });
    } catch (err) {
      const c: NetworkErrorClass = classifyNetworkError(err, req.signal);
      return c.sent ? unknown(c.reason) : rejected(!c.fatal, null, c.reason);
    }

    let text: string | null = null;
    let readError: string | null = null;
    try {
      text = await res.text();
    } catch (err) {
      readError = classifyNetworkError(err, req.signal).reason;
    }
    const status = res.status;

    if (status >= 200 && status <= 299) {
      if (text === null) return unknown(`HTTP ${status} but the body could not be read (${readError})`);
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        return unknown(`HTTP ${status} with a non-JSON body`);
      }
      const parsed = replicatePredictionSchema.safeParse(json);
      if (!parsed.success) return unknown(`HTTP ${status} with a malformed prediction: ${clip(parsed.error.message)}`);
      return { kind: 'accepted', job: predictionToJob(parsed.data) };
    }
    const detail = text === null ? `(body unreadable: ${readError})` : describeBody(text);
    if (status === 429) {
      return rejected(true, 429, `rate limited: ${detail}`, parseRetryAfter(res.headers.get('retry-after')));
    }
    // 408: the server gave up reading/processing, 409: a conflicting job may exist. Neither proves absence.
    if (status === 408 || status === 409) return unknown(`HTTP ${status}: ${detail}`);
    if (status >= 500) return unknown(`HTTP ${status} (provider may have created the prediction): ${detail}`);
    if (status >= 400) return rejected(false, status, `HTTP ${status}: ${detail}`);
    // 1xx/3xx: an answer that did not create anything (redirects are not followed).
    return rejected(false, status, `unexpected HTTP ${status} (check PROVIDER_REPLICATE_BASE_URL)`);
  }

  async function getJob(jobId: string, signal?: AbortSignal): Promise<ProviderJob> {
    const what = `getJob ${jobId}`;
    return parseJob(await call('GET', predictionUrl(jobId), what, signal), what);
  }

  async function cancel(jobId: string, signal?: AbortSignal): Promise<void> {
    await call('POST', `${predictionUrl(jobId)}/cancel`, `cancel ${jobId}`, signal);
  }

  async function findByCorrelationToken(token: string, since: Date, signal?: AbortSignal): Promise<ProviderJob | null> {
    let url: string | null = `${base}/v1/predictions`;
    for (let page = 1; url !== null; page++) {
      if (page > maxPages) {
        // Returning null here would claim "not found in the window"; we did not look far enough.
        throw new ProviderHttpError(`replicate list: window not covered after ${maxPages} pages`, null, true);
      }
      const body = await call('GET', url, `list page ${page}`, signal);
      const parsed = listPageSchema.safeParse(body);
      if (!parsed.success) {
        throw new ProviderHttpError(`replicate list: malformed page ${page}: ${clip(parsed.error.message)}`, null, true);
      }
      let reachedSince = false;
      for (const p of parsed.data.results) {
        const job = predictionToJob(p);
        if (job.correlationToken === token) return job;
        const created = parseDate(p.created_at);
        if (created && created.getTime() < since.getTime()) reachedSince = true;
      }
      if (reachedSince || !parsed.data.next) return null;
      const next = new URL(parsed.data.next, `${base}/`);
      // Never send the bearer token to another origin.
      if (next.origin !== baseOrigin) {
        throw new ProviderHttpError(`replicate list: refusing cross-origin next URL ${next.origin}`, null, false);
      }
      url = next.toString();
    }
    return null;
  }

  function verifyCallback(rawBody: Buffer, hdrs: Record<string, string | string[] | undefined>): VerifiedCallback {
    const id = headerValue(hdrs, 'webhook-id');
    const ts = headerValue(hdrs, 'webhook-timestamp');
    const sig = headerValue(hdrs, 'webhook-signature');
    if (!id || !ts || !sig) throw new CallbackVerificationError('missing webhook-id/timestamp/signature', 'missing-headers');
    if (!/^\d+$/.test(ts)) throw new CallbackVerificationError('webhook-timestamp is not a unix time', 'missing-headers');
    const payload = rawBody.toString('utf8');
    try {
      webhook.verify(payload, { 'webhook-id': id, 'webhook-timestamp': ts, 'webhook-signature': sig }, { jsonParse: false });
    } catch (err) {
      const msg = err instanceof Error ? err.message : '';
      if (err instanceof WebhookVerificationError && /timestamp too (old|new)/i.test(msg)) {
        throw new CallbackVerificationError('webhook timestamp outside the tolerance window', 'stale-timestamp');
      }
      if (err instanceof WebhookVerificationError && /missing/i.test(msg)) {
        throw new CallbackVerificationError('missing webhook headers', 'missing-headers');
      }
      throw new CallbackVerificationError('webhook signature does not match', 'bad-signature');
    }
    let json: unknown;
    try {
      json = JSON.parse(payload);
    } catch {
      throw new CallbackVerificationError('webhook body is not JSON', 'bad-payload');
    }
    const parsed = replicatePredictionSchema.safeParse(json);
    if (!parsed.success) {
      throw new CallbackVerificationError(`webhook body is not a prediction: ${clip(parsed.error.message)}`, 'bad-payload');
    }
    return { providerEventId: id, job: predictionToJob(parsed.data), payload: json };
  }

  return { capabilities: REPLICATE_CAPABILITIES, submit, getJob, cancel, findByCorrelationToken, verifyCallback };
}
