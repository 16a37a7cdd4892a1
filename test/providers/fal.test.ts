// The fal adapter against the simulator's fal protocol, over real HTTP, and fal's ED25519
// webhook signatures (JWKS cache, rotation, stale timestamps, tampering).
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import {
  createFalAdapter,
  FAL_CAPABILITIES,
  FAL_RESULT_GONE,
  FAL_START_TIMEOUT_HEADER,
  falAppId,
  falInput,
  falStartTimeoutSeconds,
  type FalAdapterOptions,
} from '../../providers/fal';
import { ProviderHttpError } from '../../providers/provider-http';
import { classifyReadFailure } from '../../activities/provider-reads';
import { withinRetention } from '../../providers/result-retention';
import { SIM_FAL_DEFAULTS } from '../../providers/simulator/fal';
import { CallbackVerificationError, NO_LOOKUP, verifyProviderCallback, type ProviderAdapter, type ProviderJob } from '../../providers/types';
import { closeServer, deadPort, listenOn, lookupQuery, newAttempt, startHarness, TERMINAL, waitFor, type Delivery, type Harness } from './harness';

const MODEL = 'fal-ai/kling-video/v2.1/master/text-to-video';
const REF = { model: MODEL };
// Kling 2.1 Master renders 1080p (Kling's capability map), and takes no resolution input.
const FAL_INPUT = { prompt: 'x', duration: 5, resolution: '1080p' };
let h: Harness;
let adapter: ProviderAdapter;

function makeAdapter(over: Partial<FalAdapterOptions> = {}): ProviderAdapter {
  return createFalAdapter({
    baseUrl: `${h.sim.baseUrl()}/fal`,
    apiKey: SIM_FAL_DEFAULTS.apiKey,
    jwksUrl: `${h.sim.baseUrl()}/fal/.well-known/jwks.json`,
    timeoutMs: 2_000,
    jwksMinRefetchIntervalMs: 0,
    expectedUserId: SIM_FAL_DEFAULTS.userId,
    ...over,
  });
}

async function submitOk(a: ProviderAdapter = adapter, prompt = 'a fox'): Promise<{ job: ProviderJob; attemptId: string }> {
  const att = newAttempt(h.receiverUrl, 'fal');
  const out = await a.submit({ ...att, model: MODEL, input: { prompt, duration: 5 } });
  assert.equal(out.kind, 'accepted', JSON.stringify(out));
  if (out.kind !== 'accepted') throw new Error('unreachable');
  return { job: out.job, attemptId: att.attemptId };
}

const untilTerminal = (jobId: string, a: ProviderAdapter = adapter): Promise<ProviderJob> =>
  waitFor(`fal ${jobId} terminal`, async () => {
    const j = await a.getJob(jobId, undefined, REF);
    return TERMINAL.includes(j.state) ? j : undefined;
  });

async function webhookOf(attemptId: string): Promise<Delivery> {
  await h.sim.webhooksIdle();
  return waitFor('webhook', () => h.deliveriesFor(attemptId).at(-1));
}

const reasonOf = async (p: Promise<unknown>): Promise<string> => {
  try {
    await p;
    return 'verified';
  } catch (e) {
    if (e instanceof CallbackVerificationError) return e.reason;
    throw e;
  }
};

before(async () => {
  h = await startHarness({ fal: { concurrency: 2 } });
  adapter = makeAdapter();
});
after(() => h.close());
beforeEach(() => {
  h.sim.reset();
  h.sim.clearFaults();
  h.deliveries.length = 0;
});

test('happy path: accepted IN_QUEUE with our token; status by app id reaches COMPLETED with a playable video', async () => {
  const { job, attemptId } = await submitOk();
  assert.deepEqual([job.state, job.rawStatus, job.correlationToken], ['queued', 'IN_QUEUE', attemptId]);
  const done = await untilTerminal(job.jobId);
  assert.equal(done.state, 'succeeded');
  const res = await fetch(done.outputUrl!);
  assert.equal(res.status, 200);
  assert.equal(
    Buffer.from(await res.arrayBuffer())
      .subarray(4, 8)
      .toString('latin1'),
    'ftyp',
  );
  assert.equal(h.sim.tokenCount(attemptId), 1);
  assert.equal(falAppId(MODEL), 'fal-ai/kling-video');
});

