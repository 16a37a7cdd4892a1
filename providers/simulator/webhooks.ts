// Standard Webhooks delivery, the way Replicate sends them: one webhook-id per event (kept
// across retries and duplicates), a fresh timestamp and signature per attempt, retries with
// exponential backoff on non-2xx or network errors, then give up. Fault knobs apply here.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { Webhook } from 'standardwebhooks';
import type { Faults, SimProvider } from './faults';

export type WebhookEventType = 'start' | 'output' | 'logs' | 'completed';
export const WEBHOOK_EVENT_TYPES: readonly WebhookEventType[] = ['start', 'output', 'logs', 'completed'];

export interface WebhookEvent {
  /** The webhook-id header: unique per event, identical on every redelivery of it. */
  readonly id: string;
  readonly type: WebhookEventType;
  readonly predictionId: string;
  readonly url: string;
  /** The prediction JSON at the time of the event. */
  readonly body: string;
  /** Which protocol sends it (fault selection); default replicate. */
  readonly provider?: SimProvider;
  /**
   * The provider's own delivery headers for one attempt (fal: ED25519 headers; Kling: none).
   * Absent: Standard Webhooks headers, the way Replicate signs.
   */
  readonly headers?: (now: Date, wrongKey: boolean) => Record<string, string>;
}

export interface WebhookSenderOptions {
  readonly secret: string;
  readonly faults: Faults;
  readonly logger: Logger;
  readonly attempts: number;
  readonly baseDelayMs: number;
  readonly timeoutMs: number;
}

export class WebhookSender {
  sent = 0;
  failed = 0;
  attempts = 0;
  private readonly signer: Webhook;
  private readonly wrongSigner = new Webhook(randomBytes(32).toString('base64'));
  private life = new AbortController();
  /** Per prediction: deliveries are sequential, in emission order (or reordered by the fault). */
  private readonly chains = new Map<string, Promise<void>>();
  private readonly heldStarts = new Map<string, WebhookEvent>();

  constructor(private readonly opts: WebhookSenderOptions) {
    this.signer = new Webhook(opts.secret);
  }

  static newEventId(): string {
    return `msg_${randomBytes(12).toString('base64url')}`;
  }

  /** Queue an event according to the current fault config. */
  emit(event: WebhookEvent): void {
    const f = this.opts.faults.for(event.provider ?? 'replicate');
    if (f.callbacks === 'off') return;
    if (f.callback_reorder && event.type === 'start') {
      this.heldStarts.set(event.predictionId, event);
      return;
    }
    this.enqueue(event);
    if (event.type === 'completed') {
      const held = this.heldStarts.get(event.predictionId);
      if (held) {
        this.heldStarts.delete(event.predictionId);
        this.enqueue(held);
      }
    }
  }

  private enqueue(event: WebhookEvent): void {
    const f = this.opts.faults.for(event.provider ?? 'replicate');
    const copies = 1 + (f.callback_duplicates ?? 0);
    const delay = f.callback_delay_ms ?? 0;
    const wrongKey = f.callback_wrong_key === true;
    const signal = this.life.signal;
    const prev = this.chains.get(event.predictionId) ?? Promise.resolve();
    const next = prev.then(async () => {
      if (delay > 0) await sleep(delay, undefined, { signal });
      for (let i = 0; i < copies; i++) await this.deliver(event, wrongKey, signal);
    });
    const settled = next.catch((err: unknown) => {
      if (!signal.aborted) this.opts.logger.error({ err, eventId: event.id }, 'webhook chain failed');
    });
    this.chains.set(event.predictionId, settled);
    void settled.then(() => {
      if (this.chains.get(event.predictionId) === settled) this.chains.delete(event.predictionId);
    });
  }

  private async deliver(event: WebhookEvent, wrongKey: boolean, signal: AbortSignal): Promise<void> {
    const log = this.opts.logger.child({ webhookId: event.id, type: event.type, predictionId: event.predictionId });
    for (let attempt = 0; attempt < this.opts.attempts; attempt++) {
      if (attempt > 0) await sleep(this.opts.baseDelayMs * 2 ** (attempt - 1), undefined, { signal });
      const now = new Date();
      const signed = event.headers
        ? event.headers(now, wrongKey)
        : {
            'user-agent': 'replicate-simulator/1',
            'webhook-id': event.id,
            'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
            'webhook-signature': (wrongKey ? this.wrongSigner : this.signer).sign(event.id, now, event.body),
          };
      this.attempts++;
      try {
        const res = await fetch(event.url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...signed },
          body: event.body,
          signal: AbortSignal.any([signal, AbortSignal.timeout(this.opts.timeoutMs)]),
        });
        await res.arrayBuffer().catch(() => undefined);
        if (res.ok) {
          this.sent++;
          log.debug({ status: res.status, attempt }, 'webhook delivered');
          return;
        }
        log.warn({ status: res.status, attempt }, 'webhook rejected by receiver');
      } catch (err) {
        if (signal.aborted) throw err;
        log.warn({ err: (err as Error).message, attempt }, 'webhook delivery failed');
      }
    }
    this.failed++;
    log.warn('webhook given up');
  }

  /** Drop queued and in-flight deliveries (reset / shutdown). */
  stop(): void {
    this.life.abort();
    this.life = new AbortController();
    this.chains.clear();
    this.heldStarts.clear();
  }

  resetStats(): void {
    this.sent = 0;
    this.failed = 0;
    this.attempts = 0;
  }

  /** Resolves when every queued delivery has finished (tests). */
  async idle(): Promise<void> {
    while (this.chains.size > 0) await Promise.all([...this.chains.values()]);
  }
}
