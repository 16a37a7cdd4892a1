// One redaction for every error text that leaves a process: activity failures (and so workflow
// history), task failure messages, problem+json bodies and log lines. Presigned URLs carry their
// signature in the query string (X-Amz-Signature, X-Amz-Credential), tools such as ffprobe start
// their errors with the URL they were given, and provider errors may echo a key: keep the
// scheme, host and path of a URL (enough to debug), drop its query, fragment and credentials,
// and mask bearer / key-like tokens wherever they appear.
import type { ActivityInterceptorsFactory } from '@temporalio/worker';
import { redactText } from '../domain/redact-text';

// The text redaction itself is pure (domain/redact-text.ts), so db/ uses it without importing
// observability/.
export { redactText };

/**
 * What drizzle's DrizzleQueryError (anywhere in `err`'s cause chain) appended to its message:
 * "\nparams: <every parameter of the failed statement>", each text with what replaces it. A
 * parameter may be any column value: a provider's signed output URL, a tenant's webhook URL
 * with its token, a prompt. The statement itself (`query`, placeholders only) stays.
 */
export function statementParamTexts(err: unknown): [string, string][] {
  const out: [string, string][] = [];
  const seen = new Set<unknown>();
  for (
    let e = err as { query?: unknown; params?: unknown; cause?: unknown } | null;
    e && typeof e === 'object' && !seen.has(e) && seen.size < 8;
    e = e.cause as typeof e
  ) {
    seen.add(e);
    if (typeof e.query !== 'string' || !Array.isArray(e.params) || e.params.length === 0) continue;
    try {
      out.push([`\nparams: ${String(e.params)}`, `\nparams: [${e.params.length} redacted]`]);
    } catch {
      // A parameter that cannot be made text was not in the message either.
    }
  }
  return out;
}

/** `text` without the statement parameters `params` names (statementParamTexts), then redacted. */
export function redactErrorText(text: string, params: readonly [string, string][]): string {
  let out = text;
  for (const [found, replacement] of params) out = out.replaceAll(found, replacement);
  return redactText(out);
}

/**
 * Redacts an error's message and stack, and its causes', in place (keeping its class, so
 * `instanceof` and Temporal's failure types still work); returns it. A failed statement's
 * parameters leave its message.
 */
export function redactError<T>(err: T): T {
  const params = statementParamTexts(err);
  const seen = new Set<unknown>();
  for (let e: unknown = err; e instanceof Error && !seen.has(e) && seen.size < 8; e = e.cause) {
    seen.add(e);
    e.message = redactErrorText(e.message, params);
    if (e.stack) e.stack = redactErrorText(e.stack, params);
  }
  return err;
}

/**
 * Worker interceptor: whatever an activity throws is redacted before the SDK turns it into the
 * failure recorded in workflow history (and logged by the worker).
 */
export const redactActivityFailures: ActivityInterceptorsFactory = () => ({
  inbound: {
    async execute(input, next) {
      try {
        return await next(input);
      } catch (err) {
        throw redactError(err);
      }
    },
  },
});
