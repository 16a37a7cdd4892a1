// HTTP plumbing shared by the fal, Runway and Kling adapters: one timeout per call (joined with
// the caller's signal), secrets redacted from every message, answers read only up to a size
// (providers/capped-body.ts), and the sent / may-have-been-sent classification (docs/design.md §6) of
// a submit answer into exactly one of accepted / rejected / unknown.
import { PROVIDER_ANSWER_MAX_BYTES, readCappedText } from './capped-body';
import { classifyNetworkError, parseRetryAfter } from './http-errors';
import { providerSpan, recordNoAnswer, recordStatus } from './http-span';
import { ProviderHttpError } from './replicate';
import type { ProviderJob, SubmitOutcome } from './types';

export { ProviderHttpError };

export interface ProviderHttpOptions {
  /** Provider name, the prefix of every message. */
  readonly name: string;
  readonly timeoutMs: number;
  readonly fetch?: typeof fetch;
  /** Current secrets to redact (a function: Kling's bearer token changes). */
  readonly secrets: () => readonly string[];
}

/** What the provider answered to a request whose bytes were sent. */
export interface HttpAnswer {
  readonly status: number;
  /** Null when the body could not be read (then readError says why). */
  readonly text: string | null;
  readonly readError: string | null;
  readonly headers: Headers;
}

export interface RequestInit2 {
  readonly method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** The path as a template (`/v1/tasks/{id}`): the name of the call's span, never its URL. */
  readonly route: string;
  readonly headers: Record<string, string>;
  readonly body?: string;
}

export type Rejected = Extract<SubmitOutcome, { kind: 'rejected' }>;

