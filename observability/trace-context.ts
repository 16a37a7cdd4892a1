// The active trace, for code that makes spans or reports the trace id: the API's request span,
// provider and S3 client spans, log lines, problem bodies. Only @opentelemetry/api: until
// observability/tracing.ts registered a provider, every span here is the no-op one.
import { SpanStatusCode, isSpanContextValid, trace, type Span, type SpanKind, type Tracer } from '@opentelemetry/api';

/** The instrumentation scope of every span vidorch makes itself. */
const SCOPE = 'vidorch';

/** The tracer of vidorch's own spans: the no-op one until installTracing() registered a provider. */
export function tracer(): Tracer {
  return trace.getTracer(SCOPE);
}

/** The active span's trace id, or undefined when no (valid, i.e. recording) span is active. */
export function activeTraceId(): string | undefined {
  const sc = trace.getActiveSpan()?.spanContext();
  return sc && isSpanContextValid(sc) ? sc.traceId : undefined;
}

/** The active span's trace and span ids for a log line; empty outside a span. */
export function traceFields(): { trace_id?: string; span_id?: string } {
  const sc = trace.getActiveSpan()?.spanContext();
  return sc && isSpanContextValid(sc) ? { trace_id: sc.traceId, span_id: sc.spanId } : {};
}

/**
 * Runs `fn` inside a new active span that ends when it settles; a throw marks the span as an
 * error with `error.type` only (an error's message may hold what a span must not).
 */
export async function inSpan<T>(
  name: string,
  attributes: Record<string, string | number | boolean>,
  fn: (span: Span) => Promise<T>,
  kind?: SpanKind,
): Promise<T> {
  return tracer().startActiveSpan(name, { attributes, ...(kind !== undefined ? { kind } : {}) }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.setAttribute('error.type', errorType(err));
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** A low-cardinality error class for `error.type`: the error's name, never its message. */
export function errorType(err: unknown): string {
  if (err instanceof Error) return err.name || 'Error';
  return typeof err;
}
