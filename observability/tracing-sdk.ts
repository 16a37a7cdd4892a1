// The OpenTelemetry SDK half of observability/tracing.ts: the tracer provider, the OTLP exporter
// and Temporal's interceptors. Imported by installTracing only when tracing is configured, so a
// process with tracing off never loads it (docs/decisions/0052-tracing-sdk-loaded-when-on.md).
import { context, propagation, trace } from '@opentelemetry/api';
import { loggingErrorHandler, setGlobalErrorHandler } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Resource } from '@opentelemetry/resources';
import { BatchSpanProcessor, ParentBasedSampler, SimpleSpanProcessor, TraceIdRatioBasedSampler, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import {
  OpenTelemetryActivityInboundInterceptor,
  OpenTelemetryWorkflowClientInterceptor,
  makeWorkflowExporter,
  type OpenTelemetrySinks,
} from '@temporalio/interceptors-opentelemetry';
import type { InjectedSinks } from '@temporalio/worker';
import type { Tracing, TracingOptions } from './tracing';

export function startTracing(opts: TracingOptions): Tracing {
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
