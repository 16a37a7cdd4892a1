// Traces end to end (docs/observability.md): one task through the real API, Temporal, the
// worker, the simulator and S3, with tracing installed in this process on an in-memory
// exporter. One trace holds the request, the workflow start and run, the activities, the
// provider call and the S3 operations, each under its parent; nothing secret is in any span;
// no provider request carries a traceparent; problem bodies and log lines carry the trace id.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { MockActivityEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { activityInterceptors } from '../../workers/generation-worker';
import { installTracing, type Tracing } from '../../observability/tracing';
import { tracer } from '../../observability/trace-context';
import { eventually, http, tapLogs, testLogger, workflowBundle } from '../support/stack';
import { startE2E, type E2E } from '../support/e2e';

const memory = new InMemorySpanExporter();
let tracing: Tracing;
let e: E2E;
/** Every request this process sent with fetch (the adapters and the output download use it). */
const sent: { url: string; headers: Headers; body: string }[] = [];
const realFetch = globalThis.fetch;

before(async () => {
  globalThis.fetch = async (input, init) => {
    const url = input instanceof Request ? input.url : String(input);
    sent.push({
      url,
      headers: new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined)),
      body: typeof init?.body === 'string' ? init.body : '',
    });
    return realFetch(input, init);
  };
  tracing = await installTracing({ serviceName: 'vidorch-test', exporter: memory });
  e = await startE2E('tracing', {}, { tracing });
});
after(async () => {
  await e?.close();
  await tracing?.shutdown();
  globalThis.fetch = realFetch;
});

const spans = (): ReadableSpan[] => memory.getFinishedSpans();
const byId = (all: ReadableSpan[]) => new Map(all.map((s) => [s.spanContext().spanId, s]));
/** The names of a span's ancestors, nearest first. */
function ancestors(span: ReadableSpan, all: ReadableSpan[]): string[] {
  const index = byId(all);
  const out: string[] = [];
  for (let p = span.parentSpanId ? index.get(span.parentSpanId) : undefined; p; p = p.parentSpanId ? index.get(p.parentSpanId) : undefined) out.push(p.name);
  return out;
}
const serverSpans = (route: string, method: string) =>
  spans().filter((s) => s.kind === SpanKind.SERVER && s.attributes['http.route'] === route && s.attributes['http.request.method'] === method);

