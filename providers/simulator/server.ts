// A provider simulator speaking four providers' protocols over HTTP, one route prefix each
// (/replicate, /fal, /runway, /kling), with fault knobs and counters for tests under /_sim.
// Never exposed beyond loopback.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import pino, { type Logger } from 'pino';
import { z } from 'zod';
import { createFalProtocol, SIM_FAL_DEFAULTS, type FalSimOptions } from './fal';
import { Faults, faultConfigSchema, type FaultConfig, type SimProvider } from './faults';
import type { SubmitLogStats, SubmitReceived } from './submit-log';
import { InputSchemas, type InputIssue } from './input-schemas';
import { falOpenApiHandler, mountReplicateModelRoutes } from './model-schemas';
import { createKlingProtocol, SIM_KLING_DEFAULTS, type KlingSimOptions } from './kling';
import { CUT_OUTPUT, MediaLibrary, UrlSigner, DEFAULT_DURATION_S, sendOutputFile } from './media';
import { createRunwayProtocol, SIM_RUNWAY_DEFAULTS, type RunwaySimOptions } from './runway';
import { parseCancelAfter, PredictionStore } from './predictions';
import { ReplicateRateLimiter, REPLICATE_DOCUMENTED_LIMITS, type ReplicateRateLimits, type ThrottleCounts } from './rate-limits';
import { tokenOfUrl } from './submit-faults';
import { WebhookSender } from './webhooks';

export interface SimulatorOptions {
  /** Base URL the simulator is reached at; derived from the bound port when omitted. */
  readonly publicBaseUrl?: string;
  readonly apiToken: string;
  readonly webhookSecret: string;
  readonly generationMs: number;
  readonly outputTtlMs: number;
  /** Where generated sample MP4s are cached. */
  readonly dataDir: string;
  readonly logger?: Logger;
  readonly ffmpegPath?: string;
  /** Listing page size (Replicate: 100). */
  readonly listPageSize?: number;
  readonly webhookRetry?: { readonly attempts: number; readonly baseDelayMs: number };
  readonly webhookTimeoutMs?: number;
  /** Credentials and account limits of the other protocols (defaults: SIM_*_DEFAULTS). */
  readonly fal?: Partial<FalSimOptions>;
  readonly runway?: Partial<RunwaySimOptions>;
  readonly kling?: Partial<KlingSimOptions>;
  /** Replicate's account limits (default: the documented 600 creates and 3,000 others a minute); false: none. */
  readonly replicateRateLimits?: ReplicateRateLimits | false;
  /** How long after it finishes a Replicate prediction keeps its input and output (documented: an hour). */
  readonly replicateDataRetentionMs?: number;
}

export interface SimulatorStats extends SubmitLogStats {
  /** Replicate predictions. */
  readonly predictions_total: number;
  /** Jobs created per protocol. */
  readonly jobs_by_provider: Record<SimProvider, number>;
  /** Jobs created per correlation token, across all protocols. */
  readonly by_token: Record<string, number>;
  readonly webhooks_sent: number;
  readonly webhooks_failed: number;
  readonly webhook_attempts: number;
  /** Replicate status reads (GET /v1/predictions/:id): the poll load the provider sees. */
  readonly status_reads: number;
  /** GETs of an output file (any protocol, Range requests included): what a rescue downloads. */
  readonly output_reads: number;
  /** Of those, the ones with a Range header (a resumed download). */
  readonly output_range_reads: number;
  /** Body bytes sent for output files (what a CDN would bill): a resumed download sends only the rest. */
  readonly output_bytes: number;
  /** Replicate requests answered 429 by the account's rate limits (rate-limits.ts), per class. */
  readonly replicate_throttled: ThrottleCounts;
}

export interface RunningSimulator {
  readonly port: number;
  close(): Promise<void>;
}

