// One server span per API request (docs/observability.md): method, route template, status and
// the tenant once authenticated. Never the path itself (a callback URL's path holds its token,
// docs/decisions/0016), the query, a header (the API key) or a body. An incoming traceparent is
// ignored: a client's trace id must not pick our trace (and its sampling).
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, trace, type Context } from '@opentelemetry/api';
import type { NextFunction, Request, Response } from 'express';
import { tracer } from '../observability/trace-context';

/** A request's server span, ended once with its route and answer. Null when tracing is off. */
interface ServerSpan {
  /** The context to run the request in (the span active, for trace ids in problems and logs). */
  readonly context: Context;
  end(route: string, status: number, finished: boolean, tenantId?: string): void;
}

function startServerSpan(method: string): ServerSpan | null {
  const span = tracer().startSpan(method, { kind: SpanKind.SERVER, attributes: { 'http.request.method': method } }, ROOT_CONTEXT);
  if (!span.isRecording()) return null;
  let ended = false;
  return {
    context: trace.setSpan(ROOT_CONTEXT, span),
    end(route, status, finished, tenantId) {
      if (ended) return;
      ended = true;
      span.updateName(`${method} ${route}`);
      span.setAttribute('http.route', route);
      span.setAttribute('http.response.status_code', status);
      if (tenantId) span.setAttribute('vidorch.tenant_id', tenantId);
      if (!finished) span.setAttribute('error.type', 'aborted');
      if (status >= 500 || !finished) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    },
  };
}

export function requestSpans() {
  return (req: Request, res: Response, next: NextFunction) => {
    const span = startServerSpan(req.method);
    if (!span) return next();
    // The body is read in stream callbacks that would otherwise run outside the request's context.
    context.bind(span.context, req);
    context.bind(span.context, res);
    const end = () => span.end(routeOf(req), res.statusCode, res.writableFinished, req.tenant?.tenantId);
    res.once('finish', end);
    res.once('close', end);
    context.with(span.context, next);
  };
}

/**
 * The matched route's template with its router's mount ('/v1/tasks/:id'), or 'unmatched'. When
 * an error left that router, express has already restored req.baseUrl to the parent's: the
 * mount is then the path's leading segments, those the route's own template does not cover.
 */
export function routeOf(req: Request): string {
  const path: unknown = (req.route as { path?: unknown } | undefined)?.path;
  if (typeof path !== 'string') return 'unmatched';
  if (req.baseUrl) return `${req.baseUrl}${path}`;
  const own = path.split('/').filter(Boolean);
  const segments = (req.originalUrl.split('?')[0] ?? '').split('/').filter(Boolean);
  return `/${[...segments.slice(0, Math.max(0, segments.length - own.length)), ...own].join('/')}`;
}
