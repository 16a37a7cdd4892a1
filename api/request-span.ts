// One server span per API request (docs/observability.md): method, route template, status and
// the tenant once authenticated. Never the path itself (a callback URL's path holds its token,
// docs/decisions/0016), the query, a header (the API key) or a body. An incoming traceparent is
// ignored: a client's trace id must not pick our trace (and its sampling).
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import type { NextFunction, Request, Response } from 'express';
import { tracer } from '../observability/trace-context';

export function requestSpans() {
  return (req: Request, res: Response, next: NextFunction) => {
    const span = tracer().startSpan(`${req.method}`, { kind: SpanKind.SERVER, attributes: { 'http.request.method': req.method } }, ROOT_CONTEXT);
    if (!span.isRecording()) return next();
    const ctx = trace.setSpan(ROOT_CONTEXT, span);
    // The body is read in stream callbacks that would otherwise run outside the request's context.
    context.bind(ctx, req);
    context.bind(ctx, res);
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      const route = routeOf(req);
      span.updateName(`${req.method} ${route}`);
      span.setAttribute('http.route', route);
      span.setAttribute('http.response.status_code', res.statusCode);
      if (req.tenant) span.setAttribute('vidorch.tenant_id', req.tenant.tenantId);
      if (!res.writableFinished) span.setAttribute('error.type', 'aborted');
      if (res.statusCode >= 500 || !res.writableFinished) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    };
    res.once('finish', end);
    res.once('close', end);
    context.with(ctx, next);
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
