// ProviderAdapter for Runway's tasks API (https://docs.dev.runwayml.com/api): POST
// {base}/v1/image_to_video (or /v1/text_to_video without an image) → {id}; GET /v1/tasks/{id};
// DELETE /v1/tasks/{id} cancels a running task (and deletes a finished one: read first).
// `Authorization: Bearer`, `X-Runway-Version`. Runway never calls
// back (poll only) and has neither an idempotency key nor a listing of our tasks: tier 'none'.
// THROTTLED means accepted and queued behind the account's concurrency limit.
import { z } from 'zod';
import { providerProgress } from '../domain/progress';
import type { ProviderJobState } from '../domain/states';
import { createProviderHttp, numericMetrics, ProviderHttpError } from './provider-http';
import {
  CallbackVerificationError,
  NO_LOOKUP,
  type ProviderAdapter,
  type ProviderCapabilities,
  type ModerationRefusal,
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
  // "These URLs will expire within 24-48 hours; fetch the task again to get fresh URLs."
  outputUrlTtlMs: 24 * 3_600_000,
  canRefreshOutputUrl: true,
  listingWindowMs: 0,
  // No request rate is documented (usage tiers cap concurrency and generations a day): an assumption, set per account.
  requestsPerSecond: 5,
  maxConcurrency: 2,
  pollOnly: true,
  queuesExcessWork: true,
  canCancel: true,
  // "There is no maximum requests-per-minute limit, as long as your requests are within your maximum
  // daily generations limit"; over it "a 429 Too Many Requests response to the task creation request"
  // (docs.dev.runwayml.com/usage/tiers). So every 429 on create is the daily cap.
  createCap: 'daily',
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
  /** "Final cost in credits for a terminal task. Fully refunded tasks report 0" (SDK TaskRetrieveResponse). */
  cost: z.looseObject({ credits: z.number().nullish() }).nullish(),
});
export type RunwayTask = z.infer<typeof runwayTaskSchema>;

const createAnswerSchema = z.looseObject({ id: z.string().min(1) });

/**
 * "Failure codes that start with SAFETY. indicate that the task was rejected because of content
 * moderation … SAFETY.INPUT.* … one of the inputs … SAFETY.OUTPUT.* … the output"; "You should not
 * retry these generations" (docs.dev.runwayml.com/errors/task-failures). The code's last part is
 * a best-effort guess at the input, so the side is kept and the rest only as the provider's code.
 */
export function runwayModeration(failureCode: string | null | undefined): ModerationRefusal | null {
  if (!failureCode?.startsWith('SAFETY.')) return null;
  const side = failureCode.startsWith('SAFETY.INPUT.') ? 'input' : failureCode.startsWith('SAFETY.OUTPUT.') ? 'output' : null;
  return { side, code: failureCode };
}

export function runwayTaskToJob(t: RunwayTask): ProviderJob {
  return {
    jobId: t.id,
    state: RUNWAY_STATUS[t.status] as ProviderJobState,
    rawStatus: t.status,
    updatedAt: null,
    outputUrl: t.output?.[0] ?? null,
    error: t.failure ? `${t.failureCode ? `${t.failureCode}: ` : ''}${t.failure}` : null,
    correlationToken: null,
    metrics: numericMetrics({ progress: t.progress, cost_credits: t.cost?.credits }),
    // "A float between 0 and 1 indicating the progress of the task", present while RUNNING.
    progress: t.status === 'RUNNING' ? providerProgress({ fraction: t.progress }) : null,
    moderation: t.status === 'FAILED' ? runwayModeration(t.failureCode) : null,
  };
}

/** Durations 2..10 s, whole seconds (the SDK: "an integer from 2 to 10"). */
const TWO_TO_TEN = [2, 3, 4, 5, 6, 7, 8, 9, 10] as const;

/**
 * Runway's documented model matrix, the models we offer (docs/providers.md "Documented evidence:
 * Runway", from @runwayml/sdk's image-to-video and text-to-video request types): which endpoints
 * take each model, the `ratio` for each of our resolutions, and the allowed durations.
 * gen4_turbo is image_to_video only. A request outside it is refused here, before any call.
 */
export const RUNWAY_MODELS = {
  gen4_turbo: { endpoints: ['image_to_video'], ratios: { '720p': '1280:720' }, durations: TWO_TO_TEN },
  'gen4.5': { endpoints: ['image_to_video', 'text_to_video'], ratios: { '720p': '1280:720' }, durations: TWO_TO_TEN },
  'veo3.1': { endpoints: ['image_to_video', 'text_to_video'], ratios: { '720p': '1280:720', '1080p': '1920:1080' }, durations: [4, 6, 8] },
} as const;
/** promptText: "a non-empty string up to 1000 characters (measured in UTF-16 code units)". */
export const RUNWAY_PROMPT_MAX = 1000;

type Models = typeof RUNWAY_MODELS;
export type RunwayModel = keyof Models;
type Endpoint = 'image_to_video' | 'text_to_video';
type ModelsOn<E extends Endpoint> = { [M in RunwayModel]: E extends Models[M]['endpoints'][number] ? M : never }[RunwayModel];
interface BodyOf<M extends RunwayModel> {
  model: M;
  promptText: string;
  ratio: Models[M]['ratios'][keyof Models[M]['ratios']];
  duration: Models[M]['durations'][number];
}
/** The bodies we send, per model: typed so that test/providers/sdk-types.ts checks them against the SDK's request types. */
export type RunwayImageBody = { [M in ModelsOn<'image_to_video'>]: BodyOf<M> & { promptImage: string } }[ModelsOn<'image_to_video'>];
export type RunwayTextBody = { [M in ModelsOn<'text_to_video'>]: BodyOf<M> }[ModelsOn<'text_to_video'>];
export type RunwayRequest =
  { readonly path: '/v1/image_to_video'; readonly body: RunwayImageBody } | { readonly path: '/v1/text_to_video'; readonly body: RunwayTextBody };
