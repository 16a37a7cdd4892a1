// A client span around each provider HTTP call (docs/observability.md): the provider, the
// method, the route template (`/v1/predictions/{id}`: never the URL, whose query may carry a
// callback URL with its token), the host and the answer's status. The request itself is left
// alone: no traceparent goes to a provider (docs/decisions/0032).
import { SpanKind, SpanStatusCode, type Span } from '@opentelemetry/api';
import { inSpan } from '../observability/trace-context';

export function providerSpan<T>(provider: string, method: string, route: string, url: string, fn: (span: Span) => Promise<T>): Promise<T> {
  return inSpan(
    `${method} ${route}`,
    { 'vidorch.provider': provider, 'http.request.method': method, 'url.template': route, 'server.address': hostOf(url) },
    fn,
    SpanKind.CLIENT,
  );
}

/** The answer's status; 4xx and 5xx mark the span as an error (OTel's HTTP client convention). */
export function recordStatus(span: Span, status: number): void {
  span.setAttribute('http.response.status_code', status);
  if (status >= 400) {
    span.setAttribute('error.type', String(status));
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
}

/** A call that got no answer: `error.type` says whether the request may have been sent. */
export function recordNoAnswer(span: Span, sent: boolean): void {
  span.setAttribute('error.type', sent ? 'no_answer_after_send' : 'not_sent');
  span.setStatus({ code: SpanStatusCode.ERROR });
}

function hostOf(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return 'invalid';
  }
}
