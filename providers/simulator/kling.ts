// Kling's video protocol under /kling: JWT (HS256, iss = access key, exp/nbf) on every call;
// POST /v1/videos/text2video with external_task_id (unique per account: a second task with the
// same key is refused, HTTP 400 code 1201 naming the key, before any fault knob applies: Kling
// documents the uniqueness, not the refusal's shape) and callback_url; GET
// /v1/videos/text2video/{id}, where id is "task ID or external task ID" (a miss: HTTP 404 code 1203,
// or 400 code 1201 as the live API answered an unknown id: `notFound`); GET /v1/videos/text2video
// with pageNum/pageSize only (any other query, such as external_task_id, is ignored, as a server
// ignores parameters it does not document: the newest page comes back). A new task may become
// readable only `visibleAfterMs` after it was created (Kling promises no read-after-write); the
// uniqueness of its key holds from the create on. Over the account's concurrency Kling answers 429
// code 1303 (it does not queue). Unsigned callbacks on processing and on the terminal state,
// carrying the task object.
import { createHmac, timingSafeEqual } from 'node:crypto';
import express, { type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { WebhookSender } from './webhooks';
import { JobStore, type ProtocolDeps, type SimJob } from './jobs';
import { runSubmit } from './submit-faults';

/** What a get of an id Kling does not serve answers: HTTP status and business code. */
export type KlingNotFoundShape = '404-1203' | '400-1201';

export const SIM_KLING_DEFAULTS = {
  accessKey: 'sim-kling-access-key',
  secretKey: 'sim-kling-secret-key-0123456789',
  concurrency: 5,
  visibleAfterMs: 0,
  notFound: '404-1203',
} as const;

export interface KlingSimOptions {
  readonly accessKey: string;
  readonly secretKey: string;
  readonly concurrency: number;
  /** A new task is readable only this long after its create (the fault knob kling_visible_after_ms overrides). */
  readonly visibleAfterMs: number;
  /** The answer to a get of an id not served (the fault knob kling_not_found overrides). */
  readonly notFound: KlingNotFoundShape;
}

/** Text-to-video model names from Kling's capability map (docs/providers.md); others are refused (1201). */
export const KLING_TEXT2VIDEO_MODELS = ['kling-v1', 'kling-v1-6', 'kling-v2-master', 'kling-v2-1-master'] as const;

const createBody = z.object({
  model_name: z.enum(KLING_TEXT2VIDEO_MODELS).default('kling-v1'),
  prompt: z.string().min(1).max(2500),
  negative_prompt: z.string().max(2500).optional(),
  cfg_scale: z.number().min(0).max(1).optional(),
  mode: z.enum(['std', 'pro']).optional(),
  aspect_ratio: z.enum(['16:9', '9:16', '1:1']).optional(),
  duration: z.enum(['5', '10']).optional(),
  callback_url: z.url().optional(),
  external_task_id: z.string().min(1).max(128).optional(),
});

const STATUS: Record<SimJob['phase'], string> = {
  queued: 'submitted',
  pending: 'submitted',
  running: 'processing',
  succeeded: 'succeed',
  failed: 'failed',
  canceled: 'failed',
};

/** Kling's auth codes: 1001 missing, 1002 invalid, 1003 not yet valid, 1004 expired; null = valid. */
export function checkKlingJwt(
  authorization: string | undefined,
  o: Pick<KlingSimOptions, 'accessKey' | 'secretKey'>,
  nowS: number,
): { code: number; message: string } | null {
  const m = /^Bearer\s+([\w-]+)\.([\w-]+)\.([\w-]+)$/.exec(authorization ?? '');
  if (!authorization) return { code: 1001, message: 'Authorization is empty' };
  if (!m) return { code: 1002, message: 'Authorization is invalid' };
  const [, h, p, s] = m as unknown as [string, string, string, string];
  const want = createHmac('sha256', o.secretKey).update(`${h}.${p}`).digest();
  const got = Buffer.from(s, 'base64url');
  let claims: { iss?: unknown; exp?: unknown; nbf?: unknown; alg?: unknown };
  try {
    const header = JSON.parse(Buffer.from(h, 'base64url').toString('utf8')) as { alg?: unknown };
    claims = JSON.parse(Buffer.from(p, 'base64url').toString('utf8')) as typeof claims;
    if (header.alg !== 'HS256') return { code: 1002, message: 'Authorization is invalid' };
  } catch {
    return { code: 1002, message: 'Authorization is invalid' };
  }
  if (got.length !== want.length || !timingSafeEqual(got, want) || claims.iss !== o.accessKey) {
    return { code: 1002, message: 'Authorization is invalid' };
  }
  if (typeof claims.nbf === 'number' && claims.nbf > nowS) return { code: 1003, message: 'Authorization is not yet valid' };
  if (typeof claims.exp !== 'number' || claims.exp <= nowS) return { code: 1004, message: 'Authorization has expired' };
  return null;
}

export function createKlingProtocol(deps: ProtocolDeps, o: KlingSimOptions) {
  const byExternal = new Map<string, SimJob>();
  /** When each task becomes readable (ms since the epoch), fixed at its create. */
  const visibleAt = new Map<string, number>();
  const readable = (job: SimJob): boolean => (visibleAt.get(job.id) ?? 0) <= Date.now();
  const store: JobStore = new JobStore({
    prefix: 'kling',
    baseUrl: deps.baseUrl,
    generationMs: deps.generationMs,
    outputTtlMs: deps.outputTtlMs,
    concurrency: o.concurrency,
    media: deps.media,
    signer: deps.signer,
    logger: deps.logger,
    // Numeric task ids, as Kling's.
    newId: () => `8${Date.now()}${String(Math.floor(Math.random() * 1e5)).padStart(5, '0')}`,
    onChange: (job) => {
      if (!job.webhook || job.phase === 'pending' || job.phase === 'queued') return;
      deps.webhooks.emit({
        id: WebhookSender.newEventId(),
        type: job.phase === 'running' ? 'start' : 'completed',
        predictionId: `kling:${job.id}`,
        url: job.webhook,
        body: JSON.stringify(taskJson(job)),
        provider: 'kling',
        headers: () => ({ 'user-agent': 'kling-simulator/1' }),
      });
    },
  });

  function taskJson(job: SimJob): Record<string, unknown> {
    return {
      task_id: job.id,
      task_status: STATUS[job.phase],
      task_status_msg: job.error ?? '',
      task_info: job.token ? { external_task_id: job.token } : {},
      created_at: job.createdAt.getTime(),
      updated_at: job.updatedAt.getTime(),
      ...(job.phase === 'succeeded' ? { task_result: { videos: [{ id: `${job.id}-0`, url: job.output, duration: String(job.durationS) }] } } : {}),
    };
  }
  const envelope = (res: Response, status: number, code: number, message: string, data?: unknown): void =>
    void res.status(status).json({ code, message, request_id: `req-${Date.now().toString(36)}`, ...(data === undefined ? {} : { data }) });

  const r = express.Router();
  r.get('/files/:id/output.mp4', store.serveOutput);
  r.use((req: Request, res: Response, next: NextFunction) => {
    const bad = checkKlingJwt(req.get('authorization'), o, Math.floor(Date.now() / 1000));
    if (bad) return envelope(res, 401, bad.code, bad.message);
    next();
  });

  r.post('/v1/videos/text2video', (req, res) => {
    const parsed = createBody.safeParse(req.body);
    if (!parsed.success) return envelope(res, 400, 1201, `invalid request parameters: ${z.prettifyError(parsed.error)}`);
    const body = parsed.data;
    // The model's own limits, where its published schema is kept (no std/pro on kling-v2-master).
    const issues = deps.inputs.check('kling', body.model_name, '/v1/videos/text2video', req.body);
    if (issues && issues.length > 0)
      return envelope(res, 400, 1201, `invalid request parameters: ${issues.map((i) => `${i.path || '/'} ${i.message}`).join('; ')}`);
    const ext = body.external_task_id;
    if (ext && byExternal.has(ext)) return envelope(res, 400, 1201, 'external_task_id already exists');
    const config = deps.faults.for('kling');
    const fault = deps.faults.takeSubmitFault('kling', undefined, ext ?? null);
    if (fault === 'ok' && store.active >= o.concurrency) {
      return envelope(res, 429, 1303, 'parallel tasks over the resource pack limit');
    }
    runSubmit(req, res, fault, config, deps.pendingAnswers, {
      create: () => {
        const job = store.create({
          model: body.model_name,
          input: { prompt: body.prompt, duration: Number(body.duration ?? '5') },
          token: ext ?? null,
          webhook: body.callback_url ?? null,
        });
        if (ext) byExternal.set(ext, job);
        const lag = config.kling_visible_after_ms ?? o.visibleAfterMs;
        if (lag > 0) visibleAt.set(job.id, job.createdAt.getTime() + lag);
        return job;
      },
      answer: (job) => envelope(res, 200, 0, 'SUCCEED', taskJson(job)),
      errorBeforeAccept: () => envelope(res, 500, 5000, 'server internal error'),
      errorAfterAccept: () => envelope(res, 502, 5000, 'server internal error'),
      rateLimited: () => envelope(res, 429, 1302, 'API request too fast'),
    });
  });

  r.get('/v1/videos/text2video/:id', (req, res) => {
    const config = deps.faults.for('kling');
    if (config.status === 'error_5xx') return envelope(res, 500, 5000, 'server internal error');
    const job = store.get(req.params.id) ?? byExternal.get(req.params.id);
    if (!job || !readable(job)) {
      return (config.kling_not_found ?? o.notFound) === '400-1201' ? envelope(res, 400, 1201, 'invalid task id') : envelope(res, 404, 1203, 'task not found');
    }
    envelope(res, 200, 0, 'SUCCEED', taskJson(job));
  });
  r.get('/v1/videos/text2video', (req, res) => {
    if (deps.faults.for('kling').list === 'error_5xx') return envelope(res, 503, 5001, 'service temporarily unavailable');
    const size = Math.min(500, Math.max(1, Number(req.query['pageSize'] ?? 30)));
    const page = Math.max(1, Number(req.query['pageNum'] ?? 1));
    envelope(
      res,
      200,
      0,
      'SUCCEED',
      store
        .list()
        .filter(readable)
        .slice((page - 1) * size, page * size)
        .map(taskJson),
    );
  });

  return {
    router: r,
    store,
    clearKeys: () => {
      byExternal.clear();
      visibleAt.clear();
    },
  };
}
