// RFC 9457 problem+json: every error the API returns, mapped in one place.
import { createHash } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { ErrorRequestHandler } from 'express';
import { z } from 'zod';
import { FenceRejectedError } from '../db/fence';
import { ModePausedError } from '../db/modes';
import type { Logger } from '../observability/logger';
import { redactText } from '../observability/redact';
import { activeTraceId } from '../observability/trace-context';
import type { ResponseContract } from './contract';

/** Retry-After of a 503 for a mode that forbids the request (an operator's change: not seconds away). */
export const RETRY_AFTER_MODE_S = 30;

export interface FieldError {
  readonly field: string;
  readonly message: string;
}

export class HttpProblem extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly title: string,
    readonly detail?: string,
    readonly errors: readonly FieldError[] = [],
    readonly headers: Record<string, string> = {},
  ) {
    super(detail ?? title);
    this.name = 'HttpProblem';
  }
}

export const problems = {
  validation: (errors: FieldError[]) =>
    new HttpProblem(400, 'validation-failed', 'The request is not valid', errors.map((e) => `${e.field}: ${e.message}`).join('; '), errors),
  missingHeader: (header: string) =>
    new HttpProblem(400, 'missing-header', `The ${header} header is required`, undefined, [{ field: `header:${header}`, message: 'required' }]),
  unauthorized: () =>
    new HttpProblem(401, 'unauthorized', 'A valid API key is required', 'Send Authorization: Bearer <API key>', [], { 'WWW-Authenticate': 'Bearer' }),
  notFound: (what: string) => new HttpProblem(404, 'not-found', `${what} not found`),
  conflict: (detail: string) => new HttpProblem(409, 'conflict', 'The request conflicts with the current state', detail),
  idempotencyMismatch: () =>
    new HttpProblem(
      422,
      'idempotency-key-reused',
      'This Idempotency-Key was used with a different request body',
      'Use a new Idempotency-Key for a different request',
      [{ field: 'header:Idempotency-Key', message: 'already used with another body' }],
    ),
  insufficientCredits: (needed: string, available: string) =>
    new HttpProblem(402, 'insufficient-credits', 'Not enough credits', `the task needs ${needed} credits; ${available} available`),
  budgetExceeded: (b: { scope: 'tenant' | 'key'; limit: string; remaining: string; needed: string; period: string; periodEnd: Date }) =>
    new HttpProblem(
      402,
      'budget-exceeded',
      'Over the spend budget',
      `the ${b.scope === 'tenant' ? "tenant's" : "API key's"} ${b.period} budget is ${b.limit} credits; ${b.remaining} remain until ${b.periodEnd.toISOString()}; the task needs ${b.needed}`,
      [{ field: `budget:${b.scope}`, message: `limit ${b.limit}, remaining ${b.remaining}` }],
    ),
  unavailable: (detail: string, retryAfterSeconds: number) =>
    new HttpProblem(503, 'unavailable', 'The service cannot take this request now', detail, [], { 'Retry-After': String(retryAfterSeconds) }),
  badSignature: (detail: string) => new HttpProblem(401, 'invalid-signature', 'The callback signature is not valid', detail),
  unsupportedMediaType: (got: string) =>
    new HttpProblem(415, 'unsupported-media-type', 'The request body must be application/json', `got ${got.slice(0, 100)}`, [
      { field: 'header:Content-Type', message: 'must be application/json' },
    ]),
};

/** The body of every error answer (RFC 9457), as sendProblem() writes it. */
export const problemDocument = z
  .object({
    type: z.url().describe('https://docs.vidorch.dev/problems/<code>: the kind of problem, stable'),
    title: z.string(),
    status: z.int().min(400).max(599),
    detail: z.string().optional(),
    errors: z.array(z.object({ field: z.string().describe('body field path, `query.<name>`, `header:<Name>` or `path`'), message: z.string() })).optional(),
    instance: z.string().optional().describe('The request path'),
    trace_id: z
      .string()
      .regex(/^[0-9a-f]{32}$/)
      .optional()
      .describe("The request's trace id when tracing is on (docs/observability.md): quote it when reporting a problem"),
  })
  .meta({ id: 'Problem' });
