// The job store behind the fal, Runway and Kling protocols: a per-account concurrency limit,
// a timer-driven lifecycle and real MP4 outputs. Each protocol maps the phases onto its words:
//   queued  — over the concurrency limit, waiting for a slot (fal IN_QUEUE, Runway THROTTLED)
//   pending — holds a slot, not started yet (fal IN_QUEUE, Runway PENDING, Kling submitted)
//   running — generating for generationMs (fal IN_PROGRESS, Runway RUNNING, Kling processing)
import { randomUUID } from 'node:crypto';
import type { NextFunction, Request, Response } from 'express';
import type { Logger } from 'pino';
import type { Faults } from './faults';
import type { InputSchemas } from './input-schemas';
import type { WebhookSender } from './webhooks';
import { clampDuration, DEFAULT_DURATION_S, sendOutputFile, type MediaLibrary, type UrlSigner } from './media';

/** Steps a simulated generation reports in its logs and progress. */
export const SIM_STEPS = 10;

/** How far a generation that started at `startedAt` and takes `generationMs` is at `at`: 0..1. */
export function simFraction(startedAt: Date | null, generationMs: number, at: Date = new Date()): number {
  if (!startedAt) return 0;
  if (generationMs <= 0) return 1;
  return Math.min(1, Math.max(0, (at.getTime() - startedAt.getTime()) / generationMs));
}

/** The log lines a simulated model has printed by then: one per step done (a tqdm-like counter). */
export function simLogLines(startedAt: Date | null, generationMs: number, at: Date = new Date()): string[] {
  if (!startedAt) return [];
  const done = Math.floor(simFraction(startedAt, generationMs, at) * SIM_STEPS);
  return ['loading model', ...Array.from({ length: done }, (_, i) => `step ${i + 1}/${SIM_STEPS}`)];
}

export type SimPhase = 'queued' | 'pending' | 'running' | 'succeeded' | 'failed' | 'canceled';
export const TERMINAL_PHASES: readonly SimPhase[] = ['succeeded', 'failed', 'canceled'];

export interface SimJob {
  readonly seq: number;
  readonly id: string;
  readonly model: string;
  readonly input: Record<string, unknown>;
  /** Our correlation token as the protocol carries it (webhook URL segment, external id, header). */
  readonly token: string | null;
  readonly webhook: string | null;
  phase: SimPhase;
  readonly createdAt: Date;
  startedAt: Date | null;
  updatedAt: Date;
  completedAt: Date | null;
  output: string | null;
  error: string | null;
  readonly durationS: number;
  readonly generationMs: number;
  readonly timers: NodeJS.Timeout[];
  /** A failure asked for at create: before the job runs ('start') or after it generated ('end'). */
  readonly failure: SimFailure | null;
}

export interface SimFailure {
  readonly error: string;
  readonly at: 'start' | 'end';
}

export interface JobStoreOptions {
  /** The route prefix ("fal"): output URLs live under /<prefix>/files. */
  readonly prefix: string;
  readonly baseUrl: () => string;
  readonly generationMs: number;
  readonly outputTtlMs: number;
  /** Jobs holding a slot (pending + running) at most. */
  readonly concurrency: number;
  readonly media: MediaLibrary;
  readonly signer: UrlSigner;
  readonly logger: Logger;
  /** Called after every phase change (webhooks). */
  readonly onChange?: (job: SimJob) => void;
  readonly newId?: () => string;
}

export interface CreateJob {
  readonly model: string;
  readonly input: Record<string, unknown>;
  readonly token: string | null;
  readonly webhook: string | null;
  readonly failure?: SimFailure;
}

export class JobStore {
  private readonly byId = new Map<string, SimJob>();
  private readonly waiting: SimJob[] = [];
  private seq = 0;
  total = 0;
  readonly byToken = new Map<string, number>();

  constructor(private readonly opts: JobStoreOptions) {}

