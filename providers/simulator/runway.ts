// Runway's tasks protocol under /runway: POST /v1/image_to_video | /v1/text_to_video → {id};
// GET /v1/tasks/{id} (THROTTLED while over the account's concurrency → PENDING → RUNNING →
// SUCCEEDED | FAILED | CANCELLED); DELETE /v1/tasks/{id} cancels a running task or deletes a
// finished one (its output too); either way the task is gone. Bearer auth and a required
// X-Runway-Version. No webhooks. Runway carries no token of ours, so the simulator counts
// submits by the X-Request-Id header the adapter sends for tracing.
import express, { type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { JobStore, simFraction, TERMINAL_PHASES, type ProtocolDeps, type SimFailure, type SimJob } from './jobs';
import type { FaultConfig } from './faults';
import { runSubmit } from './submit-faults';

export const SIM_RUNWAY_DEFAULTS = { apiSecret: 'sim-runway-secret-0123456789', concurrency: 2, version: '2024-11-06' } as const;

export interface RunwaySimOptions {
  readonly apiSecret: string;
  readonly concurrency: number;
}

// Request bodies as Runway documents them for the models the simulator serves (@runwayml/sdk
// image-to-video / text-to-video request types; docs/providers.md). Written from the docs,
// independently of the adapter's matrix, so a shared mistake cannot hide.
const promptText = z.string().min(1).max(1000);
const promptImage = z.union([z.string().min(1), z.array(z.strictObject({ uri: z.string().min(1), position: z.literal('first') })).min(1)]);
const twoToTen = z.int().min(2).max(10);
const veoDuration = z.union([z.literal(4), z.literal(6), z.literal(8)]);
const seed = z.int().min(0).max(4_294_967_295).optional();
const moderation = z.strictObject({ publicFigureThreshold: z.enum(['auto', 'low']).optional() }).optional();
const gen4Ratios = z.enum(['1280:720', '720:1280', '1104:832', '832:1104', '960:960', '1584:672']);
const veoRatios = z.enum(['1280:720', '720:1280', '1080:1920', '1920:1080']);
const veo = (model: 'veo3.1' | 'veo3.1_fast') => ({
  model: z.literal(model),
  ratio: veoRatios,
  duration: veoDuration.optional(),
  seed,
  audio: z.boolean().optional(),
  negativePrompt: z.string().optional(),
});

const imageBody = z.discriminatedUnion('model', [
  z.strictObject({
    model: z.literal('gen4_turbo'),
    promptImage,
    ratio: gen4Ratios,
    promptText: promptText.optional(),
    duration: twoToTen.optional(),
    seed,
    contentModeration: moderation,
  }),
  z.strictObject({ model: z.literal('gen4.5'), promptImage, promptText, ratio: gen4Ratios, duration: twoToTen, seed, contentModeration: moderation }),
  z.strictObject({ ...veo('veo3.1'), promptImage, promptText: promptText.optional() }),
  z.strictObject({ ...veo('veo3.1_fast'), promptImage, promptText: promptText.optional() }),
]);
const textBody = z.discriminatedUnion('model', [
  z.strictObject({ model: z.literal('gen4.5'), promptText, ratio: z.enum(['1280:720', '720:1280']), duration: twoToTen, seed, contentModeration: moderation }),
  z.strictObject({ ...veo('veo3.1'), promptText }),
  z.strictObject({ ...veo('veo3.1_fast'), promptText }),
]);
type RunwayBody = z.infer<typeof imageBody> | z.infer<typeof textBody>;

/** Estimated and final cost in credits (the task answers carry them): a flat rate per second here. */
const credits = (job: SimJob): { credits: number } => ({ credits: 5 * job.durationS });

// Runway's documented moderation failures (docs.dev.runwayml.com/errors/task-failures): an input
// refused before the task runs, an output refused after it generated. The messages are ours.
const MODERATION_FAILURES = {
  input: { error: 'The prompt text did not pass content moderation', at: 'start' },
  output: { error: 'The generated video did not pass content moderation', at: 'end' },
} as const satisfies Record<string, SimFailure>;
const MODERATION_CODES: Record<string, string> = {
  [MODERATION_FAILURES.input.error]: 'SAFETY.INPUT.TEXT',
  [MODERATION_FAILURES.output.error]: 'SAFETY.OUTPUT.VIDEO',
};

const STATUS: Record<SimJob['phase'], string> = {
  queued: 'THROTTLED',
  pending: 'PENDING',
  running: 'RUNNING',
  succeeded: 'SUCCEEDED',
  failed: 'FAILED',
  canceled: 'CANCELLED',
};

/** The account's generations per model over the window: what Runway's tier caps a day (faults `runway_daily_*`). */
function dailyGenerations() {
  const created = new Map<string, number[]>();
  const recent = (model: string, windowMs: number): number[] => {
    const since = Date.now() - windowMs;
    const kept = (created.get(model) ?? []).filter((t) => t > since);
    created.set(model, kept);
    return kept;
  };
  return {
    spent: (model: string, c: FaultConfig): boolean =>
      c.runway_daily_generations !== undefined && recent(model, c.runway_daily_window_ms ?? 86_400_000).length >= c.runway_daily_generations,
    count: (model: string): void => {
      created.set(model, [...(created.get(model) ?? []), Date.now()]);
    },
  };
}

export function createRunwayProtocol(deps: ProtocolDeps, o: RunwaySimOptions) {
  const store = new JobStore({
    prefix: 'runway',
    baseUrl: deps.baseUrl,
    generationMs: deps.generationMs,
    outputTtlMs: deps.outputTtlMs,
    concurrency: o.concurrency,
    media: deps.media,
    signer: deps.signer,
    logger: deps.logger,
  });

  const taskJson = (job: SimJob): Record<string, unknown> => ({
    id: job.id,
    status: STATUS[job.phase],
    createdAt: job.createdAt.toISOString(),
    ...(TERMINAL_PHASES.includes(job.phase) ? { cost: job.phase === 'succeeded' ? credits(job) : { credits: 0 } } : { estimatedCost: credits(job) }),
    // "A float between 0 and 1 indicating the progress of the task", while RUNNING (two decimals, never 1 before SUCCEEDED).
    ...(job.phase === 'running' ? { progress: Math.min(0.99, Math.round(simFraction(job.startedAt, job.generationMs) * 100) / 100) } : {}),
    // Every read signs the URLs afresh, as Runway documents (providers/runway.ts canRefreshOutputUrl).
    ...(job.phase === 'succeeded' ? { output: [store.freshOutput(job)] } : {}),
    ...(job.phase === 'failed' ? { failure: job.error, failureCode: MODERATION_CODES[job.error ?? ''] ?? 'INTERNAL.BAD_OUTPUT' } : {}),
  });

  const generations = dailyGenerations();
  const r = express.Router();
  r.get('/files/:id/output.mp4', store.serveOutput);
  r.use((req: Request, res: Response, next: NextFunction) => {
    if (req.get('authorization') !== `Bearer ${o.apiSecret}`) return void res.status(401).json({ error: 'Invalid API key' });
    if (req.get('x-runway-version') !== SIM_RUNWAY_DEFAULTS.version) {
      return void res.status(400).json({ error: 'Missing or invalid X-Runway-Version header' });
    }
    next();
  });

  const submit = (schema: typeof imageBody | typeof textBody) => (req: Request, res: Response) => {
    // A catalog model: its published request type (deps.inputs); others: the bodies above.
    const model = (req.body as { model?: unknown } | undefined)?.model;
    const issues = typeof model === 'string' ? deps.inputs.check('runway', model, req.path, req.body) : null;
    if (issues && issues.length > 0) return void res.status(400).json({ error: 'Validation of body failed', issues });
    const parsed = schema.safeParse(req.body);
    if (!parsed.success) return void res.status(400).json({ error: 'Validation of body failed', issues: parsed.error.issues });
    const body: RunwayBody = parsed.data;
    const config = deps.faults.for('runway');
    // "Maximum daily generations … If you exceed this limit, you'll receive a 429 Too Many Requests
    // response to the task creation request" (usage tiers; the body is not documented).
    if (generations.spent(body.model, config)) {
      deps.faults.submits.record('runway', req.get('x-request-id') ?? null, 'rate_limit');
      return void res.status(429).json({ error: 'You have exceeded your daily generation limit for this model' });
    }
    runSubmit(req, res, deps.faults.takeSubmitFault('runway', undefined, req.get('x-request-id') ?? null), config, deps.pendingAnswers, {
      create: () => {
        generations.count(body.model);
        return store.create({
          model: body.model,
          input: { prompt: body.promptText ?? '', duration: body.duration ?? 10 },
          token: req.get('x-request-id') ?? null,
          webhook: null,
          ...(config.runway_moderation ? { failure: MODERATION_FAILURES[config.runway_moderation] } : {}),
        });
      },
      answer: (job) => void res.json({ id: job.id, estimatedCost: credits(job) }),
      errorBeforeAccept: () => void res.status(500).json({ error: 'An unexpected error occurred' }),
      errorAfterAccept: () => void res.status(502).json({ error: 'Bad gateway' }),
      rateLimited: () => void res.status(429).json({ error: 'You have exceeded the rate limit for this endpoint' }),
    });
  };
  r.post('/v1/image_to_video', submit(imageBody));
  r.post('/v1/text_to_video', submit(textBody));

  r.get('/v1/tasks/:id', (req, res) => {
    if (deps.faults.for('runway').status === 'error_5xx') return void res.status(500).json({ error: 'An unexpected error occurred' });
    const job = store.get(req.params.id);
    if (!job) return void res.status(404).json({ error: 'Task not found' });
    res.json(taskJson(job));
  });
  // "Tasks that are running, pending, or throttled can be canceled … Invoking this method for
  // other tasks will delete them … Aborted and deleted tasks will not be able to be fetched
  // again": either way the task answers 404 from now on, and a finished one loses its output.
  r.delete('/v1/tasks/:id', (req, res) => {
    const job = store.get(req.params.id);
    if (!job) return void res.status(404).json({ error: 'Task not found' });
    store.cancel(job);
    store.remove(job);
    res.status(204).end();
  });

  return { router: r, store };
}