describe('one task is one trace, from the API request to the provider call and S3', () => {
  let taskId: string;
  let trace: ReadableSpan[];
  let downloadUrl: string;

  before(async () => {
    taskId = await e.createTask('trace-1');
    const task = await e.waitForStatus(taskId, 'SUCCEEDED');
    downloadUrl = task.output.download_url as string;
    // The workflow's own spans leave the sandbox as its activations complete.
    const [create] = serverSpans('/v1/tasks', 'POST');
    assert.ok(create, 'a server span for POST /v1/tasks');
    const traceId = create.spanContext().traceId;
    trace = await eventually(async () => {
      const t = spans().filter((s) => s.spanContext().traceId === traceId);
      return t.some((s) => s.name === 'RunWorkflow:generationWorkflow') ? t : undefined;
    }, 20_000);
  });

  test('the request span names the route, status and tenant, and is the root of the trace', () => {
    const create = trace.find((s) => s.kind === SpanKind.SERVER)!;
    assert.equal(create.name, 'POST /v1/tasks');
    assert.equal(create.parentSpanId, undefined);
    assert.equal(create.attributes['http.response.status_code'], 202);
    assert.equal(create.attributes['vidorch.tenant_id'], e.tenant.tenantId);
    assert.equal(create.resource.attributes['service.name'], 'vidorch-test');
  });

  test('workflow start → run → activities → provider call and S3 operations, each under its parent', () => {
    const one = (name: string) => {
      const found = trace.filter((s) => s.name === name);
      assert.ok(found.length > 0, `${name} in the trace (have: ${[...new Set(trace.map((s) => s.name))].join(', ')})`);
      return found[0]!;
    };
    const start = one('StartWorkflow:generationWorkflow');
    assert.deepEqual(ancestors(start, trace), ['POST /v1/tasks']);
    const run = one('RunWorkflow:generationWorkflow');
    assert.deepEqual(ancestors(run, trace), ['StartWorkflow:generationWorkflow', 'POST /v1/tasks']);
    assert.equal(run.attributes['workflowId'], e.api.facade.workflowIdFor(taskId));
    // dispatchAndPrepare runs as a local activity (docs/decisions/0034-local-fact-steps.md): traced the same way.
    for (const activity of ['dispatchAndPrepare', 'submitAttempt', 'rescueOutput']) {
      const exec = one(`RunActivity:${activity}`);
      assert.deepEqual(ancestors(exec, trace).slice(0, 2), [`StartActivity:${activity}`, 'RunWorkflow:generationWorkflow'], activity);
    }
    const submitCall = trace.find(
      (s) => s.kind === SpanKind.CLIENT && s.attributes['vidorch.provider'] === 'replicate' && s.attributes['http.request.method'] === 'POST',
    );
    assert.ok(submitCall, 'the provider submit span');
    assert.equal(submitCall.attributes['url.template'], '/v1/models/{owner}/{name}/predictions');
    assert.equal(submitCall.attributes['http.response.status_code'], 201);
    assert.equal(ancestors(submitCall, trace)[0], 'RunActivity:submitAttempt');
    const s3 = trace.filter((s) => s.attributes['rpc.service'] === 'S3');
    assert.ok(
      s3.some((s) => s.name === 'S3.PutObject'),
      `an upload span among ${s3.map((s) => s.name).join(', ')}`,
    );
    for (const op of s3) {
      // The rescue looks for a published object in both buckets (docs/decisions/0029).
      assert.ok(
        [e.config.S3_BUCKET_OUTPUTS, e.config.S3_FALLBACK_BUCKET].includes(String(op.attributes['aws.s3.bucket'])),
        `${op.name} on ${String(op.attributes['aws.s3.bucket'])}`,
      );
      assert.equal(op.kind, SpanKind.CLIENT);
      assert.match(
        ancestors(op, trace).find((n) => n.startsWith('RunActivity:'))!,
        /^RunActivity:(rescueOutput|processMedia)$/,
        op.name,
      );
    }
    // A HEAD that finds nothing (before the first upload) is an answer, not a failure.
    const heads = s3.filter((s) => s.name === 'S3.HeadObject');
    assert.ok(heads.some((h) => h.attributes['http.response.status_code'] === 404));
    for (const h of heads) assert.notEqual(h.status.code, SpanStatusCode.ERROR);
    // The output download: one span for the transfer, the upload under it.
    const download = one('GET output');
    assert.equal(download.attributes['http.response.status_code'], 200);
    assert.equal(ancestors(download, trace)[0], 'RunActivity:rescueOutput');
    // The test's output fits in one part: one PUT, no multipart upload (activities/output-download.ts).
    assert.ok(
      s3.some((s) => s.name === 'S3.PutObject' && ancestors(s, trace)[0] === 'GET output'),
      'S3.PutObject under the transfer',
    );
    assert.ok(!s3.some((s) => s.name === 'S3.CreateMultipartUpload'), 'no multipart upload for a one-part output');
  });

  test("a callback is a trace of its own: its request span, the wake signal and the workflow's handling of it", async () => {
    const callback = await eventually(async () => {
      for (const cb of serverSpans('/v1/callbacks/:provider/:token', 'POST')) {
        const t = spans().filter((s) => s.spanContext().traceId === cb.spanContext().traceId);
        if (t.some((s) => s.name === 'HandleSignal:wake')) return { cb, t };
      }
      return undefined;
    }, 20_000);
    assert.equal(callback.cb.name, 'POST /v1/callbacks/:provider/:token');
    assert.equal(callback.cb.parentSpanId, undefined, 'not a child of anything the provider sent');
    const handled = callback.t.find((s) => s.name === 'HandleSignal:wake')!;
    assert.deepEqual(ancestors(handled, callback.t), ['SignalWorkflow:wake', 'POST /v1/callbacks/:provider/:token']);
  });

  test('no span holds the API key, a presigned URL, a callback token, a webhook secret or a provider credential', () => {
    const replicateSubmit = sent.find((r) => r.url.includes('/replicate/') && r.body.includes('"webhook"'));
    assert.ok(replicateSubmit, 'the submit request was seen');
    const webhookUrl = (JSON.parse(replicateSubmit.body) as { webhook: string }).webhook;
    const callbackToken = webhookUrl.split('/').at(-1)!;
    assert.ok(callbackToken.length >= 16);
    const forbidden = {
      'API key': e.tenant.apiKey,
      'presigned signature': 'X-Amz-Signature',
      'presigned URL query': new URL(downloadUrl).search.slice(1, 40),
      'callback token': callbackToken,
      'webhook secret': e.config.PROVIDER_REPLICATE_WEBHOOK_SECRET,
      'Replicate token': e.config.PROVIDER_REPLICATE_API_TOKEN,
      'S3 secret key': e.config.S3_SECRET_ACCESS_KEY,
    };
    const all = spans();
    assert.ok(all.length > 20);
    for (const s of all) {
      const text = JSON.stringify({
        name: s.name,
        attributes: s.attributes,
        events: s.events,
        status: s.status,
        links: s.links,
        resource: s.resource.attributes,
      });
      for (const [what, value] of Object.entries(forbidden)) assert.ok(!text.includes(value), `${what} in span ${s.name}`);
    }
  });

  test('no request to a provider (API calls, the output download) carries a traceparent or tracestate', () => {
    const toProvider = sent.filter((r) => r.url.startsWith(e.sim.baseUrl));
    assert.ok(toProvider.length >= 2, `provider requests seen: ${toProvider.length}`);
    for (const r of toProvider) {
      assert.equal(r.headers.get('traceparent'), null, new URL(r.url).pathname);
      assert.equal(r.headers.get('tracestate'), null, new URL(r.url).pathname);
    }
  });

  test('the run recorded with tracing on replays with the bundle without the interceptors and with it', async () => {
    const history = await e.client.workflow.getHandle(e.api.facade.workflowIdFor(taskId)).fetchHistory();
    await Worker.runReplayHistory({ workflowBundle: await workflowBundle({ tracing: false }), replayName: 'traced-untraced' }, history, 'traced:off');
    await Worker.runReplayHistory(
      { workflowBundle: await workflowBundle({ tracing: true }), replayName: 'traced-traced', sinks: tracing.worker!.sinks },
      history,
      'traced:on',
    );
  });
});

