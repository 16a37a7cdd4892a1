// Runway's tasks protocol under /runway: POST /v1/image_to_video | /v1/text_to_video → {id};
// GET /v1/tasks/{id} (THROTTLED while over the account's concurrency → PENDING → RUNNING →
// SUCCEEDED | FAILED | CANCELLED); DELETE /v1/tasks/{id}. Bearer auth and a required
// X-Runway-Version. No webhooks. Runway carries no token of ours, so the simulator counts
// submits by the X-Request-Id header the adapter sends for tracing.
import express, { type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { JobStore, type ProtocolDeps, type SimJob } from './jobs';
import { runSubmit } from './submit-faults';

export const SIM_RUNWAY_DEFAULTS = { apiSecret: 'sim-runway-secret-0123456789', concurrency: 2, version: '2024-11-06' } as const;

export interface RunwaySimOptions {
  readonly apiSecret: string;
  readonly concurrency: number;
}

const common = {
  model: z.string().min(1),
  promptText: z.string().max(1000).optional(),
  ratio: z.string().regex(/^\d+:\d+$/),
  duration: z.number().int().min(1).max(10).optional(),
  seed: z.number().int().optional(),
};
const imageBody = z.object({ ...common, promptImage: z.string().min(1) });
const textBody = z.object({ ...common, promptText: z.string().min(1).max(1000) });

const STATUS: Record<SimJob['phase'], string> = {
  queued: 'THROTTLED',
  pending: 'PENDING',
  running: 'RUNNING',
  succeeded: 'SUCCEEDED',
  failed: 'FAILED',
  canceled: 'CANCELLED',
};

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
    ...(job.phase === 'running' ? { progress: 0.5 } : {}),
    ...(job.phase === 'succeeded' ? { output: [job.output] } : {}),
    ...(job.phase === 'failed' ? { failure: job.error, failureCode: 'INTERNAL.BAD_OUTPUT' } : {}),
  });

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
    const parsed = schema.safeParse(req.body);
    if (!parsed.success) return void res.status(400).json({ error: 'Validation of body failed', issues: parsed.error.issues });
    const body = parsed.data as z.infer<typeof imageBody> | z.infer<typeof textBody>;
    const config = deps.faults.for('runway');
    runSubmit(req, res, deps.faults.takeSubmitFault('runway', undefined, req.get('x-request-id') ?? null), config, deps.pendingAnswers, {
      create: () =>
        store.create({
          model: body.model,
          input: { prompt: body.promptText ?? '', duration: body.duration ?? 5 },
          token: req.get('x-request-id') ?? null,
          webhook: null,
        }),
      answer: (job) => void res.json({ id: job.id }),
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
  r.delete('/v1/tasks/:id', (req, res) => {
    const job = store.get(req.params.id);
    if (!job) return void res.status(404).json({ error: 'Task not found' });
    store.cancel(job); // a finished task is deleted by Runway; here it simply stays readable
    res.status(204).end();
  });

  return { router: r, store };
}
