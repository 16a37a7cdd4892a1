// One webhook delivery attempt (docs/webhooks.md): a Standard Webhooks request signed with every
// secret that signs for the endpoint now (two during a rotation's overlap, db/webhook-secrets.ts),
// sent through the SSRF guard (net/safe-fetch.ts: public addresses only, checked at connect), no
// redirects followed, the whole attempt bounded by a timeout and the answer read only up to a limit.
import { createHmac } from 'node:crypto';
import type { Agent } from 'undici';
import { redactText } from '../observability/redact';
import { unsafeAddressIn } from './safe-fetch';
import { webhookUrlProblem } from './webhook-url';

export interface WebhookRequest {
  readonly url: string;
  /** The message id: the same on every attempt of one event (receivers dedupe on it). */
  readonly webhookId: string;
  readonly timestamp: Date;
  readonly body: string;
  /** Plain "whsec_…" secrets; each adds one signature. */
  readonly secrets: readonly string[];
}

export interface SendOptions {
  readonly dispatcher: Agent;
  /** WEBHOOK_ALLOW_PRIVATE: http and loopback receivers (dev and tests). */
  readonly allowLoopback: boolean;
  readonly timeoutMs: number;
  readonly maxResponseBytes: number;
}

export interface AttemptOutcome {
  readonly ok: boolean;
  readonly status: number | null;
  readonly latencyMs: number;
  /** What the tenant sees (the delivery log): never an address a name resolved to. */
  readonly error: string | null;
  /** For the operator's log only: what `error` leaves out (the refused address a name resolved to). */
  readonly detail: string | null;
  readonly excerpt: string | null;
  /** Ran out of its timeout (the receiver held the attempt: its target backs off, db/webhooks.ts). */
  readonly timedOut: boolean;
}

const EXCERPT_CHARS = 512;

const SECRET_PREFIX = 'whsec_';

/**
 * The `webhook-signature` header: one "v1,<base64>" per secret, space-separated, each the
 * HMAC-SHA256 of "<id>.<Unix seconds>.<body>" under the bytes of the secret's base64 (after its
 * `whsec_` prefix), as the `standardwebhooks` package signs (test/security/webhook-send.test.ts
 * verifies with it), on node:crypto's native HMAC rather than the package's JavaScript one.
 */
export function signatureHeader(secrets: readonly string[], webhookId: string, timestamp: Date, body: string): string {
  const signed = `${webhookId}.${Math.floor(timestamp.getTime() / 1000)}.`;
  return secrets
    .map((secret) => {
      const key = Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, 'base64');
      if (key.length === 0) throw new Error('a webhook signing secret is empty');
      return `v1,${createHmac('sha256', key).update(signed).update(body, 'utf8').digest('base64')}`;
    })
    .join(' ');
}

export async function sendWebhook(req: WebhookRequest, opts: SendOptions): Promise<AttemptOutcome> {
  const started = performance.now();
  const done = (o: Omit<AttemptOutcome, 'latencyMs' | 'timedOut' | 'detail'>, timedOut = false, detail: string | null = null): AttemptOutcome => ({
    ...o,
    detail,
    timedOut,
    latencyMs: Math.round(performance.now() - started),
  });
  const refused = webhookUrlProblem(req.url, opts.allowLoopback);
  if (refused) return done({ ok: false, status: null, error: `url ${refused}`, excerpt: null });
  if (req.secrets.length === 0)
    return done({ ok: false, status: null, error: 'no signing secret (the tenant has no enabled webhook endpoint)', excerpt: null });
  const signal = AbortSignal.timeout(opts.timeoutMs);
  try {
    const res = await fetch(req.url, {
      method: 'POST',
      body: req.body,
      redirect: 'manual',
      signal,
      dispatcher: opts.dispatcher,
      headers: {
        'content-type': 'application/json',
        'user-agent': 'vidorch-webhooks/1',
        'webhook-id': req.webhookId,
        'webhook-timestamp': String(Math.floor(req.timestamp.getTime() / 1000)),
        'webhook-signature': signatureHeader(req.secrets, req.webhookId, req.timestamp, req.body),
      },
    });
    const excerpt = await readBounded(res, opts.maxResponseBytes);
    const ok = res.status >= 200 && res.status < 300;
    const error = ok ? null : res.status >= 300 && res.status < 400 ? `answered ${res.status} (redirects are not followed)` : `answered ${res.status}`;
    return done({ ok, status: res.status, error, excerpt });
  } catch (err) {
    // A name that resolved to an address we do not connect to: the tenant learns only that, not
    // the address (which would map our internal DNS for them); the operator's log keeps it.
    const unsafe = signal.aborted ? null : unsafeAddressIn(err);
    if (unsafe) return done({ ok: false, status: null, error: REFUSED_ADDRESS, excerpt: null }, false, `refused: ${unsafe.message}`);
    return done({ ok: false, status: null, error: describe(err, signal), excerpt: null }, signal.aborted);
  }
}

/** Reads at most `max` bytes of the answer, then drops the connection's remaining body. */
async function readBounded(res: Response, max: number): Promise<string | null> {
  if (!res.body) return null;
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < max) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  if (size === 0) return null;
  const text = Buffer.concat(chunks).subarray(0, max).toString('utf8');
  return redactText(text.slice(0, EXCERPT_CHARS));
}

/** The tenant-visible error of an attempt refused at connect (net/safe-fetch.ts). */
export const REFUSED_ADDRESS = 'refused: the address the URL resolves to is not allowed';

function describe(err: unknown, signal: AbortSignal): string {
  if (signal.aborted) return 'timed out';
  for (let e = err as { code?: unknown; message?: string; cause?: unknown } | null, depth = 0; e && depth < 5; e = e.cause as typeof e, depth += 1) {
    if (typeof e.code === 'string') return redactText(`${e.code}${e.message ? `: ${e.message}` : ''}`).slice(0, 300);
  }
  return redactText(String((err as Error)?.message ?? err)).slice(0, 300);
}