export function createProviderHttp(opts: ProviderHttpOptions) {
  const doFetch = opts.fetch ?? globalThis.fetch;
  const redact = (s: string): string =>
    opts
      .secrets()
      .filter((sec) => sec.length >= 4)
      .reduce((acc, sec) => acc.split(sec).join('[redacted]'), s);
  const clip = (s: string): string => redact(s.length > 300 ? `${s.slice(0, 300)}…` : s);
  const signalFor = (caller?: AbortSignal): AbortSignal => {
    const t = AbortSignal.timeout(opts.timeoutMs);
    return caller ? AbortSignal.any([t, caller]) : t;
  };

  /** A short description of an error body: a JSON message/detail/error field, else the text. */
  function describeBody(text: string | null, readError: string | null = null): string {
    if (text === null) return `(body unreadable: ${readError ?? 'unknown'})`;
    try {
      const j = JSON.parse(text) as Record<string, unknown>;
      for (const k of ['detail', 'message', 'error', 'title']) {
        const v = j[k];
        if (typeof v === 'string' && v.length > 0) return clip(v);
      }
    } catch {
      // not JSON
    }
    return clip(text.trim());
  }

  const rejected = (retryable: boolean, status: number | null, reason: string, retryAfterMs: number | null = null): Rejected => ({
    kind: 'rejected',
    retryable,
    status,
    retryAfterMs,
    reason: redact(`${opts.name}: ${reason}`),
  });
  const unknown = (reason: string): SubmitOutcome => ({ kind: 'unknown', reason: redact(`${opts.name}: ${reason}`) });

  /**
   * Sends a request whose outcome matters (a submit). Network failures become an outcome:
   * not sent → rejected (retryable unless a local mistake), sent → unknown.
   */
  async function send(url: string, init: RequestInit2, caller?: AbortSignal): Promise<HttpAnswer | SubmitOutcome> {
    if (caller?.aborted) return rejected(true, null, 'aborted by caller before sending');
    return providerSpan(opts.name, init.method, init.route, url, async (span) => {
      let res: Response;
      try {
        res = await doFetch(url, { method: init.method, headers: init.headers, body: init.body, signal: signalFor(caller), redirect: 'manual' });
      } catch (err) {
        const c = classifyNetworkError(err, caller);
        recordNoAnswer(span, c.sent);
        return c.sent ? unknown(c.reason) : rejected(!c.fatal, null, c.reason);
      }
      recordStatus(span, res.status);
      try {
        return { status: res.status, text: await readCappedText(res, PROVIDER_ANSWER_MAX_BYTES), readError: null, headers: res.headers };
      } catch (err) {
        return { status: res.status, text: null, readError: classifyNetworkError(err, caller).reason, headers: res.headers };
      }
    });
  }

  /**
   * The generic part of a submit answer's classification. 2xx is handed to `parse`; an answer
   * that cannot be parsed is unknown (the job may exist). 429 → rejected retryable (Retry-After);
   * 408/409/5xx → unknown (never proof of absence); other 4xx → rejected; 1xx/3xx → rejected.
   */
  function classifySubmit(a: HttpAnswer, parse: (json: unknown) => ProviderJob | { malformed: string }): SubmitOutcome {
    const { status } = a;
    if (status >= 200 && status <= 299) {
      if (a.text === null) return unknown(`HTTP ${status} but the body could not be read (${a.readError})`);
      let json: unknown;
      try {
        json = JSON.parse(a.text);
      } catch {
        return unknown(`HTTP ${status} with a non-JSON body`);
      }
      const job = parse(json);
      if ('malformed' in job) return unknown(`HTTP ${status} with a malformed answer: ${clip(job.malformed)}`);
      return { kind: 'accepted', job };
    }
    const detail = describeBody(a.text, a.readError);
    if (status === 429) return rejected(true, 429, `rate limited: ${detail}`, parseRetryAfter(a.headers.get('retry-after')));
    if (status === 408 || status === 409) return unknown(`HTTP ${status}: ${detail}`);
    if (status >= 500) return unknown(`HTTP ${status} (the provider may have created the job): ${detail}`);
    if (status >= 400) return rejected(false, status, `HTTP ${status}: ${detail}`);
    return rejected(false, status, `unexpected HTTP ${status} (check the provider base URL)`);
  }

  /**
   * A read-like call (status, cancel, lookup): throws ProviderHttpError (404 → ProviderNotFound,
   * 5xx/429/408/network, an answer over the size limit → transient), returns the parsed JSON body
   * (null for an empty body).
   */
  async function read(url: string, init: RequestInit2, what: string, caller?: AbortSignal): Promise<unknown> {
    const { res, text } = await providerSpan(opts.name, init.method, init.route, url, async (span) => {
      try {
        const r = await doFetch(url, { method: init.method, headers: init.headers, body: init.body, signal: signalFor(caller), redirect: 'manual' });
        recordStatus(span, r.status);
        return { res: r, text: await readCappedText(r, PROVIDER_ANSWER_MAX_BYTES) };
      } catch (err) {
        const c = classifyNetworkError(err, caller);
        throw new ProviderHttpError(redact(`${opts.name} ${what}: ${c.reason}`), null, !c.fatal);
      }
    });
    if (res.status === 404) throw new ProviderHttpError(redact(`${opts.name} ${what}: not found`), 404, false);
    if (res.status < 200 || res.status > 299) {
      const transient = res.status >= 500 || res.status === 429 || res.status === 408;
      throw new ProviderHttpError(redact(`${opts.name} ${what}: HTTP ${res.status}: ${describeBody(text)}`), res.status, transient);
    }
    if (text.trim() === '') return null;
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new ProviderHttpError(redact(`${opts.name} ${what}: response is not JSON`), res.status, true);
    }
  }

  /** A malformed provider answer to a read: transient (a proxy or a deploy glitch), never a secret. */
  const malformed = (what: string, detail: string): ProviderHttpError =>
    new ProviderHttpError(`${opts.name} ${what}: malformed answer: ${clip(detail)}`, null, true);

  return { send, read, classifySubmit, describeBody, rejected, unknown, redact, clip, malformed };
}

/** The first finite-number fields of an object, for ProviderJob.metrics. */
export function numericMetrics(o: Record<string, unknown> | null | undefined): Record<string, number> | null {
  if (!o) return null;
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(o)) if (typeof v === 'number' && Number.isFinite(v)) out[k] = v;
  return Object.keys(out).length > 0 ? out : null;
}

/** A header's single value from node's or a plain header record (case-insensitive). */
export function headerValue(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const want = name.toLowerCase();
  for (const [k, v] of Object.entries(headers)) {
    if (k.toLowerCase() !== want) continue;
    return Array.isArray(v) ? v[0] : v;
  }
  return undefined;
}

/** Dates from ISO strings or epoch milliseconds; null when absent or invalid. */
export function toDate(v: string | number | null | undefined): Date | null {
  if (v === null || v === undefined || v === '') return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}
