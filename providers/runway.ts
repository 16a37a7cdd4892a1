// ProviderAdapter for Runway's tasks API (https://docs.dev.runwayml.com/api): POST
// {base}/v1/image_to_video (or /v1/text_to_video without an image) → {id}; GET /v1/tasks/{id};
// DELETE /v1/tasks/{id} cancels. `Authorization: Bearer`, `X-Runway-Version`. Runway never calls
// back (poll only) and has neither an idempotency key nor a listing of our tasks: tier 'none'.
// THROTTLED means accepted and queued behind the account's concurrency limit.
import { z } from 'zod';
import type { ProviderJobState } from '../domain/states';
import { createProviderHttp, numericMetrics } from './provider-http';
import {
  CallbackVerificationError,
  NO_LOOKUP,
  type ProviderAdapter,
  type ProviderCapabilities,
  type ProviderJob,
  type SubmitOutcome,
  type SubmitRequest,
  type VerifiedCallback,
} from './types';

export const RUNWAY_API_VERSION = '2024-11-06';

export interface RunwayAdapterOptions {
  /** e.g. https://api.dev.runwayml.com or http://127.0.0.1:7081/runway (no trailing /v1). */
  readonly baseUrl: string;
  readonly apiSecret: string;
  readonly timeoutMs: number;
  /** X-Runway-Version (default 2024-11-06). */
  readonly apiVersion?: string;
  /** Runway model used when SubmitRequest.model is not a Runway model name (default gen4_turbo). */
  readonly defaultModel?: string;
  readonly limits?: { readonly requestsPerSecond?: number; readonly maxConcurrency?: number };
  readonly fetch?: typeof fetch;
}

export const RUNWAY_CAPABILITIES: ProviderCapabilities = {
  name: 'runway',
  unknownOutcomeTier: 'none',
  // No key and no listing of our jobs: nothing can be looked up, so nothing can be proved.
  absenceProof: 'none',
  lookupFields: [],
  callbackSignature: 'none',
  // Runway deducts credits for generated output; failed and cancelled tasks are not charged.
  chargeableStates: ['succeeded'],
  outputUrlTtlMs: 24 * 3_600_000,
  canRefreshOutputUrl: false,
  listingWindowMs: 0,
  requestsPerSecond: 5,
  maxConcurrency: 2,
  pollOnly: true,
  queuesExcessWork: true,
  canCancel: true,
  // Not documented: THROTTLED tasks may wait long for the account's slots (PROVIDER_MAX_RUN_MS overrides).
  maxRunMs: 6 * 3_600_000,
};

const RUNWAY_STATUS: Record<string, ProviderJobState> = {
  PENDING: 'queued',
  THROTTLED: 'queued',
  RUNNING: 'running',
  SUCCEEDED: 'succeeded',
  FAILED: 'failed',
  CANCELLED: 'canceled',
};

export const runwayTaskSchema = z.looseObject({
  id: z.string().min(1),
  status: z.enum(['PENDING', 'THROTTLED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED']),
  createdAt: z.string().nullish(),
  output: z.array(z.string()).nullish(),
  failure: z.string().nullish(),
  failureCode: z.string().nullish(),
  progress: z.number().nullish(),
});
export type RunwayTask = z.infer<typeof runwayTaskSchema>;

const createAnswerSchema = z.looseObject({ id: z.string().min(1) });

export function runwayTaskToJob(t: RunwayTask): ProviderJob {
  return {
    jobId: t.id,
    state: RUNWAY_STATUS[t.status] as ProviderJobState,
    rawStatus: t.status,
    updatedAt: null,
    outputUrl: t.output?.[0] ?? null,
    error: t.failure ? `${t.failureCode ? `${t.failureCode}: ` : ''}${t.failure}` : null,
    correlationToken: null,
    metrics: numericMetrics({ progress: t.progress }),
  };
}