export type ProblemDocument = z.infer<typeof problemDocument>;

const retryAfter = z
  .string()
  .regex(/^[0-9]+$/)
  .describe('Seconds to wait before retrying');

const PROBLEM_ANSWERS: Record<number, string> = {
  400: 'The request is not valid: `errors` names each field (body, query, header or path)',
  401: 'No valid API key',
  402: 'Not enough credits for this task, or over a spend budget (`errors` names it: budget:tenant or budget:key, its limit and what remains)',
  404: "Not found (another tenant's resource is not found either)",
  409: 'The request conflicts with the current state',
  413: 'The request body is over API_BODY_LIMIT',
  415: 'The request body is not application/json, or its encoding or charset is not supported',
  422: 'This Idempotency-Key was used with another request body',
  429: 'Over the rate limit: retry after Retry-After seconds',
  500: 'Internal error',
  503: 'The mode, region or a dependency does not admit this request now: retry after Retry-After seconds',
};

/**
 * The problem+json answers with these statuses, for a route contract (api/contract.ts). 429 and
 * 503 always carry Retry-After; `bearer` routes' 401 carries `WWW-Authenticate: Bearer`.
 */
export function problemAnswers(
  statuses: readonly number[],
  opts: { bearer?: boolean; describe?: Record<number, string> } = {},
): Record<number, ResponseContract> {
  return Object.fromEntries(
    statuses.map((status) => {
      const description = opts.describe?.[status] ?? PROBLEM_ANSWERS[status];
      if (!description) throw new Error(`no problem answer for ${status}`);
      const headers =
        status === 429 || status === 503
          ? z.object({ 'Retry-After': retryAfter })
          : status === 401 && opts.bearer
            ? z.object({ 'WWW-Authenticate': z.literal('Bearer') })
            : undefined;
      return [status, { description, content: { mediaType: 'application/problem+json', schema: problemDocument }, ...(headers ? { headers } : {}) }];
    }),
  );
}

export function zodFieldErrors(error: z.ZodError, prefix = ''): FieldError[] {
  return error.issues.map((i) => {
    const path = [prefix, ...i.path.map(String)].filter(Boolean).join('.');
    // Unknown keys are reported on the object; name each key as the field.
    if (i.code === 'unrecognized_keys') {
      return { field: [path, ...(i.keys ?? [])].filter(Boolean).join('.'), message: `unknown field${i.keys.length > 1 ? 's' : ''}` };
    }
    return { field: path || '(body)', message: i.message };
  });
}

/**
 * express's default ETag of a body (weak: `W/"<length hex>-<sha1 base64, 27 characters>"`), so
 * answers written without express carry the header express gave them.
 */
export function weakEtag(body: Buffer): string {
  const hash = createHash('sha1').update(body).digest('base64').slice(0, 27);
  return `W/"${body.length.toString(16)}-${hash}"`;
}

/** The problem+json document of a problem (an answer's body, or one item's result in a batch). */
export function problemDocumentOf(p: HttpProblem, instance?: string): ProblemDocument {
  // The request span's trace id (tracing on), so a client's report leads to the trace.
  const traceId = activeTraceId();
  return {
    type: `https://docs.vidorch.dev/problems/${p.code}`,
    title: p.title,
    status: p.status,
    ...(p.detail ? { detail: redactText(p.detail) } : {}),
    ...(p.errors.length ? { errors: p.errors.map((e) => ({ field: e.field, message: redactText(e.message) })) } : {}),
    ...(instance ? { instance } : {}),
    ...(traceId ? { trace_id: traceId } : {}),
  };
}

/**
 * Writes the problem answer: the problem's own headers, then Content-Type, Content-Length and
 * the weak ETag in the order res.json() sets them.
 */