  get(id: string): SimJob | undefined {
    return this.byId.get(id);
  }

  /** Ids of the jobs created with this correlation token. */
  idsFor(token: string): string[] {
    return [...this.byId.values()].filter((j) => j.token === token).map((j) => j.id);
  }

  /** Newest first. */
  list(): SimJob[] {
    return [...this.byId.values()].sort((a, b) => b.seq - a.seq);
  }

  /** Jobs holding a concurrency slot. */
  get active(): number {
    let n = 0;
    for (const j of this.byId.values()) if (j.phase === 'pending' || j.phase === 'running') n++;
    return n;
  }

  /** Position in the wait queue (0 = next), or 0 when not waiting. */
  queuePosition(job: SimJob): number {
    const i = this.waiting.indexOf(job);
    return i < 0 ? 0 : i;
  }

  create(req: CreateJob): SimJob {
    const now = new Date();
    const job: SimJob = {
      seq: ++this.seq,
      id: this.opts.newId?.() ?? randomUUID(),
      model: req.model,
      input: req.input,
      token: req.token,
      webhook: req.webhook,
      phase: 'queued',
      createdAt: now,
      startedAt: null,
      updatedAt: now,
      completedAt: null,
      output: null,
      error: null,
      durationS: clampDuration(req.input['duration']),
      generationMs: promptGenerationMs(req.input, this.opts.generationMs),
      timers: [],
      failure: req.failure ?? null,
    };
    this.byId.set(job.id, job);
    this.total++;
    if (job.token) this.byToken.set(job.token, (this.byToken.get(job.token) ?? 0) + 1);
    this.waiting.push(job);
    this.opts.logger.info({ prefix: this.opts.prefix, jobId: job.id, token: job.token }, 'job created');
    this.admit();
    return job;
  }

  /** Cancel a non-terminal job; false when it had already ended. */
  cancel(job: SimJob): boolean {
    if (TERMINAL_PHASES.includes(job.phase)) return false;
    this.finish(job, 'canceled', 'Request was cancelled by the user');
    return true;
  }

  /**
   * Ends the job `failed` with `error` unless a runner has started it within `ms` (fal's
   * X-Fal-Request-Timeout): a job queued or holding a slot but not started; one running goes on.
   */
  failIfNotStartedWithin(job: SimJob, ms: number, error: string): void {
    job.timers.push(
      setTimeout(() => {
        if (job.startedAt === null && !TERMINAL_PHASES.includes(job.phase)) this.finish(job, 'failed', error);
      }, ms),
    );
  }

  /** Forget a job (a deleted task): later reads answer 404; the token counts keep it. */
  remove(job: SimJob): void {
    this.byId.delete(job.id);
  }

  private setPhase(job: SimJob, phase: SimPhase): void {
    job.phase = phase;
    job.updatedAt = new Date();
    this.opts.onChange?.(job);
  }

  /** Moves waiting jobs into free slots, oldest first. */
  private admit(): void {
    while (this.waiting.length > 0 && this.active < this.opts.concurrency) {
      const job = this.waiting.shift() as SimJob;
      this.setPhase(job, 'pending');
      const p = job.input['prompt'] ?? job.input['promptText'];
      const prompt = typeof p === 'string' ? p : '';
      job.timers.push(
        setTimeout(
          () => {
            if (job.failure?.at === 'start') return this.finish(job, 'failed', job.failure.error);
            job.startedAt = new Date();
            this.setPhase(job, 'running');
            job.timers.push(
              setTimeout(() => {
                if (job.failure) this.finish(job, 'failed', job.failure.error);
                else if (prompt.includes('[sim:fail]')) this.finish(job, 'failed', 'simulated failure requested by [sim:fail]');
                else this.finish(job, 'succeeded', null);
              }, job.generationMs),
            );
          },
          Math.min(200, job.generationMs / 4),
        ),
      );
    }
  }

