// ProviderAdapter for Replicate's predictions HTTP API (https://replicate.com/docs/reference/http).
// Correlation: Replicate has no idempotency key; our attempt id rides as the last path segment of
// the webhook URL, so callbacks carry it, but predictions read back (get, list) do not: an unknown
// submit is reconciled by the fingerprint the list does return — the exact input we sent and the
// model or version, created inside the attempt's submit window (tier 'list-by-fingerprint'). The
// list is paginated and promises no completeness, so a miss never proves absence
// (docs/providers.md "Proof of absence"). Every body is parsed with zod; secrets never reach errors.
import { isDeepStrictEqual } from 'node:util';
import { z } from 'zod';
import { providerProgress } from '../domain/progress';
import type { ProviderJobState } from '../domain/states';
import {
  CallbackVerificationError,
  type LookupQuery,
  type LookupResult,
  type ProviderAdapter,
  type ProviderCapabilities,
  type ProviderJob,
  type SubmitOutcome,
  type SubmitRequest,
  type VerifiedCallback,
} from './types';
import { PROVIDER_ANSWER_MAX_BYTES, PROVIDER_LISTING_MAX_BYTES, readCappedText } from './capped-body';
import { classifyNetworkError, parseRetryAfter, type NetworkErrorClass } from './http-errors';
import { providerSpan, recordNoAnswer, recordStatus } from './http-span';
import { replicateInput } from './replicate-input';
import { createStandardWebhookVerifier, type StandardWebhookVerifier } from './standard-webhooks';

/**
 * The reset a Replicate throttle body names (`{"detail":"Request was throttled. Your rate limit
 * resets in ~30s."}`, https://replicate.com/docs/topics/predictions/rate-limits), in ms; null when none.
 */
export function throttleResetMs(body: string): number | null {
  const m = /resets in ~?(\d+(?:\.\d+)?)\s*s\b/.exec(body);
  return m ? Math.round(Number(m[1]) * 1_000) : null;
}

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
  /** The clock the Cancel-After header is sized by (default Date.now). */
  readonly now?: () => number;
}

/** How long Replicate lets a prediction run before it times out (replicate.com/docs/topics/predictions/lifecycle). */
export const REPLICATE_RUN_LIMIT_MS = 30 * 60_000;

/**
 * The `Cancel-After` header of a create (https://replicate.com/docs/reference/http#predictions.create:
 * "The maximum time the prediction can run before it is automatically canceled. The lifetime is
 * measured from when the prediction is created", e.g. `90s`, at least 5 s). Replicate aborts a
 * prediction that has not started by then, unbilled, and cancels one that is running (billed for
 * its run time). Sized so that nothing we still want is cut: the time left to the task's deadline
 * (after which no provider work of the task starts) plus Replicate's own 30-minute run limit, so a
 * prediction that started by the deadline may run as long as Replicate ever lets it; one still
 * queued past that (an orphan of a lost answer among them) is aborted at no charge. Null: no
 * deadline, no header.
 */
export function cancelAfterFor(deadlineAt: Date | null | undefined, nowMs: number): string | null {
  if (!deadlineAt) return null;
  // Never under the run limit, so far above Replicate's 5 s minimum.
  const ms = Math.max(0, deadlineAt.getTime() - nowMs) + REPLICATE_RUN_LIMIT_MS;
  return `${Math.ceil(ms / 1000)}s`;
}

