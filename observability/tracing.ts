// OpenTelemetry traces (docs/observability.md). Every process calls installTracing() once at
// start, before it builds anything that traces; tests call it with an in-memory exporter.
//
// Off unless configured: without an OTLP endpoint (or a test exporter) no tracer provider is
// registered, so the instrumentation points (the API's request spans, the provider and S3
// client spans) use OpenTelemetry's no-op tracer, and no Temporal interceptor, workflow
// interceptor or span sink is installed at all.
//
// What reaches a span is decided where the span is made: route templates, provider names,
// operations, buckets, ids and status codes; never a URL's query, a header, a body or a key.
// Outgoing provider calls carry no traceparent (docs/decisions/0032).
import { context, propagation, trace } from '@opentelemetry/api';
import { loggingErrorHandler, setGlobalErrorHandler } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Resource } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  ParentBasedSampler,
  SimpleSpanProcessor,
  TraceIdRatioBasedSampler,
  type SpanExporter,
  type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import {
  OpenTelemetryActivityInboundInterceptor,
  OpenTelemetryWorkflowClientInterceptor,
  makeWorkflowExporter,
  type OpenTelemetrySinks,
} from '@temporalio/interceptors-opentelemetry';
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

export function installTracing(opts: TracingOptions): Tracing {
  if (!opts.endpoint && !opts.exporter) return off;
  const exporter =
    opts.exporter ??
    // Every setting passed here: the exporter would otherwise read OTEL_* from process.env itself.
    new OTLPTraceExporter({ url: `${opts.endpoint!.replace(/\/+$/, '')}/v1/traces`, headers: { ...opts.headers }, timeoutMillis: 10_000 });
  const processor: SpanProcessor = opts.exporter
    ? new SimpleSpanProcessor(exporter)
    : new BatchSpanProcessor(exporter, { maxQueueSize: 4096, maxExportBatchSize: 512, scheduledDelayMillis: 2_000, exportTimeoutMillis: 10_000 });
  const resource = new Resource({ [ATTR_SERVICE_NAME]: opts.serviceName, ...opts.attributes });
  const provider = new NodeTracerProvider({
    resource,
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(opts.sampleRatio ?? 1) }),
    spanProcessors: [processor],
  });
  // The async-local-storage context manager and the W3C propagator. The propagator serves the
  // Temporal headers only: nothing here instruments fetch or undici, so no HTTP request we send
  // carries a traceparent (docs/decisions/0032).
  provider.register();
  if (opts.onExportError) {
    const report = opts.onExportError;
    let last = -Infinity;
    // The SDK reports export failures only here (its default handler logs to a silent diag).
    setGlobalErrorHandler((err) => {
      if (Date.now() - last < 60_000) return;
      last = Date.now();
      report(err);
    });
  }
  const activityTracer = provider.getTracer('@temporalio/interceptor-activity');
  const clientTracer = provider.getTracer('@temporalio/interceptor-client');
  return {
    enabled: true,
    exporter,
    clientInterceptors: [new OpenTelemetryWorkflowClientInterceptor({ tracer: clientTracer })],
    worker: {
      activityInterceptors: [(ctx) => ({ inbound: new OpenTelemetryActivityInboundInterceptor(ctx, { tracer: activityTracer }) })],
      sinks: { exporter: workflowSpanSink(processor, resource) },
    },
    /** Never rejects: a last export that fails is reported like any other. */
    async shutdown() {
      try {
        await provider.shutdown();
      } catch (err) {
        opts.onExportError?.(err);
      }
      setGlobalErrorHandler(loggingErrorHandler());
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}

/**
 * The interceptor's sink copies the whole WorkflowInfo into every workflow span's attributes
 * (memo, search attributes, last failure, …); only the identifying fields are kept.
 */
function workflowSpanSink(processor: SpanProcessor, resource: Resource): InjectedSinks<OpenTelemetrySinks>['exporter'] {
  const sink = makeWorkflowExporter(processor, resource);
  return {
    export: {
      ...sink.export,
      fn: (info, spans) =>
        sink.export.fn(
          {
            workflowId: info.workflowId,
            runId: info.runId,
            workflowType: info.workflowType,
            taskQueue: info.taskQueue,
            namespace: info.namespace,
            attempt: info.attempt,
          } as typeof info,
          spans,
        ),
    },
  };
}