test('inputs follow the documented Kling text-to-video input: duration "5" | "10", no image; the rest is refused before any call', async () => {
  assert.deepEqual(falInput(MODEL, { prompt: 'p', duration: 10, resolution: '1080p' }), { input: { prompt: 'p', duration: '10', aspect_ratio: '16:9' } });
  for (const [input, field] of [
    [{ prompt: 'p', duration: 2 }, 'duration_seconds'],
    [{ prompt: 'p', duration: 5, first_frame_image: 'https://x/y.png' }, 'input_image_url'],
    [{ prompt: 'p', duration: 5, resolution: '720p' }, 'resolution'],
  ] as const) {
    const r = falInput(MODEL, input);
    assert.equal('refused' in r ? r.refused.field : null, field);
    const out = await adapter.submit({ ...newAttempt(h.receiverUrl, 'fal'), model: MODEL, input });
    assert.deepEqual(out.kind === 'rejected' ? [out.retryable, out.status] : out, [false, null]);
  }
  assert.equal(h.sim.stats().jobs_by_provider.fal, 0);
  // The simulator answers an undocumented input as fal does: 422 with typed errors in `detail`.
  const res = await fetch(`${h.sim.baseUrl()}/fal/${MODEL}`, {
    method: 'POST',
    headers: { authorization: `Key ${SIM_FAL_DEFAULTS.apiKey}`, 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'p', duration: 2 }),
  });
  assert.equal(res.status, 422);
  const detail = ((await res.json()) as { detail: { loc: string[] }[] }).detail;
  assert.deepEqual(
    detail.map((d) => d.loc.at(-1)),
    ['duration'],
  );
  assert.equal(h.sim.stats().jobs_by_provider.fal, 0);
});

test('fal queues excess work instead of answering 429: over the concurrency, requests are accepted and wait IN_QUEUE', async () => {
  const jobs = [];
  for (let i = 0; i < 4; i++) jobs.push((await submitOk(adapter, 'slow [sim:gen=1500]')).job);
  await new Promise((r) => setTimeout(r, 300));
  const states = await Promise.all(jobs.map((j) => adapter.getJob(j.jobId, undefined, REF)));
  assert.deepEqual(states.map((s) => s.rawStatus).sort(), ['IN_PROGRESS', 'IN_PROGRESS', 'IN_QUEUE', 'IN_QUEUE']);
  assert.equal(h.sim.stats().jobs_by_provider.fal, 4);
});

test('the completion webhook verifies against the JWKS and carries the job; a redelivery keeps its event id (replay dedupe)', async () => {
  h.sim.setFaults({ callback_duplicates: 1 });
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  await h.sim.webhooksIdle();
  const got = h.deliveriesFor(attemptId);
  assert.equal(got.length, 2);
  const verified = await Promise.all(got.map((d) => verifyProviderCallback(adapter, d.body, d.headers)));
  for (const v of verified) {
    assert.equal(v.job.jobId, job.jobId);
    assert.equal(v.job.state, 'succeeded');
    assert.ok(v.job.outputUrl);
    assert.equal(v.needsRefetch, undefined);
  }
  assert.equal(verified[0]!.providerEventId, verified[1]!.providerEventId);
  assert.notEqual(got[0]!.headers['x-fal-webhook-signature'], undefined);
});

test('a webhook signed with a key not in the JWKS is bad-signature, even after one refetch', async () => {
  h.sim.setFaults({ callback_wrong_key: true });
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  const d = await webhookOf(attemptId);
  assert.equal(await reasonOf(adapter.verifyCallbackAsync!(d.body, d.headers)), 'bad-signature');
});

test('a tampered body or a swapped request id is bad-signature; missing headers are missing-headers', async () => {
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  const d = await webhookOf(attemptId);
  assert.equal(await reasonOf(adapter.verifyCallbackAsync!(d.body, d.headers)), 'verified');
  const tampered = Buffer.from(d.body.toString('utf8').replace('"OK"', '"ERROR"'));
  assert.notDeepEqual(tampered, d.body);
  assert.equal(await reasonOf(adapter.verifyCallbackAsync!(tampered, d.headers)), 'bad-signature');
  const swapped = { ...d.headers, 'x-fal-webhook-request-id': '00000000-0000-0000-0000-000000000000' };
  assert.equal(await reasonOf(adapter.verifyCallbackAsync!(d.body, swapped)), 'bad-signature');
  const { 'x-fal-webhook-signature': _s, ...noSig } = d.headers;
  assert.equal(await reasonOf(adapter.verifyCallbackAsync!(d.body, noSig)), 'missing-headers');
});

