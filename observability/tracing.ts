// OpenTelemetry traces (docs/observability.md). Every process calls installTracing() once at
// start, before it builds anything that traces; tests call it with an in-memory exporter.
//
// Off unless configured: without an OTLP endpoint (or a test exporter) no tracer provider is
// registered, so the instrumentation points (the API's request spans, the provider and S3
// client spans) use OpenTelemetry's no-op tracer, and no Temporal interceptor, workflow
// interceptor or span sink is installed at all. The SDK itself (observability/tracing-sdk.ts) is
// loaded only when tracing is on: off, a process carries only @opentelemetry/api
// (docs/decisions/0052-tracing-sdk-loaded-when-on.md).
//
// What reaches a span is decided where the span is made: route templates, provider names,
// operations, buckets, ids and status codes; never a URL's query, a header, a body or a key.
// Outgoing provider calls carry no traceparent (docs/decisions/0032).
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { OpenTelemetrySinks } from '@temporalio/interceptors-opentelemetry';
import type { WorkflowClientInterceptor } from '@temporalio/client';
import type { ActivityInterceptorsFactory, InjectedSinks } from '@temporalio/worker';
import type { Config } from '../config/env';
import type { Logger } from './logger';

export interface TracingOptions {
  /** `service.name` of this process: vidorch-api, vidorch-worker. */
  readonly serviceName: string;
  /** OTLP/HTTP base URL (`/v1/traces` is appended); unset, and no `exporter`: tracing is off. */
  readonly endpoint?: string | undefined;
  /** Headers of every export request (a collector's or a vendor's auth). */
  readonly headers?: Readonly<Record<string, string>>;
  /** Share of new traces kept (parent-based: a sampled parent's children are kept). */
  readonly sampleRatio?: number;
  /** Extra resource attributes (the region). */
  readonly attributes?: Readonly<Record<string, string>>;
  /** Tests: spans go here as they end (a SimpleSpanProcessor), e.g. an InMemorySpanExporter. */
  readonly exporter?: SpanExporter;
  /** A failed export (the collector down): at most one call per minute; the spans are dropped. */
  readonly onExportError?: (err: unknown) => void;
}

/** What the worker needs when tracing is on (workers/generation-worker.ts). */
export interface WorkerTracing {
  /** Activity spans; put first, so the span records the error the redaction inner to it left. */
  readonly activityInterceptors: ActivityInterceptorsFactory[];
  /** The sink through which the workflow sandbox's spans leave it. */
  readonly sinks: InjectedSinks<OpenTelemetrySinks>;
}

export interface Tracing {
  readonly enabled: boolean;
  /** The span exporter in use (OTLP or the test's); null when off. */
  readonly exporter: SpanExporter | null;
  /** For the Temporal client: a workflow start joins the caller's trace. Empty when off. */
  readonly clientInterceptors: WorkflowClientInterceptor[];
  /** Null when off: the worker then runs without interceptors or sinks, its bundle without them. */
  readonly worker: WorkerTracing | null;
  /** Flushes what is buffered and unregisters the global provider. */
  shutdown(): Promise<void>;
}

/** The options config/env.ts's settings give a process. */
export function tracingOptions(config: Config, serviceName: string, logger?: Logger): TracingOptions {
  return {
    ...(logger
      ? { onExportError: (err: unknown) => logger.warn({ err }, 'trace export failed; spans dropped (next report in a minute at the earliest)') }
      : {}),
    serviceName,
    endpoint: config.OTEL_EXPORTER_OTLP_ENDPOINT,
    headers: parseOtlpHeaders(config.OTEL_EXPORTER_OTLP_HEADERS),
    sampleRatio: config.OTEL_TRACES_SAMPLE_RATIO,
    attributes: { 'vidorch.region': config.REGION },
  };
}

/** OTel's header list format: `name=value` pairs, comma-separated, values percent-decoded. */
export function parseOtlpHeaders(list: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of (list ?? '').split(',')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) continue;
    const raw = pair.slice(eq + 1).trim();
    let value = raw;
    try {
      value = decodeURIComponent(raw);
    } catch {
      // not percent-encoded: taken as it is
    }
    out[pair.slice(0, eq).trim()] = value;
  }
  return out;
}

const off: Tracing = {
  enabled: false,
  exporter: null,
  clientInterceptors: [],
  worker: null,
  shutdown: async () => undefined,
};

/** Registers the tracer provider when tracing is configured (an endpoint or a test exporter); else `off`, loading no SDK. */
export async function installTracing(opts: TracingOptions): Promise<Tracing> {
  if (!opts.endpoint && !opts.exporter) return off;
  const { startTracing } = await import('./tracing-sdk');
  return startTracing(opts);
}