export const REPLICATE_CAPABILITIES: ProviderCapabilities = {
  name: 'replicate',
  unknownOutcomeTier: 'list-by-fingerprint',
  // A paginated list with no key of ours cannot be complete and exact: a miss proves nothing.
  absenceProof: 'none',
  lookupFields: [
    'GET /v1/predictions?created_after&created_before',
    'results[].input',
    'results[].model',
    'results[].version',
    'results[].created_at',
    'results[].source',
    'results[].data_removed',
    'next',
  ],
  callbackSignature: 'standard-webhooks',
  // Replicate bills failed and canceled predictions for the time they ran; aborted ones are not billed.
  chargeableStates: ['succeeded', 'failed', 'canceled'],
  outputUrlTtlMs: 3_600_000,
  canRefreshOutputUrl: false,
  // API predictions' input is removed after an hour: past it no fingerprint can match.
  listingWindowMs: 3_600_000,
  // Documented: 600 creates/min, 3,000/min for every other endpoint (replicate.com/docs/topics/predictions/rate-limits);
  // 10 reads/s is well inside the latter. Concurrency is account-dependent (a conservative default; config may override).
  requestsPerSecond: 10,
  // The documented create limit, 600 a minute: the claims' shared pace runs below it.
  createsPerSecond: 10,
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

/**
 * The documented fields of a Replicate prediction we read (get, list, webhook body); unknown
 * fields pass through. There is no `webhook` among them: nothing may depend on it.
 */
export const replicatePredictionSchema = z.looseObject({
  id: z.string().min(1),
  status: z.enum(['starting', 'processing', 'succeeded', 'failed', 'canceled', 'aborted']),
  model: nullableString,
  version: nullableString,
  input: z.record(z.string(), z.unknown()).nullish(),
  output: z.unknown().optional(),
  error: z.unknown().optional(),
  source: nullableString,
  data_removed: z.boolean().nullish(),
  created_at: nullableString,
  started_at: nullableString,
  completed_at: nullableString,
  metrics: z.record(z.string(), z.unknown()).nullish(),
  /** The model's output log so far (a string). */
  logs: nullableString.catch(null),
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

function errorText(e: unknown): string | null {
  if (e === null || e === undefined || e === '') return null;
  return typeof e === 'string' ? e : JSON.stringify(e);
}

/** Normalises a parsed Replicate prediction; `token` is our attempt id when we know the job is its. */
export function predictionToJob(p: ReplicatePrediction, token: string | null = null): ProviderJob {
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
    correlationToken: token,
    metrics,
    // Replicate gives no fraction or queue place: its status and logs are the progress.
    progress: p.status === 'starting' || p.status === 'processing' ? providerProgress({ logs: p.logs }) : null,
  };
}

/** The documented host of Replicate's API (the host its `next` links name). */
export const REPLICATE_API_HOST = 'api.replicate.com';

/**
 * Where a model id is sent (https://replicate.com/docs/reference/http): an official model
 * `owner/name` to `POST /v1/models/{owner}/{name}/predictions`; a version (`owner/name:id` or a
 * bare id) in the `version` field of `POST /v1/predictions`. `matches` is the fingerprint half
 * that names the model on a prediction read back.
 */
export function replicateTarget(model: string): { path: string; version: string | null; matches: (p: ReplicatePrediction) => boolean } {
  const official = /^([^/:\s]+)\/([^/:\s]+)$/.exec(model);
  if (official) {
    const [, owner, name] = official as unknown as [string, string, string];
    return { path: `/v1/models/${encodeURIComponent(owner)}/${encodeURIComponent(name)}/predictions`, version: null, matches: (p) => p.model === model };
  }
  const id = model.includes(':') ? model.slice(model.lastIndexOf(':') + 1) : model;
  return { path: '/v1/predictions', version: model, matches: (p) => p.version === id };
}

/**
 * The URL to fetch for a list page's `next`, or null when it names a host that is neither ours
 * nor Replicate's documented one. Replicate documents `next` as a full URL (one example with
 * plain http), so the host decides, not the scheme; and the request always goes to our
 * configured origin, so the bearer token never leaves it nor drops to plain http.
 */
export function nextPageUrl(next: string, base: string): string | null {
  const b = new URL(base);
  // A path-absolute `next` ("/v1/predictions?cursor=…") is relative to the API root, which is our
  // configured base (it may carry a path, e.g. a proxy's prefix): keep that path.
  if (next.startsWith('/') && !next.startsWith('//')) {
    const basePath = b.pathname.replace(/\/+$/, '');
    return `${b.origin}${basePath && !next.startsWith(`${basePath}/`) ? basePath : ''}${next}`;
  }
  let n: URL;
  try {
    n = new URL(next, `${base}/`);
  } catch {
    return null;
  }
  if (n.host === b.host) return `${b.origin}${n.pathname}${n.search}`;
  if (n.host === REPLICATE_API_HOST) return `${base}${n.pathname}${n.search}`;
  return null;
}

/** True when a prediction read back is the one our request would have created (fingerprint): one of `inputs`. */
function fingerprintMatches(p: ReplicatePrediction, target: ReturnType<typeof replicateTarget>, inputs: readonly unknown[]): boolean {
  if (p.data_removed === true || !p.input) return false;
  if (p.source && p.source !== 'api') return false;
  return target.matches(p) && inputs.some((input) => isDeepStrictEqual(p.input, input));
}

/**
 * The inputs an attempt with this task input may have sent: the model's input (replicateInput),
 * and the task input as it is, which a build before the model's input was typed sent (an attempt
 * still unknown across that deploy is found by what it really sent).
 */
function sentInputs(model: string, input: Record<string, unknown>): unknown[] {
  const mapped = replicateInput(model, input);
  const raw: unknown = JSON.parse(JSON.stringify(input));
  if ('refused' in mapped) return [raw];
  const sent: unknown = JSON.parse(JSON.stringify(mapped.input));
  return isDeepStrictEqual(sent, raw) ? [sent] : [sent, raw];
}

/** The create body: `version` only on the versioned endpoint (the official-model one takes none). */
export function replicateCreateBody(req: SubmitRequest, version: string | null): ReplicateCreateBody {
  return {
    ...(version !== null ? { version } : {}),
    input: req.input,
    webhook: req.webhookUrl,
    webhook_events_filter: ['start', 'completed'],
  };
}

/** Replicate's create body as its official SDK types it (test/providers/replicate-contract.test.ts). */
export interface ReplicateCreateBody {
  readonly version?: string;
  readonly input: Record<string, unknown>;
  readonly webhook: string;
  readonly webhook_events_filter: ('start' | 'output' | 'logs' | 'completed')[];
}

function headerValue(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  // node's IncomingMessage names its headers in lower case: the key itself, without a walk over every header.
  const own = Object.hasOwn(headers, name) ? headers[name] : undefined;
  if (own !== undefined) return Array.isArray(own) ? (name === 'webhook-signature' ? own.join(' ') : own[0]) : own;
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
  const maxPages = opts.maxListPages ?? 20;
  const secrets = [opts.apiToken, opts.webhookSecret].filter((s) => s.length >= 4);
  let webhook: StandardWebhookVerifier;
  try {
    webhook = createStandardWebhookVerifier(opts.webhookSecret);
  } catch {
    throw new Error('replicate: invalid webhook secret (expected "whsec_" + base64)');
  }

  const redact = (s: string): string => secrets.reduce((acc, sec) => acc.split(sec).join('[redacted]'), s);
  const clip = (s: string): string => redact(s.length > 300 ? `${s.slice(0, 300)}…` : s);
  const signalFor = (caller?: AbortSignal): AbortSignal => {
    const t = AbortSignal.timeout(opts.timeoutMs);
    return caller ? AbortSignal.any([t, caller]) : t;
  };
  const now = opts.now ?? Date.now;
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

  /**
   * A GET/POST for read-like calls: throws ProviderHttpError (an answer over `maxBytes` too, as
   * transient), returns the parsed JSON body. `route`: the span's path template.
   */
  async function call(
    method: 'GET' | 'POST',
    url: string,
    route: string,
    what: string,
    caller?: AbortSignal,
    maxBytes = PROVIDER_ANSWER_MAX_BYTES,
  ): Promise<unknown> {
    const { res, text } = await providerSpan('replicate', method, route, url, async (span) => {
      try {
        const r = await doFetch(url, { method, headers: headers(false), signal: signalFor(caller), redirect: 'manual' });
        recordStatus(span, r.status);
        return { res: r, text: await readCappedText(r, maxBytes) };
      } catch (err) {
        const c = classifyNetworkError(err, caller);
        throw new ProviderHttpError(`replicate ${what}: ${c.reason}`, null, !c.fatal);
      }
    });
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
    const target = replicateTarget(req.model);
    // The model's own input names and limits; refused before sending, as the API refuses at create.
    const mapped = replicateInput(req.model, req.input);
    if ('refused' in mapped) return rejected(false, null, `${mapped.refused.field}: ${mapped.refused.message}`);
    let body: string;
    try {
      body = JSON.stringify(replicateCreateBody({ ...req, input: mapped.input }, target.version));
    } catch (err) {
      return rejected(false, null, `request body not serialisable: ${(err as Error).message}`);
    }

    // The official-model path names the model: its span takes the template.
    const route = target.version === null ? '/v1/models/{owner}/{name}/predictions' : '/v1/predictions';
    const cancelAfter = cancelAfterFor(req.deadlineAt, now());
    const createHeaders = { ...headers(true), ...(cancelAfter ? { 'cancel-after': cancelAfter } : {}) };
    const sent = await providerSpan('replicate', 'POST', route, `${base}${target.path}`, async (span) => {
      let r: Response;
      try {
        r = await doFetch(`${base}${target.path}`, { method: 'POST', headers: createHeaders, body, signal: signalFor(req.signal), redirect: 'manual' });
      } catch (err) {
        const c: NetworkErrorClass = classifyNetworkError(err, req.signal);
        recordNoAnswer(span, c.sent);
        return c.sent ? unknown(c.reason) : rejected(!c.fatal, null, c.reason);
      }
      recordStatus(span, r.status);
      try {
        return { res: r, text: await readCappedText(r, PROVIDER_ANSWER_MAX_BYTES), readError: null };
      } catch (err) {
        return { res: r, text: null, readError: classifyNetworkError(err, req.signal).reason };
      }
    });
    if ('kind' in sent) return sent;
    const { res, text, readError } = sent;
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
      return { kind: 'accepted', job: predictionToJob(parsed.data, req.attemptId) };
    }
    const detail = text === null ? `(body unreadable: ${readError})` : describeBody(text);
    if (status === 429) {
      // Replicate documents no Retry-After; its throttle body names the reset ("resets in ~30s").
      const retryAfter = parseRetryAfter(res.headers.get('retry-after')) ?? (text === null ? null : throttleResetMs(text));
      return rejected(true, 429, `rate limited: ${detail}`, retryAfter);
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
    return parseJob(await call('GET', predictionUrl(jobId), '/v1/predictions/{id}', what, signal), what);
  }

  async function cancel(jobId: string, signal?: AbortSignal): Promise<void> {
    await call('POST', `${predictionUrl(jobId)}/cancel`, '/v1/predictions/{id}/cancel', `cancel ${jobId}`, signal);
  }

  /**
   * The walk of `GET /v1/predictions` over the submit window (created_after / created_before,
   * and newest first: it also stops at the first older item), collecting fingerprint matches.
   * Throws when a page fails, is malformed, names a foreign host, or the window is not covered
   * in maxListPages: each of those is "nothing learned", never "not there".
   */
  async function findByCorrelationToken(q: LookupQuery): Promise<LookupResult> {
    const target = replicateTarget(q.model);
    const inputs = sentInputs(q.model, q.input);
    const window = new URLSearchParams({ created_after: q.since.toISOString(), created_before: q.until.toISOString() });
    const matches: ReplicatePrediction[] = [];
    let url: string | null = `${base}/v1/predictions?${window.toString()}`;
    let page = 0;
    while (url !== null) {
      if (++page > maxPages) throw new ProviderHttpError(`replicate list: window not covered after ${maxPages} pages`, null, true);
      const parsed = listPageSchema.safeParse(await call('GET', url, '/v1/predictions', `list page ${page}`, q.signal, PROVIDER_LISTING_MAX_BYTES));
      if (!parsed.success) throw new ProviderHttpError(`replicate list: malformed page ${page}: ${clip(parsed.error.message)}`, null, true);
      let reachedSince = false;
      for (const p of parsed.data.results) {
        const created = parseDate(p.created_at);
        if (created && created.getTime() < q.since.getTime()) reachedSince = true;
        const inWindow = created !== null && created.getTime() >= q.since.getTime() && created.getTime() <= q.until.getTime();
        if (inWindow && fingerprintMatches(p, target, inputs)) matches.push(p);
      }
      if (reachedSince || !parsed.data.next) break;
      url = nextPageUrl(parsed.data.next, base);
      // Never send the bearer token to another host.
      if (url === null) throw new ProviderHttpError('replicate list: refusing a next URL on another host', null, false);
    }
    const [only] = matches;
    if (matches.length === 1 && only) return { kind: 'found', job: predictionToJob(only, q.token), by: 'fingerprint' };
    if (matches.length > 1) {
      const ids = matches.map((m) => m.id).join(', ');
      return {
        kind: 'ambiguous',
        jobs: matches.map((m) => predictionToJob(m)),
        evidence: `${matches.length} predictions in the submit window carry the exact input and model: ${ids}`,
      };
    }
    return {
      kind: 'not-found-unproven',
      reason: `no prediction in the submit window carries the exact input and model (${page} page(s)); Replicate's list proves no absence`,
    };
  }

  function verifyCallback(rawBody: Buffer, hdrs: Record<string, string | string[] | undefined>): VerifiedCallback {
    const id = headerValue(hdrs, 'webhook-id');
    const ts = headerValue(hdrs, 'webhook-timestamp');
    const sig = headerValue(hdrs, 'webhook-signature');
    if (!id || !ts || !sig) throw new CallbackVerificationError('missing webhook-id/timestamp/signature', 'missing-headers');
    if (!/^\d+$/.test(ts)) throw new CallbackVerificationError('webhook-timestamp is not a unix time', 'missing-headers');
    const payload = rawBody.toString('utf8');
    const check = webhook.verify({ id, timestamp: ts, signature: sig }, payload);
    if (check === 'too-old' || check === 'too-new') throw new CallbackVerificationError('webhook timestamp outside the tolerance window', 'stale-timestamp');
    if (check === 'missing-headers') throw new CallbackVerificationError('missing webhook headers', 'missing-headers');
    if (check !== 'ok') throw new CallbackVerificationError('webhook signature does not match', 'bad-signature');
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
