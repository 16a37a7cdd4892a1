// ProviderAdapter for Kling's video API (https://app.klingai.com/global/dev/document-api):
// POST {base}/v1/videos/text2video with external_task_id = our attempt id and callback_url;
// GET {base}/v1/videos/text2video/{id}, where id is "task ID or external task ID" as Kling
// documents it: that get by our own key is the lookup of an unknown submit (tier 'lookup-by-key').
// A miss proves nothing: Kling documents no not-found answer for a task id (1203 names a missing
// resource "such as the model"; the live API answered an unknown id with HTTP 400, code 1201) and
// promises no read-after-write for a new task. What Kling does document is that external_task_id
// is unique per account, so an unknown outcome is settled by sending the same create again
// (`resendable`): accepted, the job is ours; refused as a duplicate, a job with our key exists
// and the lookup waits until it is readable (docs/providers.md "Proof of absence"). The list
// endpoint takes pageNum/pageSize only, so it is never used to look for a key. JWT auth from an
// access and a secret key. Callbacks carry no signature: they only hint at a re-fetch with an
// authenticated GET.
import { z } from 'zod';
import type { ProviderJobState } from '../domain/states';
import { klingTextFields, type KlingRefusal } from './kling-input';
import { createKlingTokenSource } from './kling-jwt';
import { createProviderHttp, numericMetrics, ProviderHttpError, toDate, type HttpAnswer } from './provider-http';
import { parseRetryAfter } from './http-errors';
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

export interface KlingAdapterOptions {
  /** e.g. https://api-singapore.klingai.com or http://127.0.0.1:7081/kling (no trailing /v1). */
  readonly baseUrl: string;
  readonly accessKey: string;
  readonly secretKey: string;
  readonly timeoutMs: number;
  /** JWT lifetime and refresh margin, seconds (defaults 1800 / 300). */
  readonly tokenTtlSeconds?: number;
  readonly tokenRefreshMarginSeconds?: number;
  readonly limits?: { readonly requestsPerSecond?: number; readonly maxConcurrency?: number };
  readonly fetch?: typeof fetch;
  readonly now?: () => number;
}

export const KLING_CAPABILITIES: ProviderCapabilities = {
  name: 'kling',
  unknownOutcomeTier: 'lookup-by-key',
  // No documented not-found answer for a task id, no read-after-write for a new one: a miss proves nothing.
  absenceProof: 'none',
  lookupFields: ['GET /v1/videos/text2video/{external_task_id}', 'data.task_info.external_task_id'],
  // external_task_id "must be unique within a single user account": a second create with it is refused.
  resendable: true,
  callbackSignature: 'none',
  // Failed tasks do not consume the resource pack.
  chargeableStates: ['succeeded'],
  // Kling clears generated videos after 30 days.
  outputUrlTtlMs: 30 * 24 * 3_600_000,
  canRefreshOutputUrl: false,
  listingWindowMs: 30 * 24 * 3_600_000,
  // Code 1302 names a rate limit but no figure is published: an assumption, set per account (POLL_QUEUE_RATES).
  requestsPerSecond: 5,
  maxConcurrency: 5,
  pollOnly: false,
  queuesExcessWork: false,
  canCancel: false,
  // Not documented: a generous bound on queue plus run time (PROVIDER_MAX_RUN_MS overrides).
  maxRunMs: 2 * 3_600_000,
};

const KLING_STATUS: Record<string, ProviderJobState> = {
  submitted: 'queued',
  processing: 'running',
  succeed: 'succeeded',
  failed: 'failed',
};

export const klingTaskSchema = z.looseObject({
  task_id: z.string().min(1),
  task_status: z.enum(['submitted', 'processing', 'succeed', 'failed']),
  task_status_msg: z.string().nullish(),
  task_info: z.looseObject({ external_task_id: z.string().nullish() }).nullish(),
  created_at: z.number().nullish(),
  updated_at: z.number().nullish(),
  task_result: z
    .looseObject({
      videos: z.array(z.looseObject({ id: z.string().nullish(), url: z.string(), duration: z.union([z.string(), z.number()]).nullish() })).nullish(),
    })
    .nullish(),
});
export type KlingTask = z.infer<typeof klingTaskSchema>;

const envelopeSchema = z.looseObject({
  code: z.number(),
  message: z.string().nullish(),
  request_id: z.string().nullish(),
  data: z.unknown().optional(),
});