test('a webhook older than 5 minutes is stale-timestamp; within the window it verifies', async () => {
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  const d = await webhookOf(attemptId);
  const later = makeAdapter({ now: () => Date.now() + 6 * 60_000 });
  assert.equal(await reasonOf(later.verifyCallbackAsync!(d.body, d.headers)), 'stale-timestamp');
  const earlier = makeAdapter({ now: () => Date.now() - 6 * 60_000 });
  assert.equal(await reasonOf(earlier.verifyCallbackAsync!(d.body, d.headers)), 'stale-timestamp');
  const skewed = makeAdapter({ now: () => Date.now() + 4 * 60_000 });
  assert.equal(await reasonOf(skewed.verifyCallbackAsync!(d.body, d.headers)), 'verified');
});

test('key rotation: a webhook signed by the new key verifies after one JWKS refetch; the retired key no longer does', async () => {
  const a = makeAdapter({ jwksTtlMs: 3_600_000 });
  const first = await submitOk(a);
  await untilTerminal(first.job.jobId, a);
  const oldHook = await webhookOf(first.attemptId);
  assert.equal(await reasonOf(a.verifyCallbackAsync!(oldHook.body, oldHook.headers)), 'verified');

  h.sim.rotateFalKey();
  const second = await submitOk(a);
  await untilTerminal(second.job.jobId, a);
  const newHook = await webhookOf(second.attemptId);
  // The cached (old) key fails, the adapter refetches once and the new key verifies.
  assert.equal(await reasonOf(a.verifyCallbackAsync!(newHook.body, newHook.headers)), 'verified');
  assert.equal(await reasonOf(a.verifyCallbackAsync!(oldHook.body, oldHook.headers)), 'bad-signature');
});

test('the sync verifyCallback: cold cache → keys-unavailable (answer 503), then verifies once the keys are loaded', async () => {
  const a = makeAdapter();
  const { job, attemptId } = await submitOk(a);
  await untilTerminal(job.jobId, a);
  const d = await webhookOf(attemptId);
  assert.throws(
    () => a.verifyCallback(d.body, d.headers),
    (e: unknown) => e instanceof CallbackVerificationError && e.reason === 'keys-unavailable',
  );
  await waitFor('keys loaded in the background', () => {
    try {
      return a.verifyCallback(d.body, d.headers);
    } catch {
      return undefined;
    }
  });
});

test('JWKS unreachable with no cached key → keys-unavailable, never a pass', async () => {
  const a = makeAdapter({ jwksUrl: `http://127.0.0.1:${await deadPort()}/jwks.json` });
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  const d = await webhookOf(attemptId);
  assert.equal(await reasonOf(a.verifyCallbackAsync!(d.body, d.headers)), 'keys-unavailable');
});

test('a webhook for another fal user is refused', async () => {
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  const d = await webhookOf(attemptId);
  const mine = makeAdapter({ expectedUserId: SIM_FAL_DEFAULTS.userId });
  const other = makeAdapter({ expectedUserId: 'someone-else' });
  assert.equal(await reasonOf(mine.verifyCallbackAsync!(d.body, d.headers)), 'verified');
  assert.equal(await reasonOf(other.verifyCallbackAsync!(d.body, d.headers)), 'bad-signature');
});

test('a failure shows only when the result is fetched: the status says COMPLETED, getJob reads the error from the result (and the ERROR webhook agrees)', async () => {
  const { job, attemptId } = await submitOk(adapter, 'please [sim:fail]');
  const done = await untilTerminal(job.jobId);
  assert.equal(done.state, 'failed');
  assert.match(done.error ?? '', /simulated failure/);
  const status = await fetch(`${h.sim.baseUrl()}/fal/fal-ai/kling-video/requests/${job.jobId}/status`, {
    headers: { authorization: `Key ${SIM_FAL_DEFAULTS.apiKey}` },
  });
  assert.equal(status.status, 200);
  const body = (await status.json()) as Record<string, unknown>;
  assert.equal(body['status'], 'COMPLETED');
  assert.deepEqual(
    Object.keys(body).filter((k) => !['status', 'request_id', 'response_url', 'status_url', 'cancel_url', 'logs', 'metrics'].includes(k)),
    [],
  );
  const d = await webhookOf(attemptId);
  const v = await adapter.verifyCallbackAsync!(d.body, d.headers);
  assert.equal(v.job.state, 'failed');
});