/** Why a request cannot go to Runway, named by our API's field. */
export interface RunwayRefusal {
  readonly field: 'model' | 'resolution' | 'duration_seconds' | 'input_image_url' | 'prompt';
  readonly message: string;
}

const isRunwayModel = (m: string): m is RunwayModel => Object.hasOwn(RUNWAY_MODELS, m);

/** Our task input ({prompt, duration, resolution, first_frame_image?}) → Runway's body, or why it cannot be sent. */
export function runwayRequest(model: string, input: Record<string, unknown>): RunwayRequest | { readonly refused: RunwayRefusal } {
  const refuse = (field: RunwayRefusal['field'], message: string) => ({ refused: { field, message } });
  if (!isRunwayModel(model)) return refuse('model', `${model} is not a Runway video model we send (${Object.keys(RUNWAY_MODELS).join(', ')})`);
  const spec: { endpoints: readonly string[]; ratios: Partial<Record<string, string>>; durations: readonly number[] } = RUNWAY_MODELS[model];
  const image = input['first_frame_image'];
  const endpoint: Endpoint = typeof image === 'string' ? 'image_to_video' : 'text_to_video';
  if (!spec.endpoints.includes(endpoint)) {
    return refuse('input_image_url', `${model} takes ${endpoint === 'text_to_video' ? 'only image_to_video: an input image is required' : 'no input image'}`);
  }
  const ratio = spec.ratios[String(input['resolution'])];
  if (!ratio) return refuse('resolution', `${model} supports ${Object.keys(spec.ratios).join(', ')}`);
  const duration = input['duration'];
  if (typeof duration !== 'number' || !spec.durations.includes(duration)) {
    return refuse('duration_seconds', `${model} takes ${spec.durations.join(', ')} seconds`);
  }
  const prompt = input['prompt'];
  if (typeof prompt !== 'string' || prompt.length === 0 || prompt.length > RUNWAY_PROMPT_MAX) {
    return refuse('prompt', `Runway takes 1 to ${RUNWAY_PROMPT_MAX} characters`);
  }
  // The checks above are the matrix's own; the casts only restate them for the per-model types.
  const body = { model, promptText: prompt, ratio, duration };
  return typeof image === 'string'
    ? { path: '/v1/image_to_video', body: { ...body, promptImage: image } as RunwayImageBody }
    : { path: '/v1/text_to_video', body: body as RunwayTextBody };
}

/** Task states DELETE cancels; on any other state it deletes the task and its output (docs/providers.md). */
const CANCELLABLE: ReadonlySet<string> = new Set(['PENDING', 'THROTTLED', 'RUNNING']);

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
    const request = runwayRequest(req.model, req.input);
    // Refused before sending: the API refuses the same combinations at create (domain/catalog.ts).
    if ('refused' in request) return http.rejected(false, null, `${request.refused.field}: ${request.refused.message}`);
    const { path, body } = request;
    const text = JSON.stringify(body);
    // X-Request-Id: our attempt id, for tracing only (Runway keeps no key of ours).
    const hdrs = { ...headers(true), 'x-request-id': req.attemptId };
    const answer = await http.send(`${base}${path}`, { method: 'POST', route: path, headers: hdrs, body: text }, req.signal);
    if ('kind' in answer) return answer;
    const outcome = http.classifySubmit(answer, (json) => {
      const p = createAnswerSchema.safeParse(json);
      if (!p.success) return { malformed: p.error.message };
      // The create answer is only {id}; the task starts PENDING (or THROTTLED), both accepted.
      return runwayTaskToJob({ id: p.data.id, status: 'PENDING' });
    });
    // A 429 on create is the tier's daily generation cap (RUNWAY_CAPABILITIES.createCap): wait for the reset.
    return outcome.kind === 'rejected' && outcome.status === 429 ? { ...outcome, capped: 'daily' } : outcome;
  }

  async function readTask(jobId: string, what: string, signal?: AbortSignal): Promise<RunwayTask> {
    const raw = await http.read(taskUrl(jobId), { method: 'GET', route: '/v1/tasks/{id}', headers: headers(false) }, what, signal);
    const p = runwayTaskSchema.safeParse(raw);
    if (!p.success) throw http.malformed(what, p.error.message);
    return p.data;
  }

  async function getJob(jobId: string, signal?: AbortSignal): Promise<ProviderJob> {
    return runwayTaskToJob(await readTask(jobId, `getJob ${jobId}`, signal));
  }

  /**
   * DELETE cancels a pending or running task but deletes a finished one, output included, and a
   * deleted task can never be read again. So read first and only cancel what is still
   * cancellable: a task that already succeeded stays readable and its output is rescued.
   */
  async function cancel(jobId: string, signal?: AbortSignal): Promise<void> {
    try {
      const task = await readTask(jobId, `cancel ${jobId} (read first)`, signal);
      if (!CANCELLABLE.has(task.status)) return;
      await http.read(taskUrl(jobId), { method: 'DELETE', route: '/v1/tasks/{id}', headers: headers(false) }, `cancel ${jobId}`, signal);
    } catch (err) {
      // Already aborted or deleted: nothing left to cancel (the poll reads the absence as cancelled).
      if (err instanceof ProviderHttpError && err.status === 404) return;
      throw err;
    }
  }

  function verifyCallback(): VerifiedCallback {
    throw new CallbackVerificationError('runway sends no callbacks (poll only)', 'bad-signature');
  }

  return { capabilities, submit, getJob, cancel, findByCorrelationToken: () => Promise.resolve(NO_LOOKUP), verifyCallback };
}