describe('problem+json bodies and log lines carry the trace id', () => {
  test('a 400 for a body that is not JSON carries the trace id of its request span', async () => {
    const res = await http(e.api.baseUrl, 'POST', '/v1/tasks', { apiKey: e.tenant.apiKey, rawBody: '{"model":', headers: { 'idempotency-key': 'bad-json' } });
    assert.equal(res.status, 400);
    assert.match(res.body.trace_id, /^[0-9a-f]{32}$/);
    const span = await eventually(async () => spans().find((s) => s.kind === SpanKind.SERVER && s.spanContext().traceId === res.body.trace_id));
    assert.equal(span.attributes['http.response.status_code'], 400);
    assert.equal(span.attributes['http.request.method'], 'POST');
    // The other members are as they were.
    assert.deepEqual(Object.keys(res.body).sort(), ['detail', 'errors', 'instance', 'status', 'title', 'trace_id', 'type']);
  });

  test("a 404 for another tenant's (or no) task carries its request's trace id; a 500-class span is an error, a 404 is not", async () => {
    const res = await http(e.api.baseUrl, 'GET', '/v1/tasks/00000000-0000-4000-8000-000000000000', { apiKey: e.tenant.apiKey });
    assert.equal(res.status, 404);
    const span = await eventually(async () => spans().find((s) => s.kind === SpanKind.SERVER && s.spanContext().traceId === res.body.trace_id));
    assert.equal(span.name, 'GET /v1/tasks/:id');
    assert.notEqual(span.status.code, SpanStatusCode.ERROR);
  });

  test('a 401 (no key) carries a trace id and its span names no tenant', async () => {
    const res = await http(e.api.baseUrl, 'GET', '/v1/tasks');
    assert.equal(res.status, 401);
    const span = await eventually(async () => spans().find((s) => s.kind === SpanKind.SERVER && s.spanContext().traceId === res.body.trace_id));
    assert.equal(span.attributes['vidorch.tenant_id'], undefined);
  });

  test('a log line written inside a span carries its trace_id and span_id; one outside carries none', () => {
    const lines: string[] = [];
    const stop = tapLogs((l) => lines.push(l));
    try {
      tracer().startActiveSpan('log-test', (span) => {
        testLogger.warn({ probe: 'inside' }, 'tracing log probe');
        span.end();
        const line = JSON.parse(lines.find((l) => l.includes('"inside"'))!) as Record<string, unknown>;
        assert.equal(line['trace_id'], span.spanContext().traceId);
        assert.equal(line['span_id'], span.spanContext().spanId);
      });
      testLogger.warn({ probe: 'outside' }, 'tracing log probe');
      const outside = JSON.parse(lines.find((l) => l.includes('"outside"'))!) as Record<string, unknown>;
      assert.equal(outside['trace_id'], undefined);
    } finally {
      stop();
    }
  });
});

describe('a failed activity is recorded in its span only as redacted', () => {
  test("the activity span's exception has no presigned query, no bearer token (the worker's interceptor order)", async () => {
    const env = new MockActivityEnvironment({ activityType: 'rescueOutput' }, { interceptors: activityInterceptors(tracing.worker) });
    const leaky =
      'GET https://bucket.s3.example/out.mp4?X-Amz-Signature=abcdef0123456789&X-Amz-Credential=AKIAABCDEFGHIJKLMNOP failed; Authorization: Bearer r8_secretsecretsecret';
    await assert.rejects(
      env.run(async () => {
        throw new Error(leaky);
      }),
    );
    const span = spans().findLast((s) => s.name === 'RunActivity:rescueOutput' && s.attributes['temporalActivityId'] === env.context.info.activityId)!;
    assert.ok(span, 'the activity span');
    assert.equal(span.status.code, SpanStatusCode.ERROR);
    const recorded = JSON.stringify({ status: span.status, events: span.events });
    assert.match(recorded, /bucket\.s3\.example\/out\.mp4/, 'the redacted message is there');
    for (const secret of ['X-Amz-Signature=abcdef', 'abcdef0123456789', 'AKIAABCDEFGHIJKLMNOP', 'r8_secretsecretsecret'])
      assert.ok(!recorded.includes(secret), secret);
  });
});