test('a result answered 404 is a gone read, never the outcome: no FAILED on first sight, counted toward the read bound', async () => {
  const { job } = await submitOk(adapter, 'short-lived [sim:result_ttl=50]');
  await waitFor('completed', async () => {
    const r = await fetch(`${h.sim.baseUrl()}/fal/fal-ai/kling-video/requests/${job.jobId}/status`, {
      headers: { authorization: `Key ${SIM_FAL_DEFAULTS.apiKey}` },
    });
    return ((await r.json()) as { status: string }).status === 'COMPLETED' ? true : undefined;
  });
  await new Promise((r) => setTimeout(r, 100));
  // Every read answers the same, and none of them is an outcome: the poll counts each one
  // (activities/provider-reads.ts) and parks the task in MANUAL_REVIEW at the limit.
  for (let read = 0; read < 2; read++) {
    const err = await adapter.getJob(job.jobId, undefined, REF).then(
      (j) => assert.fail(`a 404 result was read as ${j.state}`),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ProviderHttpError);
    assert.deepEqual([err.status, err.transient, err.name], [404, false, 'ProviderNotFound']);
    assert.ok(err.message.includes(FAL_RESULT_GONE), err.message);
    assert.equal(classifyReadFailure(err).kind, 'gone');
  }
});

test('a result answered 5xx is the outcome only when fal names the error type; otherwise the read is retried', async () => {
  const answers: { status: number; headers: Record<string, string> }[] = [];
  const fake = createServer((req, res) => {
    // The status read asks for the logs (?logs=1).
    if (req.url?.split('?')[0]?.endsWith('/status'))
      return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ status: 'COMPLETED', logs: null }));
    const a = answers.shift()!;
    res
      .writeHead(a.status, { 'content-type': 'application/json', ...a.headers })
      .end(JSON.stringify({ detail: 'Request timed out', error_type: a.headers['x-fal-error-type'] }));
  });
  const port = await listenOn(fake);
  try {
    const a = makeAdapter({ baseUrl: `http://127.0.0.1:${port}` });
    answers.push({ status: 503, headers: {} });
    await assert.rejects(a.getJob('r1', undefined, REF), (e: Error) => e.name === 'Error' && /HTTP 503/.test(e.message));
    answers.push({ status: 504, headers: { 'x-fal-error-type': 'request_timeout' } });
    const j = await a.getJob('r1', undefined, REF);
    assert.deepEqual([j.state, j.error], ['failed', 'request_timeout: Request timed out']);
  } finally {
    await closeServer(fake);
  }
});

test('the poll schedule reads a fal result well inside its retention: the longest interval is a quarter of 6 minutes', () => {
  assert.equal(FAL_CAPABILITIES.resultRetentionMs, 6 * 60_000);
  assert.equal(withinRetention(3 * 60_000, FAL_CAPABILITIES), 90_000);
  assert.equal(withinRetention(20 * 60_000, FAL_CAPABILITIES), 90_000);
  assert.equal(withinRetention(5_000, FAL_CAPABILITIES), 5_000);
});

test('cancel in queue ends canceled (status and webhook); cancel after completion is a no-op', async () => {
  const { job, attemptId } = await submitOk(adapter, 'slow [sim:gen=5000]');
  await adapter.cancel(job.jobId, undefined, REF);
  assert.equal((await adapter.getJob(job.jobId, undefined, REF)).state, 'canceled');
  const d = await webhookOf(attemptId);
  assert.equal((await adapter.verifyCallbackAsync!(d.body, d.headers)).job.state, 'canceled');
  await adapter.cancel(job.jobId, undefined, REF); // ALREADY_COMPLETED
  await adapter.cancel('00000000-0000-0000-0000-000000000000', undefined, REF); // NOT_FOUND: nothing to cancel
});