/** Runway ratios are "W:H" pixel sizes. */
const RATIO: Record<string, string> = { '480p': '854:480', '720p': '1280:720', '1080p': '1920:1080' };

/** Our task input → Runway's request body; image tasks go to image_to_video. */
export function runwayRequest(model: string, input: Record<string, unknown>): { path: string; body: Record<string, unknown> } {
  const image = input['first_frame_image'] ?? input['promptImage'] ?? input['image'];
  const resolution = typeof input['resolution'] === 'string' ? input['resolution'] : '720p';
  const body: Record<string, unknown> = {
    model,
    promptText: input['prompt'],
    ratio: input['ratio'] ?? RATIO[resolution] ?? RATIO['720p'],
    duration: input['duration'] ?? 5,
    ...(typeof input['seed'] === 'number' ? { seed: input['seed'] } : {}),
  };
  if (typeof image === 'string') return { path: '/v1/image_to_video', body: { ...body, promptImage: image } };
  return { path: '/v1/text_to_video', body };
}

export function createRunwayAdapter(opts: RunwayAdapterOptions): ProviderAdapter {
  const base = opts.baseUrl.replace(/\/+$/, '');
  const http = createProviderHttp({ name: 'runway', timeoutMs: opts.timeoutMs, fetch: opts.fetch, secrets: () => [opts.apiSecret] });
  const capabilities: ProviderCapabilities = { ...RUNWAY_CAPABILITIES, ...opts.limits };
  const headers = (json: boolean): Record<string, string> => ({
    authorization: `Bearer ${opts.apiSecret}`,
    'x-runway-version': opts.apiVersion ?? RUNWAY_API_VERSION,
    accept: 'application/json',
    ...(json ? { 'content-type': 'application/json' } : {}),
  });
  const taskUrl = (id: string): string => `${base}/v1/tasks/${encodeURIComponent(id)}`;

  async function submit(req: SubmitRequest): Promise<SubmitOutcome> {
    // Our model ids are "owner/name"; Runway wants its own model name (gen4_turbo, …).
    const model = req.model.includes('/') ? (opts.defaultModel ?? 'gen4_turbo') : req.model;
    const { path, body } = runwayRequest(model, req.input);
    let text: string;
    try {
      text = JSON.stringify(body);
    } catch (err) {
      return http.rejected(false, null, `request body not serialisable: ${(err as Error).message}`);
    }
    // X-Request-Id: our attempt id, for tracing only (Runway keeps no key of ours).
    const hdrs = { ...headers(true), 'x-request-id': req.attemptId };
    const answer = await http.send(`${base}${path}`, { method: 'POST', headers: hdrs, body: text }, req.signal);
    if ('kind' in answer) return answer;
    return http.classifySubmit(answer, (json) => {
      const p = createAnswerSchema.safeParse(json);
      if (!p.success) return { malformed: p.error.message };
      // The create answer is only {id}; the task starts PENDING (or THROTTLED), both accepted.
      return runwayTaskToJob({ id: p.data.id, status: 'PENDING' });
    });
  }

  async function getJob(jobId: string, signal?: AbortSignal): Promise<ProviderJob> {
    const what = `getJob ${jobId}`;
    const raw = await http.read(taskUrl(jobId), { method: 'GET', headers: headers(false) }, what, signal);
    const p = runwayTaskSchema.safeParse(raw);
    if (!p.success) throw http.malformed(what, p.error.message);
    return runwayTaskToJob(p.data);
  }

  async function cancel(jobId: string, signal?: AbortSignal): Promise<void> {
    await http.read(taskUrl(jobId), { method: 'DELETE', headers: headers(false) }, `cancel ${jobId}`, signal);
  }

  function verifyCallback(): VerifiedCallback {
    throw new CallbackVerificationError('runway sends no callbacks (poll only)', 'bad-signature');
  }

  return { capabilities, submit, getJob, cancel, findByCorrelationToken: () => Promise.resolve(NO_LOOKUP), verifyCallback };
}