export function sendProblem(res: ServerResponse, p: HttpProblem, instance?: string): void {
  for (const [k, v] of Object.entries(p.headers)) res.setHeader(k, v);
  const doc = problemDocumentOf(p, instance);
  const body = Buffer.from(JSON.stringify(doc));
  res.statusCode = p.status;
  res.setHeader('Content-Type', 'application/problem+json; charset=utf-8');
  res.setHeader('Content-Length', body.length);
  res.setHeader('ETag', weakEtag(body));
  res.end(body);
}

/** Postgres could not be reached or refused work: 503 with Retry-After, never a 500. */
export function isDatabaseUnavailable(err: unknown): boolean {
  const codes = ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', '57P01', '57P02', '57P03', '53300', '08000', '08001', '08003', '08006'];
  // drizzle wraps the driver's error (DrizzleQueryError → cause): look down the cause chain.
  for (let e = err as { code?: unknown; message?: string; cause?: unknown } | null, depth = 0; e && depth < 5; e = e.cause as typeof e, depth += 1) {
    if (typeof e.code === 'string' && codes.includes(e.code)) return true;
    // "not queryable": a transaction whose server crashed mid-way; drizzle's ROLLBACK then fails
    // on the dead client and that error replaces the original one.
    if (/timeout exceeded when trying to connect|Connection terminated|connect ECONNREFUSED|connection error and is not queryable/i.test(e.message ?? ''))
      return true;
  }
  return false;
}

/**
 * The problem answering an error, and the instance it names (`path`, the request's original
 * URL, unless the path itself is what is wrong). Logs what is the server's fault.
 */
export function problemFor(err: unknown, logger: Logger, path: string): { problem: HttpProblem; instance: string | undefined } {
  const at = (problem: HttpProblem, instance: string | undefined = path) => ({ problem, instance });
  if (err instanceof HttpProblem) return at(err);
  const bodyErr = err as { type?: string; status?: number; limit?: number };
  if (bodyErr.type === 'entity.too.large') {
    return at(new HttpProblem(413, 'body-too-large', 'The request body is too large', `limit is ${bodyErr.limit} bytes`));
  }
  if (bodyErr.type === 'entity.parse.failed') {
    return at(problems.validation([{ field: '(body)', message: 'body is not valid JSON' }]));
  }
  if (bodyErr.type === 'encoding.unsupported' || bodyErr.type === 'charset.unsupported') {
    return at(new HttpProblem(415, 'unsupported-encoding', 'Unsupported body encoding'));
  }
  if (err instanceof URIError) {
    // The router could not percent-decode a path parameter (e.g. /v1/tasks/%ff%fe).
    return at(problems.validation([{ field: 'path', message: 'not valid percent-encoding' }]), undefined);
  }
  if (typeof bodyErr.status === 'number' && bodyErr.status >= 400 && bodyErr.status < 500) {
    // Anything else the HTTP layer refused as the client's fault (http-errors with a 4xx status).
    return at(new HttpProblem(bodyErr.status, 'bad-request', 'The request is not valid'), undefined);
  }
  if (err instanceof FenceRejectedError) {
    return at(problems.unavailable('the region fence moved (failover or mode change); retry', 1));
  }
  if (err instanceof ModePausedError) {
    // The mode as the writing transaction saw it (newer than the admission's cached read).
    return at(problems.unavailable(err.message, RETRY_AFTER_MODE_S));
  }
  if (isDatabaseUnavailable(err)) {
    logger.warn({ err, path: redactText(path) }, 'database unavailable');
    return at(problems.unavailable('the task database is unreachable; retry later', 5));
  }
  logger.error({ err, path: redactText(path) }, 'unhandled error');
  return at(new HttpProblem(500, 'internal', 'Internal error'));
}

export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (err, req, res, _next) => {
    const { problem, instance } = problemFor(err, logger, req.originalUrl);
    sendProblem(res, problem, instance);
  };
}