test('getJob: 404 → ProviderNotFound; status 5xx → transient; without the model → ProviderRequestRejected', async () => {
  await assert.rejects(adapter.getJob('00000000-0000-0000-0000-000000000000', undefined, REF), (e: Error) => e.name === 'ProviderNotFound');
  const { job } = await submitOk();
  await assert.rejects(adapter.getJob(job.jobId), (e: Error) => e.name === 'ProviderRequestRejected');
  h.sim.setFaults({ status: 'error_5xx' });
  await assert.rejects(adapter.getJob(job.jobId, undefined, REF), (e: Error) => e.name === 'Error' && /HTTP 500/.test(e.message));
});

test('submit faults map to the three outcomes, and the job count per token proves what happened', async () => {
  const cases: { fault: object; kind: string; jobs: number }[] = [
    { fault: { submit: 'accept_then_hang' }, kind: 'unknown', jobs: 1 },
    { fault: { submit: 'error_5xx_before_accept' }, kind: 'unknown', jobs: 0 },
    { fault: { submit: 'error_5xx_after_accept' }, kind: 'unknown', jobs: 1 },
    { fault: { submit: 'reset_after_accept' }, kind: 'unknown', jobs: 1 },
    { fault: { submit: 'rate_limit', retry_after_s: 3 }, kind: 'rejected', jobs: 0 },
    { fault: { submit: 'answer_after_ms', submit_delay_ms: 100 }, kind: 'accepted', jobs: 1 },
  ];
  const a = makeAdapter({ timeoutMs: 400 });
  for (const c of cases) {
    h.sim.setFaults(c.fault);
    const att = newAttempt(h.receiverUrl, 'fal');
    const out = await a.submit({ ...att, model: MODEL, input: FAL_INPUT });
    assert.equal(out.kind, c.kind, `${JSON.stringify(c.fault)} → ${JSON.stringify(out)}`);
    assert.equal(h.sim.tokenCount(att.attemptId), c.jobs, JSON.stringify(c.fault));
    if (out.kind === 'rejected') assert.deepEqual([out.retryable, out.status, out.retryAfterMs], [true, 429, 3_000]);
  }
});

test('connection refused → rejected retryable; 401 → rejected final, and the key never appears in a reason', async () => {
  const refused = await makeAdapter({ baseUrl: `http://127.0.0.1:${await deadPort()}/fal` }).submit({
    ...newAttempt(h.receiverUrl, 'fal'),
    model: MODEL,
    input: FAL_INPUT,
  });
  assert.deepEqual(refused.kind === 'rejected' ? [refused.retryable, refused.status] : refused, [true, null]);
  const wrongKey = 'wrong-fal-key:should-not-leak-123';
  const out = await makeAdapter({ apiKey: wrongKey }).submit({ ...newAttempt(h.receiverUrl, 'fal'), model: MODEL, input: FAL_INPUT });
  assert.deepEqual(out.kind === 'rejected' ? [out.retryable, out.status] : out, [false, 401]);
  assert.ok(!JSON.stringify(out).includes(wrongKey));
});

test('secrets never appear in errors even when a server echoes them back', async () => {
  const echo = createServer((req, res) => {
    res.writeHead(req.method === 'POST' ? 400 : 500, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ detail: `bad: ${req.headers.authorization}` }));
  });
  const port = await listenOn(echo);
  try {
    const a = makeAdapter({ baseUrl: `http://127.0.0.1:${port}` });
    const out = await a.submit({ ...newAttempt(h.receiverUrl, 'fal'), model: MODEL, input: FAL_INPUT });
    assert.ok(!JSON.stringify(out).includes(SIM_FAL_DEFAULTS.apiKey), JSON.stringify(out));
    await assert.rejects(a.getJob('x', undefined, REF), (e: Error) => !e.message.includes(SIM_FAL_DEFAULTS.apiKey));
  } finally {
    await closeServer(echo);
  }
});

test('capabilities: tier none (no listing), ED25519 callbacks, queues excess work; findByCorrelationToken never claims a find', async () => {
  assert.equal(FAL_CAPABILITIES.unknownOutcomeTier, 'none');
  assert.equal(FAL_CAPABILITIES.callbackSignature, 'ed25519-jwks');
  assert.equal(FAL_CAPABILITIES.queuesExcessWork, true);
  const { attemptId } = await submitOk();
  assert.equal(FAL_CAPABILITIES.absenceProof, 'none');
  assert.deepEqual(await adapter.findByCorrelationToken(lookupQuery(attemptId, { backMs: Date.now() })), NO_LOOKUP);
});