export interface Simulator {
  readonly app: express.Express;
  listen(port: number, host?: string): Promise<RunningSimulator>;
  stats(): SimulatorStats;
  tokenCount(token: string): number;
  /** The ids of the jobs a correlation token created, any protocol: what an operator finds in the provider's console. */
  jobIdsFor(token: string): string[];
  /** Replace the fault config (same as POST /_sim/faults). */
  setFaults(config: FaultConfig): void;
  clearFaults(): void;
  /** Forget predictions, stats and queued webhooks (same as POST /_sim/reset). */
  reset(): void;
  /** Resolves when all queued webhook deliveries are done. */
  webhooksIdle(): Promise<void>;
  baseUrl(): string;
  /** Replace fal's webhook signing key (same as POST /_sim/fal/rotate-key); returns the new kid. */
  rotateFalKey(): string;
  /** Calls `listener` for every submit request received (refused ones included); returns the unsubscribe. */
  onSubmit(listener: (s: SubmitReceived) => void): () => void;
  /** From now on the model publishes `schema` (Replicate's and fal's `input`) and refuses what it refuses (same as POST /_sim/schemas). */
  setModelSchema(provider: 'replicate' | 'fal', model: string, schema: object): void;
  /** Every model back to its published schema (same as DELETE /_sim/schemas; reset does it too). */
  restoreModelSchemas(): void;
  /** Calls `listener` with the time and prediction id of every Replicate status read (GET /v1/predictions/:id); returns the unsubscribe. */
  onStatusRead(listener: (atMs: number, id: string) => void): () => void;
}

// Replicate's create bodies (https://replicate.com/docs/reference/http#predictions.create and
// #models.predictions.create): `version` is a 64-character id, `owner/name:id`, or `owner/name` for
// an official model, its latest version (https://replicate.com/changelog/2025-08-05-run-all-models-with-the-same-api-endpoint);
// only the versioned endpoint takes it.
const VERSION = /^(?:(?:[^/:\s]+\/[^/:\s]+:)?[0-9a-f]{64}|[^/:\s]+\/[^/:\s]+)$/;
const modelCreateBody = z.strictObject({
  input: z.record(z.string(), z.unknown()),
  webhook: z.url({ protocol: /^https?$/ }).optional(),
  webhook_events_filter: z.array(z.enum(['start', 'output', 'logs', 'completed'])).optional(),
  stream: z.boolean().optional(),
});
const versionCreateBody = modelCreateBody.extend({
  version: z.string().regex(VERSION, 'a 64-character version id, owner/name:id, or owner/name (an official model)'),
});
const modelSchemaKnob = z.strictObject({ provider: z.enum(['replicate', 'fal']), model: z.string().min(1), schema: z.record(z.string(), z.unknown()) });
const isoDate = z.iso.datetime({ offset: true }).transform((s) => new Date(s));
const listQuery = z.object({
  cursor: z.string().optional(),
  created_after: isoDate.optional(),
  created_before: isoDate.optional(),
});

function problem(res: Response, status: number, title: string, detail: string): void {
  res.status(status).type('application/problem+json').send(JSON.stringify({ title, detail, status }));
}

/**
 * An input the model's schema refuses, as Replicate answers it: 422 problem+json, "Input
 * validation failed", one line per field in `detail` and the fields in `invalid_fields`.
 */
function inputValidationFailed(res: Response, issues: readonly InputIssue[]): void {
  const fields = issues.map((i) => ({ type: i.keyword, field: `input${i.path.replace(/\//g, '.')}`, description: i.message }));
  const detail = fields.map((f) => `- ${f.field}: ${f.description}`).join('\n');
  res
    .status(422)
    .type('application/problem+json')
    .send(JSON.stringify({ title: 'Input validation failed', detail, status: 422, invalid_fields: fields }));
}

function readWebhook(body: unknown): string | undefined {
  const w = typeof body === 'object' && body !== null ? (body as { webhook?: unknown }).webhook : undefined;
  return typeof w === 'string' ? w : undefined;
}

function encodeCursor(seq: number): string {
  return Buffer.from(`seq:${seq}`).toString('base64url');
}
function decodeCursor(c: string): number | null {
  const m = /^seq:(\d+)$/.exec(Buffer.from(c, 'base64url').toString('utf8'));
  return m ? Number(m[1]) : null;
}

