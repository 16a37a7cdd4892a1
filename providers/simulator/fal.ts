// fal's queue protocol under /fal: POST /{model_id}?fal_webhook=… → request_id and URLs;
// GET /{app}/requests/{id}/status (IN_QUEUE with queue_position → IN_PROGRESS → COMPLETED; the
// status never says how the request ended), GET /{app}/requests/{id} (the result, or the error
// the model returned; kept for resultRetentionMs after completion, then 404), PUT …/cancel. Over the account's concurrency the work
// waits IN_QUEUE (fal queues instead of answering 429). One completion webhook per request,
// signed with ED25519 the way fal signs; the JWKS is served at /fal/.well-known/jwks.json and
// POST /_sim/fal/rotate-key replaces the key. A submit's X-Fal-Request-Timeout is honoured: a
// request no runner started within it ends with a 504 and `X-Fal-Request-Timeout-Type: user`.
import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import express, { type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { WebhookSender } from './webhooks';
import { JobStore, simLogLines, TERMINAL_PHASES, type ProtocolDeps, type SimJob } from './jobs';
import { runSubmit, tokenOfUrl } from './submit-faults';

export const SIM_FAL_DEFAULTS = {
  apiKey: 'sim-fal-key-id:sim-fal-key-secret',
  userId: 'sim-fal-user',
  concurrency: 2,
  resultRetentionMs: 3_600_000,
} as const;

/** "If the result is 10 KB or larger, fal keeps it for 6 minutes." */
const LARGE_RESULT_BYTES = 10 * 1024;
const LARGE_RESULT_RETENTION_MS = 6 * 60_000;

export interface FalSimOptions {
  readonly apiKey: string;
  readonly userId: string;
  /** Requests running at once; the rest wait IN_QUEUE. */
  readonly concurrency: number;
  /** How long a completed request's result can be fetched (fal: 1 hour; at most 6 minutes for a result of 10 KB or more). */
  readonly resultRetentionMs: number;
}

interface SigningKey {
  readonly kid: string;
  readonly privateKey: KeyObject;
  readonly jwk: Record<string, unknown>;
}

function newKey(): SigningKey {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const kid = `sim-${randomBytes(6).toString('hex')}`;
  return { kid, privateKey, jwk: { ...publicKey.export({ format: 'jwk' }), kid, alg: 'EdDSA', use: 'sig' } };
}

/** fal's signed message, written independently of the adapter's so a shared mistake cannot hide. */
function signFal(key: KeyObject, requestId: string, userId: string, ts: string, body: string): string {
  const digest = createHash('sha256').update(body, 'utf8').digest('hex');
  return sign(null, Buffer.from([requestId, userId, ts, digest].join('\n'), 'utf8'), key).toString('hex');
}

const appOf = (model: string): string => model.split('/').slice(0, 2).join('/');

/** What a request not started within its X-Fal-Request-Timeout ends with (fal: a 504, `X-Fal-Request-Timeout-Type: user`). */
const START_TIMEOUT_ERROR = 'Request timed out before a runner started it (X-Fal-Request-Timeout)';

/** The submit's X-Fal-Request-Timeout in ms ("> 0.1 seconds"), or null when absent or not a number of seconds. */
function startTimeoutMs(req: Request): number | null {
  const seconds = Number(req.get('x-fal-request-timeout') ?? NaN);
  return Number.isFinite(seconds) && seconds > 0.1 ? seconds * 1000 : null;
}

/**
 * Inputs as fal documents them for endpoints outside the catalog that the simulator checks
 * (@fal-ai/client types/endpoints.d.ts, Kling text-to-video); the catalog's endpoints are checked
 * against their published schemas (deps.inputs), other endpoints take any JSON object. Extra keys
 * pass, as fal's pydantic models let them.
 */
const klingTextInput = z.looseObject({
  prompt: z.string(),
  duration: z.enum(['5', '10']).optional(),
  aspect_ratio: z.enum(['16:9', '9:16', '1:1']).optional(),
  negative_prompt: z.string().optional(),
  cfg_scale: z.number().optional(),
});
const INPUTS: Record<string, z.ZodType<Record<string, unknown>>> = {
  'fal-ai/kling-video/v2.1/master/text-to-video': klingTextInput,
};
const anyInput = z.record(z.string(), z.unknown());

/** A model validation error as fal answers it: 422 with `detail`, an array of typed errors. */
const validationDetail = (issues: z.core.$ZodIssue[]) => issues.map((i) => ({ loc: ['body', ...i.path.map(String)], msg: i.message, type: 'value_error' }));

export function createFalProtocol(deps: ProtocolDeps, o: FalSimOptions) {
  let key = newKey();
  const wrongKey = newKey();
  const store: JobStore = new JobStore({
    prefix: 'fal',
    baseUrl: deps.baseUrl,
    generationMs: deps.generationMs,
    outputTtlMs: deps.outputTtlMs,
    concurrency: o.concurrency,
    media: deps.media,
    signer: deps.signer,
    logger: deps.logger,
    onChange: (job) => {
      if (job.webhook && ['succeeded', 'failed', 'canceled'].includes(job.phase)) emitCompleted(job);
    },
  });
  const urls = (job: SimJob) => {
    const r = `${deps.baseUrl()}/fal/${appOf(job.model)}/requests/${job.id}`;
    return { response_url: r, status_url: `${r}/status`, cancel_url: `${r}/cancel` };
  };

  function resultPayload(job: SimJob): Record<string, unknown> {
    return { video: { url: job.output, content_type: 'video/mp4', file_name: 'output.mp4' }, seed: job.seq };
  }

  function emitCompleted(job: SimJob): void {
    const ok = job.phase === 'succeeded';
    const body = JSON.stringify({
      request_id: job.id,
      gateway_request_id: job.id,
      status: ok ? 'OK' : 'ERROR',
      payload: ok ? resultPayload(job) : { detail: job.error },
      ...(ok ? {} : { error: job.error }),
    });
    deps.webhooks.emit({
      id: WebhookSender.newEventId(),
      type: 'completed',
      predictionId: `fal:${job.id}`,
      url: job.webhook as string,
      body,
      provider: 'fal',
      headers: (now, wrong) => {
        const ts = String(Math.floor(now.getTime() / 1000));
        return {
          'user-agent': 'fal-simulator/1',
          'x-fal-webhook-request-id': job.id,
          'x-fal-webhook-user-id': o.userId,
          'x-fal-webhook-timestamp': ts,
          'x-fal-webhook-signature': signFal((wrong ? wrongKey : key).privateKey, job.id, o.userId, ts, body),
        };
      },
    });
  }

  /** fal's status answer: the queue fields, queue_position while queued, logs and metrics; never the outcome. */
  function statusJson(job: SimJob, logs: boolean): Record<string, unknown> {
    const base = { request_id: job.id, ...urls(job) };
    // fal's log entries: message, level, source, timestamp (only with ?logs=1).
    const logLines = () =>
      simLogLines(job.startedAt, job.generationMs, job.completedAt ?? new Date()).map((message) => ({
        message,
        level: 'INFO',
        source: 'user',
        timestamp: (job.startedAt ?? job.createdAt).toISOString(),
      }));
    switch (job.phase) {
      case 'queued':
      case 'pending':
        return { status: 'IN_QUEUE', queue_position: store.queuePosition(job), ...base };
      case 'running':
        return { status: 'IN_PROGRESS', ...base, logs: logs ? logLines() : null };
      default: {
        const inference = job.startedAt && job.completedAt ? (job.completedAt.getTime() - job.startedAt.getTime()) / 1000 : null;
        return { status: 'COMPLETED', ...base, logs: logs ? logLines() : null, metrics: { inference_time: inference } };
      }
    }
  }

  /**
   * Whether the result is still kept: resultRetentionMs after completion (1 hour), at most 6
   * minutes for a large result. The test knob `[sim:result_ttl=N]` in a prompt keeps it N ms.
   */
  function resultKept(job: SimJob): boolean {
    const bytes = Buffer.byteLength(JSON.stringify(job.phase === 'succeeded' ? resultPayload(job) : { detail: job.error }));
    const knob = /\[sim:result_ttl=(\d+)\]/.exec(typeof job.input['prompt'] === 'string' ? job.input['prompt'] : '');
    const window = knob ? Number(knob[1]) : o.resultRetentionMs;
    const keepMs = bytes >= LARGE_RESULT_BYTES ? Math.min(window, LARGE_RESULT_RETENTION_MS) : window;
    return job.completedAt !== null && Date.now() - job.completedAt.getTime() < keepMs;
  }

  const r = express.Router();
  r.get('/.well-known/jwks.json', (_req, res) => void res.json({ keys: [key.jwk] }));
  r.get('/files/:id/output.mp4', store.serveOutput);
  r.use((req: Request, res: Response, next: NextFunction) => {
    if (req.get('authorization') !== `Key ${o.apiKey}`) return void res.status(401).json({ detail: 'Unauthorized' });
    next();
  });

  /** The job when it exists under this app id, else a 404 answer. */
  const find = (req: Request, res: Response): SimJob | null => {
    const job = store.get(String(req.params['id']));
    if (!job || appOf(job.model) !== `${String(req.params['owner'])}/${String(req.params['app'])}`) {
      res.status(404).json({ detail: 'Request not found' });
      return null;
    }
    return job;
  };
  r.get('/:owner/:app/requests/:id/status', (req, res) => {
    if (deps.faults.for('fal').status === 'error_5xx') return void res.status(500).json({ detail: 'simulated failure' });
    const job = find(req, res);
    // 202 while the request is queued or in progress, 200 once it is complete.
    if (job) res.status(TERMINAL_PHASES.includes(job.phase) ? 200 : 202).json(statusJson(job, req.query['logs'] === '1'));
  });
  r.get('/:owner/:app/requests/:id', (req, res) => {
    if (deps.faults.for('fal').status === 'error_5xx') return void res.status(500).json({ detail: 'simulated failure' });
    const job = find(req, res);
    if (!job) return;
    res.set('x-fal-request-id', job.id);
    if (!TERMINAL_PHASES.includes(job.phase)) return void res.status(400).json({ detail: 'Request is still in progress' });
    if (!resultKept(job)) return void res.status(404).json({ detail: 'Request not found' });
    if (job.phase === 'succeeded') return void res.json(resultPayload(job));
    if (job.error === START_TIMEOUT_ERROR) return void res.status(504).set('x-fal-request-timeout-type', 'user').json({ detail: job.error });
    // "If the model returned an error, this operation returns the same error": a model error
    // is a 422 with a `detail` array of typed errors.
    if (job.phase === 'failed') return void res.status(422).json({ detail: [{ loc: ['body'], msg: job.error, type: 'value_error' }] });
    res.status(400).json({ detail: job.error });
  });
  r.put('/:owner/:app/requests/:id/cancel', (req, res) => {
    const job = find(req, res);
    if (!job) return;
    if (!store.cancel(job)) return void res.status(400).json({ status: 'ALREADY_COMPLETED' });
    res.status(202).json({ status: 'CANCELLATION_REQUESTED' });
  });
  r.post('/*model', (req, res) => {
    const model = req.params.model.join('/');
    const webhook = typeof req.query['fal_webhook'] === 'string' ? req.query['fal_webhook'] : null;
    if (model.split('/').length < 2) return void res.status(404).json({ detail: 'Application not found' });
    const issues = deps.inputs.check('fal', model, 'input', req.body);
    if (issues && issues.length > 0) {
      const detail = issues.map((i) => ({ loc: ['body', ...i.path.split('/').filter(Boolean)], msg: i.message, type: 'value_error' }));
      return void res.status(422).json({ detail });
    }
    const input = (INPUTS[model] ?? anyInput).safeParse(req.body);
    if (!input.success) return void res.status(422).json({ detail: validationDetail(input.error.issues) });
    const config = deps.faults.for('fal');
    const startWithin = startTimeoutMs(req);
    runSubmit(req, res, deps.faults.takeSubmitFault('fal', undefined, tokenOfUrl(webhook)), config, deps.pendingAnswers, {
      create: () => {
        const job = store.create({ model, input: { ...input.data, duration: Number(input.data['duration'] ?? 5) }, token: tokenOfUrl(webhook), webhook });
        if (startWithin !== null) store.failIfNotStartedWithin(job, startWithin, START_TIMEOUT_ERROR);
        return job;
      },
      answer: (job) => void res.json({ status: 'IN_QUEUE', request_id: job.id, ...urls(job), queue_position: store.queuePosition(job) }),
      errorBeforeAccept: () => void res.status(500).json({ detail: 'simulated failure' }),
      errorAfterAccept: () => void res.status(502).json({ detail: 'simulated failure after accepting' }),
      rateLimited: () => void res.status(429).json({ detail: 'Too many requests' }),
    });
  });

  return {
    router: r,
    store,
    /** Replace the signing key (the JWKS then serves only the new one); returns its kid. */
    rotateKey(): string {
      key = newKey();
      return key.kid;
    },
  };
}