test('progress: fal status read with ?logs=1 gives the queue position while IN_QUEUE and the log lines while IN_PROGRESS', async () => {
  const answers = [
    { status: 'IN_QUEUE', queue_position: 3 },
    { status: 'IN_PROGRESS', logs: [{ message: 'loading model', level: 'INFO', source: 'user', timestamp: '2026-01-01T00:00:00Z' }, { message: 'step 1/10' }] },
  ];
  const urls: string[] = [];
  const fake = createServer((req, res) => {
    urls.push(req.url ?? '');
    res.writeHead(202, { 'content-type': 'application/json' }).end(JSON.stringify(answers.shift()));
  });
  const port = await listenOn(fake);
  try {
    const a = makeAdapter({ baseUrl: `http://127.0.0.1:${port}` });
    const queued = await a.getJob('r1', undefined, REF);
    assert.deepEqual(queued.progress, { fraction: null, queue_position: 3, logs: null });
    const running = await a.getJob('r1', undefined, REF);
    assert.deepEqual(running.progress, { fraction: null, queue_position: null, logs: 'loading model\nstep 1/10' });
    assert.ok(
      urls.every((u) => u.endsWith('/status?logs=1')),
      urls.join(', '),
    );
  } finally {
    await closeServer(fake);
  }
});

test('every submit carries X-Fal-Request-Timeout: the seconds left to the task deadline, else the maximum run time', async () => {
  const sent: (string | null)[] = [];
  const recording: typeof fetch = async (input, init) => {
    if (init?.method === 'POST') sent.push(new Headers(init.headers).get(FAL_START_TIMEOUT_HEADER));
    return fetch(input, init);
  };
  const a = makeAdapter({ fetch: recording, now: () => Date.parse('2026-12-01T10:00:00Z') });
  const att = newAttempt(h.receiverUrl, 'fal');
  assert.equal(
    (await a.submit({ ...att, model: MODEL, input: { prompt: 'x', duration: 5 }, deadlineAt: new Date('2026-12-01T10:30:00.900Z') })).kind,
    'accepted',
  );
  assert.equal((await a.submit({ ...newAttempt(h.receiverUrl, 'fal'), model: MODEL, input: { prompt: 'x', duration: 5 } })).kind, 'accepted');
  assert.deepEqual(sent, ['1800', String(6 * 3600)]);
  // Never below fal's minimum, even for a deadline already at hand.
  assert.equal(falStartTimeoutSeconds(new Date(1_000), 5_000, 60_000), 2);
});

test('a request no runner starts within its X-Fal-Request-Timeout ends failed, unbilled; a started one runs to its end', async () => {
  // The account's two runners are busy for 30 s: the third request waits IN_QUEUE.
  for (let i = 0; i < 2; i++) await submitOk(adapter, `busy ${i} [sim:gen=30000]`);
  const now = Date.now();
  const att = newAttempt(h.receiverUrl, 'fal');
  const out = await adapter.submit({ ...att, model: MODEL, input: { prompt: 'waits', duration: 5 }, deadlineAt: new Date(now + 2_500) });
  assert.equal(out.kind, 'accepted');
  if (out.kind !== 'accepted') return;
  assert.equal((await adapter.getJob(out.job.jobId, undefined, REF)).state, 'queued');
  const ended = await waitFor('start limit', async () => {
    const j = await adapter.getJob(out.job.jobId, undefined, REF);
    return j.state === 'queued' ? undefined : j;
  });
  assert.equal(ended.state, 'failed');
  assert.match(ended.error ?? '', /HTTP 504: .*X-Fal-Request-Timeout/);
  assert.ok(Date.now() - now >= 2_000, 'not before the limit');
  const d = await webhookOf(att.attemptId);
  assert.equal((await adapter.verifyCallbackAsync!(d.body, d.headers)).job.state, 'failed');
  // A request a runner started in time runs past its limit to its end.
  h.sim.reset();
  const started = await adapter.submit({
    ...newAttempt(h.receiverUrl, 'fal'),
    model: MODEL,
    input: { prompt: 'runs past its limit [sim:gen=3000]', duration: 5 },
    deadlineAt: new Date(Date.now() + 2_500),
  });
  assert.equal(started.kind, 'accepted');
  if (started.kind === 'accepted') assert.equal((await untilTerminal(started.job.jobId)).state, 'succeeded');
});