export function createSimulator(opts: SimulatorOptions): Simulator {
  const logger = opts.logger ?? pino({ level: 'silent' });
  let publicBase = opts.publicBaseUrl?.replace(/\/+$/, '') ?? '';
  const baseUrl = (): string => publicBase;
  const faults = new Faults();
  const media = new MediaLibrary(opts.dataDir, opts.ffmpegPath, () => faults.current.output_pad_bytes ?? 0);
  const signer = new UrlSigner();
  const webhooks = new WebhookSender({
    secret: opts.webhookSecret,
    faults,
    logger,
    attempts: opts.webhookRetry?.attempts ?? 5,
    baseDelayMs: opts.webhookRetry?.baseDelayMs ?? 200,
    timeoutMs: opts.webhookTimeoutMs ?? 5_000,
  });
  const store = new PredictionStore({
    baseUrl,
    generationMs: opts.generationMs,
    outputTtlMs: opts.outputTtlMs,
    media,
    signer,
    webhooks,
    logger,
    dataRetentionMs: opts.replicateDataRetentionMs ?? 60 * 60 * 1000,
  });
  const pageSize = opts.listPageSize ?? 100;
  const limits = opts.replicateRateLimits ?? REPLICATE_DOCUMENTED_LIMITS;
  const limiter = limits === false ? null : new ReplicateRateLimiter(limits);
  const pendingAnswers = new Set<NodeJS.Timeout>();
  // The catalog models' published input schemas: each protocol refuses what a model's schema refuses.
  const inputs = new InputSchemas();
  const deps = {
    baseUrl,
    faults,
    webhooks,
    media,
    signer,
    logger,
    generationMs: opts.generationMs,
    outputTtlMs: opts.outputTtlMs,
    pendingAnswers,
    inputs,
  };
  const fal = createFalProtocol(deps, { ...SIM_FAL_DEFAULTS, ...opts.fal });
  const runway = createRunwayProtocol(deps, { ...SIM_RUNWAY_DEFAULTS, ...opts.runway });
  const kling = createKlingProtocol(deps, { ...SIM_KLING_DEFAULTS, ...opts.kling });
  const jobStores = [fal.store, runway.store, kling.store];

  let statusReads = 0;
  const statusReadListeners = new Set<(atMs: number, id: string) => void>();
  let outputReads = 0;
  let outputRangeReads = 0;
  let outputBytes = 0;
  const tokenCount = (token: string): number => (store.byToken.get(token) ?? 0) + jobStores.reduce((n, s) => n + (s.byToken.get(token) ?? 0), 0);
  const stats = (): SimulatorStats => {
    const byToken = new Map(store.byToken);
    for (const s of jobStores) for (const [t, n] of s.byToken) byToken.set(t, (byToken.get(t) ?? 0) + n);
    return {
      predictions_total: store.total,
      jobs_by_provider: { replicate: store.total, fal: fal.store.total, runway: runway.store.total, kling: kling.store.total },
      by_token: Object.fromEntries(byToken),
      webhooks_sent: webhooks.sent,
      webhooks_failed: webhooks.failed,
      webhook_attempts: webhooks.attempts,
      status_reads: statusReads,
      output_reads: outputReads,
      output_range_reads: outputRangeReads,
      output_bytes: outputBytes,
      replicate_throttled: limiter?.throttled() ?? { create: 0, other: 0 },
      // Submit requests received, refused ones included (submit-log.ts).
      ...faults.submits.stats(),
    };
  };
  const reset = (): void => {
    store.clear();
    for (const s of jobStores) s.clear();
    kling.clearKeys();
    webhooks.stop();
    webhooks.resetStats();
    faults.submits.clear();
    statusReads = 0;
    outputReads = 0;
    outputRangeReads = 0;
    outputBytes = 0;
    limiter?.reset();
    inputs.restore();
  };

  const app = express();
  app.disable('x-powered-by');
  app.use(express.json({ limit: '1mb' }));
  app.use((req, res, next) => {
    const output = req.method === 'GET' ? /^\/(replicate|fal|runway|kling)\/files\/[^/]+\/output\.mp4$/.exec(req.path) : null;
    if (output) {
      outputReads += 1;
      if (req.headers.range) outputRangeReads += 1;
      // Count the body bytes as they are written (express's sendFile pipes into res.write).
      const write = res.write.bind(res) as (...args: unknown[]) => boolean;
      const count = (chunk: unknown) => {
        if (typeof chunk === 'string') outputBytes += Buffer.byteLength(chunk);
        else if (chunk instanceof Uint8Array) outputBytes += chunk.length;
      };
      res.write = ((chunk: unknown, ...rest: unknown[]) => {
        count(chunk);
        return write(chunk, ...rest);
      }) as typeof res.write;
      const end = res.end.bind(res) as (...args: unknown[]) => typeof res;
      res.end = ((chunk?: unknown, ...rest: unknown[]) => {
        if (typeof chunk !== 'function') count(chunk);
        return end(chunk, ...rest);
      }) as typeof res.end;
      if (faults.takeOutputFault(output[1] as SimProvider) === 'reset_mid_body') res.locals[CUT_OUTPUT] = true;
    }
    next();
  });

  // ---- admin (tests and operators of the simulator) ----
  app.get('/_sim/health', (_req, res) => void res.json({ ok: true }));
  app.get('/_sim/stats', (_req, res) => void res.json(stats()));
  app.get('/_sim/tokens/:token', (req, res) => {
    const token = req.params.token;
    res.json({ token, count: tokenCount(token) });
  });
  app.post('/_sim/fal/rotate-key', (_req, res) => void res.json({ kid: fal.rotateKey() }));
  app.get('/_sim/faults', (_req, res) => void res.json(faults.current));
  app.post('/_sim/faults', (req, res) => {
    const parsed = faultConfigSchema.safeParse(req.body ?? {});
    if (!parsed.success) return problem(res, 422, 'Invalid fault config', z.prettifyError(parsed.error));
    faults.replace(parsed.data);
    logger.info({ faults: parsed.data }, 'faults replaced');
    res.json(faults.current);
  });
  app.delete('/_sim/faults', (_req, res) => {
    faults.reset();
    res.json(faults.current);
  });
  app.post('/_sim/schemas', (req, res) => {
    const parsed = modelSchemaKnob.safeParse(req.body ?? {});
    if (!parsed.success) return problem(res, 422, 'Invalid schema knob', z.prettifyError(parsed.error));
    try {
      inputs.replace(parsed.data.provider, parsed.data.model, 'input', parsed.data.schema);
    } catch (err) {
      return problem(res, 422, 'Invalid schema knob', (err as Error).message);
    }
    res.json({ ok: true, revision: inputs.revision(parsed.data.provider, parsed.data.model) });
  });
  app.delete('/_sim/schemas', (_req, res) => {
    inputs.restore();
    res.json({ ok: true });
  });
  app.post('/_sim/reset', (_req, res) => {
    reset();
    res.json({ ok: true });
  });

  // ---- Replicate protocol ----
  const r = express.Router();
  r.use('/v1', (req: Request, res: Response, next: NextFunction) => {
    const m = /^(?:Bearer|Token)\s+(.+)$/i.exec(req.get('authorization') ?? '');
    if (!m || m[1] !== opts.apiToken) {
      return problem(res, 401, 'Unauthenticated', 'You did not pass a valid authentication token');
    }
    if (limiter) {
      const create = req.method === 'POST' && /^\/(?:predictions|models\/[^/]+\/[^/]+\/predictions)\/?$/.test(req.path);
      const throttled = limiter.check(create ? 'create' : 'other');
      if (throttled !== null) {
        // A throttled create arrived and was refused: the provider-side count of calls sees it.
        if (create) faults.submits.record('replicate', tokenOfUrl(readWebhook(req.body)), 'rate_limit');
        return problem(res, 429, 'Too Many Requests', throttled);
      }
    }
    next();
  });

  const submit = (req: Request, res: Response, model: string | null): void => {
    const parsed = model === null ? versionCreateBody.safeParse(req.body) : modelCreateBody.safeParse(req.body);
    if (!parsed.success) return problem(res, 422, 'Input validation failed', z.prettifyError(parsed.error));
    const given = 'version' in parsed.data && typeof parsed.data.version === 'string' ? parsed.data.version : null;
    // `owner/name` as the version is the official model's endpoint by another path.
    const official = model ?? (given !== null && !given.includes(':') && given.includes('/') ? given : null);
    const version = official === null ? given : null;
    // The model's published input schema, where one is kept (a versioned create names its model before the colon).
    const named = official ?? (version?.includes(':') ? version.slice(0, version.lastIndexOf(':')) : null);
    const issues = named === null ? null : inputs.check('replicate', named, 'input', parsed.data.input);
    if (issues && issues.length > 0) return inputValidationFailed(res, issues);
    // A deadline for the prediction (its lifetime from creation); the reference sets a 5 s minimum.
    const cancelAfterHeader = req.get('cancel-after');
    const cancelAfterMs = cancelAfterHeader === undefined ? null : parseCancelAfter(cancelAfterHeader);
    if (cancelAfterHeader !== undefined && cancelAfterMs === null) {
      return problem(res, 422, 'Invalid Cancel-After', 'a duration such as 90s, 5m or 1h30m45s, at least 5 seconds');
    }
    const f = faults.for('replicate');
    const fault = faults.takeSubmitFault('replicate', undefined, tokenOfUrl(parsed.data.webhook));
    if (fault === 'error_5xx_before_accept') return problem(res, 500, 'Internal Server Error', 'simulated failure');
    if (fault === 'rate_limit') {
      if (f.retry_after_s !== undefined) res.set('Retry-After', String(f.retry_after_s));
      // The documented body names the reset; without retry_after_s the knob names none, as before.
      const resets = f.retry_after_s === undefined ? '' : ` Your rate limit resets in ~${f.retry_after_s}s.`;
      return problem(res, 429, 'Too Many Requests', `Request was throttled.${resets}`);
    }
    // A model with no duration input renders its one duration (minimax/video-01: 6 s).
    const delivered = named === null ? undefined : inputs.fixture('replicate', named)?.delivers.durationSeconds;
    const p = store.create({
      ...parsed.data,
      model: official,
      version,
      cancelAfterMs,
      ...(delivered && 'fixed' in delivered ? { durationS: delivered.fixed } : {}),
      ...(f.start_delay_ms !== undefined ? { startDelayMs: f.start_delay_ms } : {}),
    });
    switch (fault) {
      case 'accept_then_hang':
        return; // the socket stays open until the client gives up or the server closes
      case 'reset_after_accept':
        req.socket.destroy();
        return;
      case 'error_5xx_after_accept':
        return problem(res, 502, 'Bad Gateway', 'simulated failure after accepting');
      case 'answer_after_ms': {
        const t = setTimeout(() => {
          pendingAnswers.delete(t);
          if (!res.writableEnded && !res.destroyed) res.status(201).json(store.toJson(p));
        }, f.submit_delay_ms ?? 1_000);
        pendingAnswers.add(t);
        return;
      }
      default:
        res.status(201).json(store.toJson(p));
    }
  };
  r.post('/v1/predictions', (req, res) => submit(req, res, null));
  r.post('/v1/models/:owner/:name/predictions', (req, res) => submit(req, res, `${req.params.owner}/${req.params.name}`));

  r.get('/v1/predictions', (req, res) => {
    if (faults.for('replicate').list === 'error_5xx') return problem(res, 503, 'Service Unavailable', 'simulated failure');
    const q = listQuery.safeParse(req.query);
    if (!q.success) return problem(res, 400, 'Invalid query', z.prettifyError(q.error));
    let before = 0;
    if (q.data.cursor !== undefined) {
      const c = decodeCursor(q.data.cursor);
      if (c === null) return problem(res, 400, 'Invalid cursor', 'The cursor is not valid');
      before = c;
    }
    const window = {
      ...(q.data.created_after ? { createdAfter: q.data.created_after } : {}),
      ...(q.data.created_before ? { createdBefore: q.data.created_before } : {}),
    };
    const { items, more } = store.page(before, pageSize, window);
    const last = items[items.length - 1];
    // `next` is a full URL that keeps the filters (Replicate documents it as a full URL).
    const next = new URL(`${faults.for('replicate').list_next_origin ?? baseUrl()}/replicate/v1/predictions`);
    for (const k of ['created_after', 'created_before'] as const) if (typeof req.query[k] === 'string') next.searchParams.set(k, req.query[k]);
    if (last) next.searchParams.set('cursor', encodeCursor(last.seq));
    res.json({ previous: null, next: more && last ? next.toString() : null, results: items.map((p) => store.toJson(p)) });
  });
  r.get('/v1/predictions/:id', (req, res) => {
    statusReads += 1;
    for (const listener of statusReadListeners) listener(Date.now(), req.params.id);
    if (faults.for('replicate').status === 'error_5xx') return problem(res, 500, 'Internal Server Error', 'simulated failure');
    const p = store.get(req.params.id);
    if (!p) return problem(res, 404, 'Not found', 'Not found.');
    res.json(store.toJson(p));
  });
  r.post('/v1/predictions/:id/cancel', (req, res) => {
    const p = store.get(req.params.id);
    if (!p) return problem(res, 404, 'Not found', 'Not found.');
    store.cancel(p);
    res.json(store.toJson(p));
  });

  r.get('/files/:id/output.mp4', async (req, res, next) => {
    const id = req.params.id;
    const verdict = signer.check(id, req.query['expires'], req.query['sig']);
    if (verdict !== 'ok') return problem(res, 403, 'Forbidden', verdict === 'expired' ? 'URL expired' : 'Bad signature');
    const p = store.get(id);
    // An hour after it finished, Replicate has deleted a prediction's files (data_removed).
    if (!p || p.status !== 'succeeded' || store.dataRemoved(p)) return problem(res, 404, 'Not found', 'No output');
    if (faults.for('replicate').output === 'not_media') {
      res.type('video/mp4').send(Buffer.from('these bytes are not a video (fault knob output=not_media)\n'.repeat(64)));
      return;
    }
    try {
      await sendOutputFile(res, next, await media.sample(p.durationS ?? DEFAULT_DURATION_S));
    } catch (err) {
      next(err);
    }
  });
  mountReplicateModelRoutes(r, inputs);
  app.use('/replicate', r);
  app.get('/fal/api/openapi/queue/openapi.json', falOpenApiHandler(inputs));
  app.use('/fal', fal.router);
  app.use('/runway', runway.router);
  app.use('/kling', kling.router);

  app.use((_req: Request, res: Response) => problem(res, 404, 'Not found', 'No such route'));
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const e = err as { status?: number; statusCode?: number; message?: string };
    const status = e.status ?? e.statusCode ?? 500;
    if (status >= 500) logger.error({ err }, 'simulator error');
    if (res.headersSent) return void res.end();
    problem(res, status, status >= 500 ? 'Internal Server Error' : 'Bad Request', status >= 500 ? 'internal error' : (e.message ?? 'bad request'));
  });

  async function listen(port: number, host = '127.0.0.1'): Promise<RunningSimulator> {
    const server: Server = createServer(app);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const bound = (server.address() as AddressInfo).port;
    if (!publicBase) {
      const h = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
      publicBase = `http://${h.includes(':') ? `[${h}]` : h}:${bound}`;
    }
    // Warm the default sample so the first download is not slowed by ffmpeg.
    await media.sample(DEFAULT_DURATION_S);
    logger.info({ port: bound, publicBaseUrl: publicBase }, 'simulator listening');
    let closing: Promise<void> | null = null;
    return {
      port: bound,
      close: () => {
        closing ??= new Promise<void>((resolve, reject) => {
          store.stopTimers();
          for (const s of jobStores) s.stopTimers();
          webhooks.stop();
          for (const t of pendingAnswers) clearTimeout(t);
          pendingAnswers.clear();
          server.close((err) => (err ? reject(err) : resolve()));
          server.closeAllConnections();
        });
        return closing;
      },
    };
  }

  return {
    app,
    listen,
    stats,
    tokenCount,
    jobIdsFor: (token: string) => [store, ...jobStores].flatMap((s) => s.idsFor(token)),
    setFaults: (c) => faults.replace(faultConfigSchema.parse(c)),
    clearFaults: () => faults.reset(),
    reset,
    webhooksIdle: () => webhooks.idle(),
    baseUrl,
    rotateFalKey: () => fal.rotateKey(),
    setModelSchema: (provider, model, schema) => inputs.replace(provider, model, 'input', schema),
    restoreModelSchemas: () => inputs.restore(),
    onSubmit: (listener) => faults.submits.subscribe(listener),
    onStatusRead: (listener) => {
      statusReadListeners.add(listener);
      return () => statusReadListeners.delete(listener);
    },
  };
}