export function klingTaskToJob(t: KlingTask): ProviderJob {
  const video = t.task_result?.videos?.[0];
  const duration = video?.duration === undefined || video.duration === null ? undefined : Number(video.duration);
  return {
    jobId: t.task_id,
    state: KLING_STATUS[t.task_status] as ProviderJobState,
    rawStatus: t.task_status,
    updatedAt: toDate(t.updated_at ?? t.created_at),
    outputUrl: video?.url ?? null,
    error: t.task_status === 'failed' ? (t.task_status_msg ?? 'failed') : null,
    correlationToken: t.task_info?.external_task_id ?? null,
    metrics: numericMetrics({ duration }),
  };
}

/**
 * The answers a get by an id Kling does not (yet) serve comes back with: 404 + 1203 ("the requested
 * resource does not exist, such as the model") and 400 + 1201 (what the live API answered for an
 * unknown task id). A lookup reads either as a miss, and a miss proves nothing.
 */
const KLING_LOOKUP_MISSES: readonly { readonly status: number; readonly code: number }[] = [
  { status: 404, code: 1203 },
  { status: 400, code: 1201 },
];

/** Kling's model name from ours: "kwaivgi/kling-v2.1" → "kling-v2-1". */
export function klingModelName(model: string): string {
  return (model.split('/').pop() ?? model).replace(/\./g, '-');
}

/** Our task input → Kling's text2video body (the model's own limits: providers/kling-input.ts), or why it cannot be sent. */
export function klingRequest(req: SubmitRequest): { readonly body: Record<string, unknown> } | { readonly refused: KlingRefusal } {
  const { input } = req;
  const model = klingTextFields(klingModelName(req.model), input);
  if ('refused' in model) return model;
  return {
    body: {
      model_name: klingModelName(req.model),
      prompt: input['prompt'],
      ...(typeof input['negative_prompt'] === 'string' ? { negative_prompt: input['negative_prompt'] } : {}),
      ...model.fields,
      aspect_ratio: typeof input['aspect_ratio'] === 'string' ? input['aspect_ratio'] : '16:9',
      callback_url: req.webhookUrl,
      external_task_id: req.attemptId,
    },
  };
}

/**
 * A refusal that says our key is taken. Kling documents that external_task_id must be unique per
 * account but not the code or message of the refusal (the simulator answers 400, code 1201,
 * "external_task_id already exists"), so any refusal whose message names the key or a duplicate is
 * read as one: that can only keep an outcome unknown (and count as evidence of a job), never
 * reject an attempt.
 */
const DUPLICATE_KEY = /external[\s_-]?task[\s_-]?id|duplicat|already\s+(?:exist|used|in use|submitted)|repeat|unique/i;

/**
 * Kling's business codes (the body's `code`) decide a refused submit: auth and account errors,
 * invalid parameters and content policy are final; 1302/1303 (rate, concurrency) are retryable;
 * 5000-5002 leave the outcome unknown. A refusal about our key (DUPLICATE_KEY) is `duplicate`: a
 * task with our key exists, so the outcome is unknown and the lookup by the key will find it.
 */
export function classifyKlingRefusal(code: number, message: string): 'final' | 'retryable' | 'unknown' | 'duplicate' {
  if (DUPLICATE_KEY.test(message)) return 'duplicate';
  if (code === 1302 || code === 1303) return 'retryable';
  if (code >= 5000) return 'unknown';
  return 'final';
}