test("status, result and cancel are read where fal's answers name them: the app id with its namespace, the status answer's response_url", async () => {
  const seen: string[] = [];
  let responseUrl = '';
  const fake = createServer((req, res) => {
    seen.push(`${req.method} ${req.url?.split('?')[0]}`);
    if (req.url?.split('?')[0]?.endsWith('/status'))
      return void res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ status: 'COMPLETED', response_url: responseUrl, logs: null }));
    if (req.method === 'PUT') return void res.writeHead(202, { 'content-type': 'application/json' }).end(JSON.stringify({ status: 'CANCELLATION_REQUESTED' }));
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ video: { url: 'https://v3b.fal.media/files/out.mp4' } }));
  });
  const port = await listenOn(fake);
  const base = `http://127.0.0.1:${port}`;
  try {
    const a = makeAdapter({ baseUrl: base });
    // "workflows/<owner>/<app>": the namespace is part of the address (@fal-ai/client parseEndpointId).
    responseUrl = `${base}/workflows/acme/storyboard/requests/r1`;
    const ns = { model: 'workflows/acme/storyboard/render' };
    assert.equal((await a.getJob('r1', undefined, ns)).outputUrl, 'https://v3b.fal.media/files/out.mp4');
    await a.cancel('r1', undefined, ns);
    assert.deepEqual(seen, [
      'GET /workflows/acme/storyboard/requests/r1/status',
      'GET /workflows/acme/storyboard/requests/r1',
      'PUT /workflows/acme/storyboard/requests/r1/cancel',
    ]);
    // The result where the status answer names it, when it is this request's under our base URL…
    seen.length = 0;
    responseUrl = `${base}/fal-ai/kling-video-v2/requests/r2`;
    await a.getJob('r2', undefined, REF);
    assert.equal(seen[1], 'GET /fal-ai/kling-video-v2/requests/r2');
    // …never on another host (our key stays with our base URL), nor another request's.
    for (const elsewhere of ['https://queue.attacker.example/fal-ai/kling-video/requests/r3', `${base}/fal-ai/kling-video/requests/other`]) {
      seen.length = 0;
      responseUrl = elsewhere;
      await a.getJob('r3', undefined, REF);
      assert.deepEqual(seen, ['GET /fal-ai/kling-video/requests/r3/status', 'GET /fal-ai/kling-video/requests/r3']);
    }
  } finally {
    await closeServer(fake);
  }
  assert.equal(falAppId('fal-ai/kling-video/v2.1/master/text-to-video'), 'fal-ai/kling-video');
  assert.equal(falAppId('comfy/acme/flow'), 'comfy/acme/flow');
  assert.throws(() => falAppId('workflows/acme'), /namespace/);
});

test("the simulator's submit answer names the URLs our reads use (fal documents status_url, response_url and cancel_url)", async () => {
  const requested: string[] = [];
  const recording: typeof fetch = async (input, init) => {
    requested.push(`${init?.method ?? 'GET'} ${(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url).split('?')[0]}`);
    return fetch(input, init);
  };
  const a = makeAdapter({ fetch: recording });
  const att = newAttempt(h.receiverUrl, 'fal');
  const answer = (await (
    await fetch(`${h.sim.baseUrl()}/fal/${MODEL}?fal_webhook=${encodeURIComponent(att.webhookUrl)}`, {
      method: 'POST',
      headers: { authorization: `Key ${SIM_FAL_DEFAULTS.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'urls', duration: '5' }),
    })
  ).json()) as { request_id: string; status_url: string; response_url: string; cancel_url: string };
  await waitFor('done', async () => ((await a.getJob(answer.request_id, undefined, REF)).state === 'succeeded' ? true : undefined));
  await a.cancel(answer.request_id, undefined, REF);
  assert.ok(requested.includes(`GET ${answer.status_url}`), requested.join('\n'));
  assert.ok(requested.includes(`GET ${answer.response_url}`), requested.join('\n'));
  assert.ok(requested.includes(`PUT ${answer.cancel_url}`), requested.join('\n'));
});
