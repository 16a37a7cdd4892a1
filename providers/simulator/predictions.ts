// The simulator's prediction store and timer-driven lifecycle:
// starting → processing (after min(200 ms, T/4), or the start delay knob) → succeeded | failed
// (T after creation, later by the start delay). A `Cancel-After` lifetime ends it first: aborted
// while still starting (never ran, not billed), canceled while processing.
// A prediction reads back with the documented fields only (docs/providers.md): no `webhook`.
import { createHash, randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { simLogLines } from './jobs';
import { clampDuration, type MediaLibrary, type UrlSigner } from './media';
import { WEBHOOK_EVENT_TYPES, WebhookSender, type WebhookEventType } from './webhooks';

export type PredictionStatus = 'starting' | 'processing' | 'succeeded' | 'failed' | 'canceled' | 'aborted';
const TERMINAL: readonly PredictionStatus[] = ['succeeded', 'failed', 'canceled', 'aborted'];

export interface SimPrediction {
  readonly seq: number;
  readonly id: string;
  /** `owner/name`. */
  readonly model: string;
  /** The 64-character version id. */
  readonly version: string;
  readonly input: Record<string, unknown>;
  status: PredictionStatus;
  readonly createdAt: Date;
  startedAt: Date | null;
  completedAt: Date | null;
  readonly webhook: string | null;
  readonly eventsFilter: readonly WebhookEventType[];
  output: string | null;
  error: string | null;
  /** Last path segment of the webhook URL. */
  readonly token: string | null;
  readonly durationS: number;
  /** From creation to its end; processing runs for most of it. */
  readonly generationMs: number;
  readonly timers: NodeJS.Timeout[];
}

export interface CreatePrediction {
  /** `owner/name` (official-model endpoint), or null when a version was given. */
  readonly model: string | null;
  /** `owner/name:id` or a bare 64-character id (versioned endpoint), or null. */
  readonly version: string | null;
  readonly input: Record<string, unknown>;
  readonly webhook?: string | undefined;
  readonly webhook_events_filter?: readonly WebhookEventType[] | undefined;
  /** The create's `Cancel-After`, in ms from creation (parseCancelAfter). */
  readonly cancelAfterMs?: number | null;
  /** How long it stays `starting` (the start_delay_ms knob); default min(200 ms, T/4). */
  readonly startDelayMs?: number;
  /** The output's length, for a model that takes no duration (default: the input's `duration`). */
  readonly durationS?: number;
}

/**
 * A `Cancel-After` value in ms, or null when malformed or under Replicate's 5 s minimum
 * (https://replicate.com/docs/reference/http#predictions.create: a duration with an optional
 * unit, `s`, `m` or `h`, combinable as in `1h30m45s`; a bare number is seconds).
 */
export function parseCancelAfter(value: string): number | null {
  const v = value.trim();
  let ms: number;
  if (/^\d+$/.test(v)) ms = Number(v) * 1000;
  else {
    const m = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(v);
    if (!m || v === '') return null;
    ms = (Number(m[1] ?? 0) * 3600 + Number(m[2] ?? 0) * 60 + Number(m[3] ?? 0)) * 1000;
  }
  return ms >= 5_000 ? ms : null;
}

export interface PredictionStoreOptions {
  readonly baseUrl: () => string;
  readonly generationMs: number;
  readonly outputTtlMs: number;
  readonly media: MediaLibrary;
  readonly signer: UrlSigner;
  readonly webhooks: WebhookSender;
  readonly logger: Logger;
  /** How long after it finishes a prediction keeps its input and output (Replicate: an hour for API predictions). */
  readonly dataRetentionMs: number;
}

const ALNUM = 'abcdefghijklmnopqrstuvwxyz0123456789';
function newId(): string {
  const bytes = randomBytes(26);
  let s = '';
  for (const b of bytes) s += ALNUM[b % ALNUM.length];
  return s;
}

/** The model and 64-character version a create names (an official model gets a stable simulated version). */
function modelAndVersion(req: CreatePrediction): { model: string; version: string } {
  if (req.model) return { model: req.model, version: createHash('sha256').update(req.model).digest('hex') };
  const v = req.version ?? '';
  const i = v.lastIndexOf(':');
  return i < 0 ? { model: `sim/version-${v.slice(0, 8)}`, version: v } : { model: v.slice(0, i), version: v.slice(i + 1) };
}

function tokenOf(url: string | null): string | null {
  if (!url) return null;
  try {
    const seg = new URL(url).pathname
      .split('/')
      .filter((x) => x.length > 0)
      .pop();
    return seg ? decodeURIComponent(seg) : null;
  } catch {
    return null;
  }
}

export class PredictionStore {
  private readonly byId = new Map<string, SimPrediction>();
  private seq = 0;
  total = 0;
  readonly byToken = new Map<string, number>();

  constructor(private readonly opts: PredictionStoreOptions) {}

  get(id: string): SimPrediction | undefined {
    return this.byId.get(id);
  }

  /** Ids of the predictions created with this correlation token. */
  idsFor(token: string): string[] {
    return [...this.byId.values()].filter((p) => p.token === token).map((p) => p.id);
  }

  create(req: CreatePrediction): SimPrediction {
    const genRaw = req.input['sim_generation_ms'];
    const generationMs = typeof genRaw === 'number' && genRaw >= 0 ? genRaw : this.opts.generationMs;
    const prompt = typeof req.input['prompt'] === 'string' ? req.input['prompt'] : '';
    const webhook = req.webhook ?? null;
    const p: SimPrediction = {
      seq: ++this.seq,
      id: newId(),
      ...modelAndVersion(req),
      input: req.input,
      status: 'starting',
      createdAt: new Date(),
      startedAt: null,
      completedAt: null,
      webhook,
      eventsFilter: req.webhook_events_filter ?? WEBHOOK_EVENT_TYPES,
      output: null,
      error: null,
      token: tokenOf(webhook),
      durationS: clampDuration(req.durationS ?? req.input['duration']),
      generationMs,
      timers: [],
    };
    this.byId.set(p.id, p);
    this.total++;
    if (p.token) this.byToken.set(p.token, (this.byToken.get(p.token) ?? 0) + 1);
    this.opts.logger.info({ predictionId: p.id, token: p.token, generationMs }, 'prediction created');

    this.emit(p, 'start');
    const usualStartMs = Math.min(200, generationMs / 4);
    const startMs = req.startDelayMs ?? usualStartMs;
    p.timers.push(
      setTimeout(() => {
        if (p.status !== 'starting') return;
        p.status = 'processing';
        p.startedAt = new Date();
      }, startMs),
      setTimeout(
        () => {
          if (prompt.includes('[sim:fail]')) this.finish(p, 'failed', 'simulated failure requested by [sim:fail]');
          else this.finish(p, 'succeeded', null);
        },
        generationMs + Math.max(0, startMs - usualStartMs),
      ),
    );
    // The deadline a create set: not started by then → aborted (not billed), running → canceled.
    if (req.cancelAfterMs) p.timers.push(setTimeout(() => this.finish(p, p.status === 'starting' ? 'aborted' : 'canceled', null), req.cancelAfterMs));
    return p;
  }

  /** Cancel a non-terminal prediction; terminal ones are returned unchanged (as Replicate does). */
  cancel(p: SimPrediction): void {
    if (TERMINAL.includes(p.status)) return;
    this.finish(p, 'canceled', null);
  }

  private finish(p: SimPrediction, status: PredictionStatus, error: string | null): void {
    if (TERMINAL.includes(p.status)) return;
    for (const t of p.timers) clearTimeout(t);
    p.timers.length = 0;
    const now = new Date();
    // An aborted prediction never started (and has no run time to bill).
    if (status !== 'aborted') p.startedAt ??= now;
    p.completedAt = now;
    p.status = status;
    p.error = error;
    if (status === 'succeeded') {
      const expires = now.getTime() + this.opts.outputTtlMs;
      const sig = this.opts.signer.sign(p.id, expires);
      p.output = `${this.opts.baseUrl()}/replicate/files/${p.id}/output.mp4?expires=${expires}&sig=${sig}`;
      this.opts.media.sample(p.durationS).catch((err: unknown) => this.opts.logger.error({ err }, 'sample generation failed'));
    }
    this.opts.logger.info({ predictionId: p.id, status }, 'prediction finished');
    this.emit(p, 'completed');
  }

  private emit(p: SimPrediction, type: WebhookEventType): void {
    if (!p.webhook || !p.eventsFilter.includes(type)) return;
    this.opts.webhooks.emit({
      id: WebhookSender.newEventId(),
      type,
      predictionId: p.id,
      url: p.webhook,
      body: JSON.stringify(this.toJson(p)),
    });
  }

  /**
   * Replicate removes an API prediction's input, output, files and logs an hour after it finishes
   * (https://replicate.com/docs/topics/predictions/data-retention): `data_removed`.
   */
  dataRemoved(p: SimPrediction): boolean {
    return p.completedAt !== null && Date.now() - p.completedAt.getTime() >= this.opts.dataRetentionMs;
  }

  toJson(p: SimPrediction): Record<string, unknown> {
    const removed = this.dataRemoved(p);
    const base = `${this.opts.baseUrl()}/replicate/v1/predictions/${p.id}`;
    const metrics: Record<string, number> = {};
    if (p.startedAt && p.completedAt) {
      metrics['predict_time'] = (p.completedAt.getTime() - p.startedAt.getTime()) / 1000;
      metrics['total_time'] = (p.completedAt.getTime() - p.createdAt.getTime()) / 1000;
    }
    return {
      id: p.id,
      model: p.model,
      version: p.version,
      input: removed ? {} : p.input,
      // The model's output so far, one line per step (Replicate's `logs` is a string).
      logs: removed ? '' : simLogLines(p.startedAt, Math.max(1, p.generationMs - Math.min(200, p.generationMs / 4)), p.completedAt ?? new Date()).join('\n'),
      output: removed ? null : p.output,
      data_removed: removed,
      error: p.error,
      status: p.status,
      source: 'api',
      created_at: p.createdAt.toISOString(),
      started_at: p.startedAt?.toISOString() ?? null,
      completed_at: p.completedAt?.toISOString() ?? null,
      urls: { get: base, cancel: `${base}/cancel` },
      metrics,
    };
  }

  /**
   * Newest first, predictions with seq < before (0 = from the newest), created in
   * [createdAfter, createdBefore) when given (the list's documented filters).
   */
  page(before: number, size: number, window: { createdAfter?: Date; createdBefore?: Date } = {}): { items: SimPrediction[]; more: boolean } {
    const { createdAfter, createdBefore } = window;
    const all = [...this.byId.values()]
      .filter((p) => before === 0 || p.seq < before)
      .filter((p) => (!createdAfter || p.createdAt >= createdAfter) && (!createdBefore || p.createdAt < createdBefore))
      .sort((a, b) => b.seq - a.seq);
    return { items: all.slice(0, size), more: all.length > size };
  }

  /** Stop every lifecycle timer (shutdown); predictions and counts stay readable. */
  stopTimers(): void {
    for (const p of this.byId.values()) {
      for (const t of p.timers) clearTimeout(t);
      p.timers.length = 0;
    }
  }

  /** Stop every lifecycle timer and forget all predictions and counts. */
  clear(): void {
    this.stopTimers();
    this.byId.clear();
    this.byToken.clear();
    this.total = 0;
  }
}