export function createKlingAdapter(opts: KlingAdapterOptions): ProviderAdapter {
  const base = opts.baseUrl.replace(/\/+$/, '');
  const tokens = createKlingTokenSource({
    accessKey: opts.accessKey,
    secretKey: opts.secretKey,
    ...(opts.tokenTtlSeconds !== undefined ? { ttlSeconds: opts.tokenTtlSeconds } : {}),
    ...(opts.tokenRefreshMarginSeconds !== undefined ? { refreshMarginSeconds: opts.tokenRefreshMarginSeconds } : {}),
    ...(opts.now ? { now: opts.now } : {}),
  });
  const http = createProviderHttp({
    name: 'kling',
    timeoutMs: opts.timeoutMs,
    fetch: opts.fetch,
    secrets: () => [opts.accessKey, opts.secretKey, tokens.current() ?? ''],
  });
  const capabilities: ProviderCapabilities = { ...KLING_CAPABILITIES, ...opts.limits };
  const headers = (json: boolean): Record<string, string> => ({
    authorization: `Bearer ${tokens.token()}`,
    accept: 'application/json',
    ...(json ? { 'content-type': 'application/json' } : {}),
  });
  const collection = `${base}/v1/videos/text2video`;

  /** The envelope's data as a task, or a ProviderHttpError. */
  function taskOf(body: unknown, what: string): KlingTask {
    const env = envelopeSchema.safeParse(body);
    if (!env.success) throw http.malformed(what, env.error.message);
    if (env.data.code !== 0)
      throw new ProviderHttpError(http.redact(`kling ${what}: code ${env.data.code}: ${env.data.message ?? ''}`), null, env.data.code >= 5000);
    const t = klingTaskSchema.safeParse(env.data.data);
    if (!t.success) throw http.malformed(what, t.error.message);
    return t.data;
  }

  function refusal(a: HttpAnswer): SubmitOutcome | null {
    if (a.text === null) return null;
    let env: z.infer<typeof envelopeSchema>;
    try {
      const p = envelopeSchema.safeParse(JSON.parse(a.text));
      if (!p.success || p.data.code === 0) return null;
      env = p.data;
    } catch {
      return null;
    }
    const message = env.message ?? '';
    const status = a.status >= 400 ? a.status : null;
    switch (classifyKlingRefusal(env.code, message)) {
      case 'duplicate': {
        const taken = http.unknown(`refused as a duplicate of external_task_id (a task with it exists): code ${env.code}: ${http.clip(message)}`);
        return taken.kind === 'unknown' ? { ...taken, keyTaken: true } : taken;
      }
      case 'unknown':
        return http.unknown(`code ${env.code}: ${http.clip(message)}`);
      case 'retryable':
        return http.rejected(true, status, `code ${env.code}: ${http.clip(message)}`, parseRetryAfter(a.headers.get('retry-after')));
      case 'final':
        return http.rejected(false, status, `code ${env.code}: ${http.clip(message)}`);
    }
  }

  async function submit(req: SubmitRequest): Promise<SubmitOutcome> {
    // Refused before sending: the API refuses the same combinations at create (domain/catalog.ts).
    const request = klingRequest(req);
    if ('refused' in request) return http.rejected(false, null, `${request.refused.field}: ${request.refused.message}`);
    let body: string;
    try {
      body = JSON.stringify(request.body);
    } catch (err) {
      return http.rejected(false, null, `request body not serialisable: ${(err as Error).message}`);
    }
    const answer = await http.send(collection, { method: 'POST', route: '/v1/videos/text2video', headers: headers(true), body }, req.signal);
    if ('kind' in answer) return answer;
    // A refusal in Kling's envelope (any HTTP status except a 5xx, which never proves absence).
    if (answer.status < 500) {
      const r = refusal(answer);
      if (r) return r;
    }
    return http.classifySubmit(answer, (json) => {
      const env = envelopeSchema.safeParse(json);
      if (!env.success) return { malformed: env.error.message };
      const t = klingTaskSchema.safeParse(env.data.data);
      if (!t.success) return { malformed: t.error.message };
      return klingTaskToJob(t.data);
    });
  }

  /** Kling's envelope of an answer's body, or null when it carries none. */
  function envelopeOf(text: string | null): z.infer<typeof envelopeSchema> | null {
    try {
      const parsed = envelopeSchema.safeParse(JSON.parse(text ?? ''));
      return parsed.success ? parsed.data : null;
    } catch {
      return null;
    }
  }
  const isMiss = (status: number, env: z.infer<typeof envelopeSchema> | null): boolean =>
    KLING_LOOKUP_MISSES.some((m) => m.status === status && m.code === env?.code);

  async function getJob(jobId: string, signal?: AbortSignal): Promise<ProviderJob> {
    const what = `getJob ${jobId}`;
    const answer = await http.send(
      `${collection}/${encodeURIComponent(jobId)}`,
      { method: 'GET', route: '/v1/videos/text2video/{id}', headers: headers(false) },
      signal,
    );
    if ('kind' in answer) throw new ProviderHttpError(http.redact(`kling ${what}: ${'reason' in answer ? answer.reason : answer.kind}`), null, true);
    const env = envelopeOf(answer.text);
    // A task Kling gave us the id of, not readable (yet): Kling promises no read-after-write and
    // documents no not-found answer for a task, so this is no "gone"; it is bounded by the maximum
    // run time like any transient read failure (activities/provider-reads.ts).
    if (isMiss(answer.status, env)) {
      throw new ProviderHttpError(
        http.redact(`kling ${what}: not readable (HTTP ${answer.status}, code ${env?.code}): ${http.describeBody(answer.text)}`),
        null,
        true,
      );
    }
    if (answer.status === 404) throw new ProviderHttpError(http.redact(`kling ${what}: not found`), 404, false);
    if (answer.status < 200 || answer.status > 299) {
      const transient = answer.status >= 500 || answer.status === 429 || answer.status === 408;
      throw new ProviderHttpError(
        http.redact(`kling ${what}: HTTP ${answer.status}: ${http.describeBody(answer.text, answer.readError)}`),
        answer.status,
        transient,
      );
    }
    if (!env) throw http.malformed(what, answer.text === null ? `body unreadable (${answer.readError})` : 'not an envelope');
    return klingTaskToJob(taskOf(env, what));
  }

  /** The task our key names, by the documented get-by-external-id; a miss (KLING_LOOKUP_MISSES) proves nothing. */
  async function findByCorrelationToken(q: LookupQuery): Promise<LookupResult> {
    const what = `lookup external_task_id ${q.token}`;
    const answer = await http.send(
      `${collection}/${encodeURIComponent(q.token)}`,
      { method: 'GET', route: '/v1/videos/text2video/{external_task_id}', headers: headers(false) },
      q.signal,
    );
    if ('kind' in answer) throw new ProviderHttpError(http.redact(`kling ${what}: ${'reason' in answer ? answer.reason : answer.kind}`), null, true);
    const env = envelopeOf(answer.text);
    if (isMiss(answer.status, env)) {
      // Not readable (yet): Kling promises no read-after-write for a new task, nor a not-found answer.
      return { kind: 'not-found-unproven', reason: `kling answered HTTP ${answer.status} code ${env?.code} for external_task_id ${q.token}` };
    }
    if (answer.status < 200 || answer.status > 299 || !env || env.code !== 0) {
      // A proxy's 404, a wrong path (1202), a 5xx: nothing learned.
      const transient = answer.status >= 500 || answer.status === 429 || answer.status === 404;
      throw new ProviderHttpError(
        http.redact(`kling ${what}: HTTP ${answer.status} code ${env?.code ?? '-'}: ${http.describeBody(answer.text)}`),
        answer.status === 404 ? null : answer.status,
        transient,
      );
    }
    const t = klingTaskSchema.safeParse(env.data);
    if (!t.success) throw http.malformed(what, t.error.message);
    // Match strictly on our key (never "whatever came back").
    if (t.data.task_info?.external_task_id !== q.token) {
      return { kind: 'not-found-unproven', reason: `kling answered task ${t.data.task_id} without our external_task_id` };
    }
    return { kind: 'found', job: klingTaskToJob(t.data), by: 'key' };
  }

  function verifyCallback(rawBody: Buffer): VerifiedCallback {
    // No signature: take only the task id (and our key) from the body, never its state.
    let json: unknown;
    try {
      json = JSON.parse(rawBody.toString('utf8'));
    } catch {
      throw new CallbackVerificationError('callback body is not JSON', 'bad-payload');
    }
    const p = z.looseObject({ task_id: z.string().min(1), task_info: z.looseObject({ external_task_id: z.string().nullish() }).nullish() }).safeParse(json);
    if (!p.success) throw new CallbackVerificationError('callback body has no task_id', 'bad-payload');
    // The body's external_task_id proves nothing (unsigned), but one that is not ours lets the
    // API refuse before it spends a provider read; the re-fetched task's own is what binds.
    const claimed = p.data.task_info?.external_task_id ?? null;
    return {
      providerEventId: null,
      job: {
        jobId: p.data.task_id,
        state: 'queued',
        rawStatus: 'unverified',
        updatedAt: null,
        outputUrl: null,
        error: null,
        correlationToken: claimed,
        metrics: null,
      },
      payload: { task_id: p.data.task_id },
      needsRefetch: true,
    };
  }

  return {
    capabilities,
    submit,
    getJob,
    // Kling has no cancel API: the job runs to its end and the state machine decides (docs/design.md §5 Cancel).
    cancel: () => Promise.resolve(),
    findByCorrelationToken,
    verifyCallback,
  };
}