  private finish(job: SimJob, phase: SimPhase, error: string | null): void {
    for (const t of job.timers) clearTimeout(t);
    job.timers.length = 0;
    const w = this.waiting.indexOf(job);
    if (w >= 0) this.waiting.splice(w, 1);
    const now = new Date();
    job.startedAt ??= now;
    job.completedAt = now;
    job.error = error;
    if (phase === 'succeeded') {
      const expires = now.getTime() + this.opts.outputTtlMs;
      const sig = this.opts.signer.sign(this.signKey(job.id), expires);
      job.output = `${this.opts.baseUrl()}/${this.opts.prefix}/files/${job.id}/output.mp4?expires=${expires}&sig=${sig}`;
      this.opts.media.sample(job.durationS).catch((err: unknown) => this.opts.logger.error({ err }, 'sample generation failed'));
    }
    this.setPhase(job, phase);
    this.admit();
  }

  /**
   * The output URL signed afresh, valid outputTtlMs from now: what a provider that reissues
   * output URLs on every read answers (Runway: "fetch the task again to get fresh URLs").
   */
  freshOutput(job: SimJob): string | null {
    if (job.phase !== 'succeeded') return null;
    const expires = Date.now() + this.opts.outputTtlMs;
    return `${this.opts.baseUrl()}/${this.opts.prefix}/files/${job.id}/output.mp4?expires=${expires}&sig=${this.opts.signer.sign(this.signKey(job.id), expires)}`;
  }

  private signKey(id: string): string {
    return `${this.opts.prefix}/${id}`;
  }

  /** GET /<prefix>/files/:id/output.mp4 — the signed, expiring output (Range supported). */
  serveOutput = async (req: Request, res: Response, next: NextFunction): Promise<void> => {
    const id = String(req.params['id']);
    const verdict = this.opts.signer.check(this.signKey(id), req.query['expires'], req.query['sig']);
    if (verdict !== 'ok') {
      res.status(403).json({ error: verdict === 'expired' ? 'URL expired' : 'Bad signature' });
      return;
    }
    const job = this.get(id);
    if (!job || job.phase !== 'succeeded') {
      res.status(404).json({ error: 'No output' });
      return;
    }
    try {
      await sendOutputFile(res, next, await this.opts.media.sample(job.durationS ?? DEFAULT_DURATION_S));
    } catch (err) {
      next(err);
    }
  };

  stopTimers(): void {
    for (const j of this.byId.values()) {
      for (const t of j.timers) clearTimeout(t);
      j.timers.length = 0;
    }
  }

  clear(): void {
    this.stopTimers();
    this.byId.clear();
    this.waiting.length = 0;
    this.byToken.clear();
    this.total = 0;
  }
}

/** What every protocol module gets from the simulator. */
export interface ProtocolDeps {
  readonly baseUrl: () => string;
  readonly faults: Faults;
  readonly webhooks: WebhookSender;
  readonly media: MediaLibrary;
  readonly signer: UrlSigner;
  readonly logger: Logger;
  readonly generationMs: number;
  readonly outputTtlMs: number;
  /** Timers of delayed submit answers, cleared on close. */
  readonly pendingAnswers: Set<NodeJS.Timeout>;
  /** The catalog models' published input schemas (input-schemas.ts). */
  readonly inputs: InputSchemas;
}

/** `[sim:gen=5000]` in a prompt sets that job's generation time (protocols without free-form input). */
export function promptGenerationMs(input: Record<string, unknown>, fallback: number): number {
  const raw = input['sim_generation_ms'];
  if (typeof raw === 'number' && raw >= 0) return raw;
  const prompt = typeof input['prompt'] === 'string' ? input['prompt'] : typeof input['promptText'] === 'string' ? input['promptText'] : '';
  const m = /\[sim:gen=(\d+)\]/.exec(prompt);
  return m ? Number(m[1]) : fallback;
}
