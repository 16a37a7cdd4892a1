// Tracing is off by default and, when configured, exports OTLP/HTTP to the configured endpoint
// with the configured headers (docs/observability.md). A process of its own (node:test runs
// each file in one), so no other file's provider is registered here.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { trace } from '@opentelemetry/api';
import { ConfigError } from '../../config/env';
import { createLogger } from '../../observability/logger';
import { activeTraceId, tracer } from '../../observability/trace-context';
import { installTracing, parseOtlpHeaders, tracingOptions } from '../../observability/tracing';
import { bundleWorkflowsInChild } from '../../workers/generation-worker';
import { testConfig } from '../support/stack';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/** A stand-in OTLP/HTTP collector: records every request. */
async function collector(): Promise<{ url: string; requests: { path: string; headers: http.IncomingHttpHeaders; body: string }[]; close(): Promise<void> }> {
  const requests: { path: string; headers: http.IncomingHttpHeaders; body: string }[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push({ path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const lines: string[] = [];
const logger = createLogger({ name: 'tracing-config', level: 'info', pretty: false, destination: { write: (l: string) => void lines.push(l) } });

describe('tracing off (no OTEL_EXPORTER_OTLP_ENDPOINT): nothing is created, nothing is exported', () => {
  test('no exporter, no interceptors, no worker sinks; spans are non-recording and carry no trace id', async () => {
    const config = testConfig();
    assert.equal(config.OTEL_EXPORTER_OTLP_ENDPOINT, undefined);
    const tracing = await installTracing(tracingOptions(config, 'vidorch-api'));
    assert.equal(tracing.enabled, false);
    assert.equal(tracing.exporter, null);
    assert.deepEqual(tracing.clientInterceptors, []);
    assert.equal(tracing.worker, null);
    tracer().startActiveSpan('off', (span) => {
      assert.equal(span.isRecording(), false);
      assert.equal(activeTraceId(), undefined);
      logger.info('inside a span with tracing off');
      span.end();
    });
    const line = JSON.parse(lines.at(-1)!) as Record<string, unknown>;
    assert.equal(line['trace_id'], undefined);
    // No provider was registered: the global one is still the API's no-op proxy delegate.
    assert.equal(trace.getTracerProvider().getTracer('x').startSpan('y').isRecording(), false);
  });
});

test('tracing off loads no OpenTelemetry SDK module; on, installTracing loads it (observability/tracing-sdk.ts)', async () => {
  // In a child process, so what this file already imported does not count: every module it
  // resolves is recorded by a resolve hook (node:module registerHooks), then installTracing runs.
  const script = `
    import { registerHooks } from 'node:module';
    const seen = [];
    registerHooks({ resolve: (specifier, context, next) => { const r = next(specifier, context); seen.push(r.url); return r; } });
    const { installTracing } = await import(${JSON.stringify(new URL('../../observability/tracing.ts', import.meta.url).href)});
    const exporter = process.argv[1] === 'on' ? { export: () => undefined, shutdown: async () => undefined } : undefined;
    const tracing = await installTracing({ serviceName: 'probe', ...(exporter ? { exporter } : {}) });
    process.stdout.write(JSON.stringify({ enabled: tracing.enabled, sdk: seen.filter((u) => /sdk-trace|exporter-trace|interceptors-opentelemetry|tracing-sdk/.test(u)) }));
    await tracing.shutdown();`;
  const run = async (mode: 'off' | 'on') => {
    const { stdout } = await execFileAsync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script, mode]);
    return JSON.parse(stdout) as { enabled: boolean; sdk: string[] };
  };
  const off = await run('off');
  assert.equal(off.enabled, false);
  assert.deepEqual(off.sdk, [], 'no SDK module resolved with tracing off');
  const on = await run('on');
  assert.equal(on.enabled, true);
  assert.ok(
    on.sdk.some((u) => u.includes('sdk-trace-node')),
    `the SDK is loaded when on: ${on.sdk.length} modules`,
  );
});

describe('tracing on: OTLP/HTTP to the configured endpoint', () => {
  test('spans reach <endpoint>/v1/traces with the configured headers and the service name; shutdown flushes', async () => {
    const c = await collector();
    try {
      const config = testConfig({
        OTEL_EXPORTER_OTLP_ENDPOINT: `${c.url}/`,
        OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20collector-token, x-tenant = ops',
      });
      const tracing = await installTracing(tracingOptions(config, 'vidorch-worker'));
      assert.equal(tracing.enabled, true);
      assert.ok(tracing.exporter);
      assert.equal(tracing.clientInterceptors.length, 1);
      assert.ok(tracing.worker?.sinks.exporter);
      let traceId = '';
      tracer().startActiveSpan('configured', (span) => {
        traceId = span.spanContext().traceId;
        assert.equal(activeTraceId(), traceId);
        span.end();
      });
      await tracing.shutdown();
      assert.equal(c.requests.length, 1, 'one export, at shutdown at the latest');
      const [r] = c.requests;
      assert.equal(r!.path, '/v1/traces');
      assert.equal(r!.headers['authorization'], 'Bearer collector-token');
      assert.equal(r!.headers['x-tenant'], 'ops');
      assert.ok(r!.body.includes('vidorch-worker'), 'service.name in the export');
      assert.ok(r!.body.includes('configured'));
      assert.ok(r!.body.includes(config.REGION), 'the region resource attribute');
      // After shutdown the global provider is gone again: back to no-op.
      assert.equal(tracer().startSpan('after').isRecording(), false);
    } finally {
      await c.close();
    }
  });

  test('a collector that is down is reported through the logger, and shutdown still resolves', async () => {
    const down = await collector();
    await down.close(); // a port nobody listens on now
    const before = lines.length;
    const config = testConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: down.url });
    const tracing = await installTracing(tracingOptions(config, 'vidorch-api', logger));
    tracer().startSpan('lost').end();
    const started = Date.now();
    await tracing.shutdown();
    const reported = lines.slice(before).map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.ok(
      reported.some((l) => l['msg'] === 'trace export failed; spans dropped (next report in a minute at the earliest)' && l['level'] === 40),
      JSON.stringify(reported),
    );
    assert.ok(Date.now() - started < 15_000);
  });

  test('a bad endpoint, header list or ratio is refused by name', () => {
    const refused = (env: Record<string, string>) => {
      try {
        testConfig(env);
        return [];
      } catch (err) {
        assert.ok(err instanceof ConfigError);
        return err.issues.map((i) => i.field);
      }
    };
    assert.deepEqual(refused({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }), ['OTEL_EXPORTER_OTLP_ENDPOINT']);
    assert.deepEqual(refused({ OTEL_EXPORTER_OTLP_HEADERS: 'no-equals-sign' }), ['OTEL_EXPORTER_OTLP_HEADERS']);
    assert.deepEqual(refused({ OTEL_TRACES_SAMPLE_RATIO: '1.5' }), ['OTEL_TRACES_SAMPLE_RATIO']);
    assert.deepEqual(parseOtlpHeaders('a=1,b=x%3Dy, c = %zz'), { a: '1', b: 'x=y', c: '%zz' });
  });
});

describe('the worker process bundles what its tracing needs (workers/main.ts)', () => {
  test('the bundling child adds the workflow interceptors with --tracing only', async () => {
    const traced = await bundleWorkflowsInChild({ tracing: true });
    assert.ok('code' in traced && traced.code.includes('OpenTelemetryInboundInterceptor'));
  });
});
