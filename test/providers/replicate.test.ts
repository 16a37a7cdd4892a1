// The Replicate adapter against the in-process Replicate simulator, over real HTTP.
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Webhook } from 'standardwebhooks';
import { cancelAfterFor, createReplicateAdapter, nextPageUrl, REPLICATE_RUN_LIMIT_MS, throttleResetMs } from '../../providers/replicate';
import { ReplicateRateLimiter, replicateLimitsFromSetting } from '../../providers/simulator/rate-limits';
import { createSimulator, type RunningSimulator, type Simulator } from '../../providers/simulator/server';
import { CallbackVerificationError, type LookupQuery, type ProviderAdapter, type ProviderJob } from '../../providers/types';

const TOKEN = 'r8_test_token_abcdefghijklmnop';
const SECRET = `whsec_${Buffer.from('test-webhook-secret-0123456789ab').toString('base64')}`;

interface Delivery {
  headers: IncomingHttpHeaders;
  body: Buffer;
  token: string;
}

let dataDir: string;
let sim: Simulator;
let running: RunningSimulator;
let adapter: ProviderAdapter;
let receiver: Server;
let receiverUrl: string;
let deliveries: Delivery[] = [];
let receiverFailNext = 0;
let seq = 0;

const listenOn = (s: Server): Promise<number> => new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve((s.address() as AddressInfo).port)));
const closeServer = (s: Server): Promise<void> =>
  new Promise((resolve) => {
    s.close(() => resolve());
    s.closeAllConnections();
  });

function makeAdapter(over: { baseUrl?: string; timeoutMs?: number; apiToken?: string } = {}): ProviderAdapter {
  return createReplicateAdapter({
    baseUrl: over.baseUrl ?? `${sim.baseUrl()}/replicate`,
    apiToken: over.apiToken ?? TOKEN,
    webhookSecret: SECRET,
    timeoutMs: over.timeoutMs ?? 2_000,
  });
}

function newAttempt(): { attemptId: string; webhookUrl: string } {
  const attemptId = `att_${process.pid}_${++seq}_${Date.now().toString(36)}`;
  return { attemptId, webhookUrl: `${receiverUrl}/v1/callbacks/replicate/${attemptId}` };
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function submitOk(input: Record<string, unknown> = {}): Promise<{ job: ProviderJob; attemptId: string }> {
  const a = newAttempt();
  const out = await adapter.submit({ ...a, model: 'acme/video', input: { prompt: 'a cat', ...input } });
  assert.equal(out.kind, 'accepted', JSON.stringify(out));
  if (out.kind !== 'accepted') throw new Error('unreachable');
  return { job: out.job, attemptId: a.attemptId };
}

const untilTerminal = (jobId: string): Promise<ProviderJob> =>
  waitFor(`job ${jobId} terminal`, async () => {
    const j = await adapter.getJob(jobId);
    return ['succeeded', 'failed', 'canceled', 'aborted'].includes(j.state) ? j : undefined;
  });

const deliveriesFor = (token: string): Delivery[] => deliveries.filter((d) => d.token === token);
const headersOf = (d: Delivery): Record<string, string> => ({
  'webhook-id': String(d.headers['webhook-id']),
  'webhook-timestamp': String(d.headers['webhook-timestamp']),
  'webhook-signature': String(d.headers['webhook-signature']),
});

before(async () => {
  dataDir = await mkdtemp(path.join(os.tmpdir(), 'replicate-sim-test-'));
  receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (receiverFailNext > 0) {
        receiverFailNext--;
        res.writeHead(500).end();
        return;
      }
      const token = (req.url ?? '').split('/').filter(Boolean).pop() ?? '';
      deliveries.push({ headers: req.headers, body: Buffer.concat(chunks), token });
      res.writeHead(204).end();
    });
  });
  receiverUrl = `http://127.0.0.1:${await listenOn(receiver)}`;
  sim = createSimulator({
    apiToken: TOKEN,
    webhookSecret: SECRET,
    generationMs: 300,
    outputTtlMs: 60_000,
    dataDir,
    listPageSize: 5,
    webhookRetry: { attempts: 5, baseDelayMs: 20 },
  });
  running = await sim.listen(0);
  adapter = makeAdapter();
});

after(async () => {
  await running?.close();
  if (receiver) await closeServer(receiver);
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

beforeEach(() => {
  sim.reset();
  sim.clearFaults();
  deliveries = [];
  receiverFailNext = 0;
});

test('happy path: 201 → accepted with the token echoed; getJob reaches succeeded with metrics', async () => {
  const { job, attemptId } = await submitOk();
  assert.equal(job.state, 'queued');
  assert.equal(job.rawStatus, 'starting');
  assert.equal(job.correlationToken, attemptId);
  assert.ok(job.updatedAt instanceof Date);
  const done = await untilTerminal(job.jobId);
  assert.equal(done.state, 'succeeded');
  assert.ok(done.outputUrl?.startsWith(`${sim.baseUrl()}/replicate/files/${job.jobId}/output.mp4?`));
  assert.equal(typeof done.metrics?.['predict_time'], 'number');
  assert.ok(done.updatedAt && done.updatedAt.getTime() >= job.updatedAt.getTime());
  assert.equal(sim.tokenCount(attemptId), 1);
});

test('output URL serves a real MP4 with Content-Length and Range (206); a bad signature is 403', async () => {
  const { job } = await submitOk({ duration: 1 });
  const done = await untilTerminal(job.jobId);
  const url = done.outputUrl!;
  const full = await fetch(url);
  assert.equal(full.status, 200);
  assert.equal(full.headers.get('content-type'), 'video/mp4');
  const bytes = Buffer.from(await full.arrayBuffer());
  assert.equal(Number(full.headers.get('content-length')), bytes.length);
  assert.ok(bytes.length > 1000, `mp4 is ${bytes.length} bytes`);
  assert.equal(bytes.subarray(4, 8).toString('latin1'), 'ftyp');

  const part = await fetch(url, { headers: { range: 'bytes=4-11' } });
  assert.equal(part.status, 206);
  assert.equal(part.headers.get('content-range'), `bytes 4-11/${bytes.length}`);
  assert.deepEqual(Buffer.from(await part.arrayBuffer()), bytes.subarray(4, 12));

  const forged = new URL(url);
  forged.searchParams.set('expires', String(Date.now() + 10 * 3_600_000));
  assert.equal((await fetch(forged)).status, 403);
});

test('output URL expires after the simulator TTL (403 afterwards)', async () => {
  const short = createSimulator({ apiToken: TOKEN, webhookSecret: SECRET, generationMs: 50, outputTtlMs: 400, dataDir });
  const r = await short.listen(0);
  try {
    const a = makeAdapter({ baseUrl: `${short.baseUrl()}/replicate` });
    const out = await a.submit({ ...newAttempt(), model: 'acme/video', input: { prompt: 'x' } });
    assert.equal(out.kind, 'accepted');
    if (out.kind !== 'accepted') return;
    const done = await waitFor('succeeded', async () => {
      const j = await a.getJob(out.job.jobId);
      return j.state === 'succeeded' ? j : undefined;
    });
    const ok = await fetch(done.outputUrl!);
    assert.equal(ok.status, 200);
    await ok.arrayBuffer();
    await new Promise((res) => setTimeout(res, 450));
    assert.equal((await fetch(done.outputUrl!)).status, 403);
  } finally {
    await r.close();
  }
});

test('webhooks: start and completed are delivered, signed, and verified by adapter.verifyCallback', async () => {
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  await sim.webhooksIdle();
  const got = deliveriesFor(attemptId);
  assert.equal(got.length, 2);
  const verified = got.map((d) => adapter.verifyCallback(d.body, d.headers));
  assert.deepEqual(
    verified.map((v) => v.job.state),
    ['queued', 'succeeded'],
  );
  for (const [i, v] of verified.entries()) {
    assert.equal(v.job.jobId, job.jobId);
    // The token rides in the callback URL only: the body is the get-prediction object, no `webhook`.
    assert.equal(got[i]!.token, attemptId);
    assert.equal('webhook' in (JSON.parse(got[i]!.body.toString('utf8')) as object), false);
  }
  assert.equal(verified[0]!.providerEventId, got[0]!.headers['webhook-id']);
  assert.notEqual(verified[0]!.providerEventId, verified[1]!.providerEventId);
  assert.ok(verified[1]!.job.outputUrl);
  assert.equal(sim.stats().webhooks_sent, 2);
});

test('verifyCallback: a webhook signed with another key is bad-signature', async () => {
  sim.setFaults({ callback_wrong_key: true });
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  await sim.webhooksIdle();
  const got = deliveriesFor(attemptId);
  assert.ok(got.length >= 1);
  for (const d of got) {
    assert.throws(
      () => adapter.verifyCallback(d.body, d.headers),
      (e: unknown) => e instanceof CallbackVerificationError && e.reason === 'bad-signature',
    );
  }
});

test('verifyCallback: tampered body → bad-signature; stale timestamp → stale-timestamp; missing headers → missing-headers', async () => {
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  await sim.webhooksIdle();
  const d = deliveriesFor(attemptId)[1]!;
  const reasonOf = (fn: () => unknown): string => {
    try {
      fn();
    } catch (e) {
      if (e instanceof CallbackVerificationError) return e.reason;
      throw e;
    }
    return 'verified';
  };
  assert.equal(
    reasonOf(() => adapter.verifyCallback(d.body, d.headers)),
    'verified',
  );
  const tampered = Buffer.from(d.body.toString('utf8').replace('"succeeded"', '"failed"'));
  assert.notDeepEqual(tampered, d.body);
  assert.equal(
    reasonOf(() => adapter.verifyCallback(tampered, d.headers)),
    'bad-signature',
  );

  // Correctly signed, but 10 minutes old (tolerance is 5 minutes).
  const old = new Date(Date.now() - 10 * 60_000);
  const stale = {
    'webhook-id': 'msg_stale',
    'webhook-timestamp': String(Math.floor(old.getTime() / 1000)),
    'webhook-signature': new Webhook(SECRET).sign('msg_stale', old, d.body.toString('utf8')),
  };
  assert.equal(
    reasonOf(() => adapter.verifyCallback(d.body, stale)),
    'stale-timestamp',
  );

  const { 'webhook-signature': _sig, ...noSig } = headersOf(d);
  assert.equal(
    reasonOf(() => adapter.verifyCallback(d.body, noSig)),
    'missing-headers',
  );
  assert.equal(
    reasonOf(() => adapter.verifyCallback(d.body, {})),
    'missing-headers',
  );

  // Correctly signed, but not a prediction.
  const now = new Date();
  const junk = Buffer.from('{"hello":"world"}');
  const junkHeaders = {
    'webhook-id': 'msg_junk',
    'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
    'webhook-signature': new Webhook(SECRET).sign('msg_junk', now, junk.toString('utf8')),
  };
  assert.equal(
    reasonOf(() => adapter.verifyCallback(junk, junkHeaders)),
    'bad-payload',
  );
});

test('submit fault accept_then_hang: our timeout → unknown, and the provider did create exactly one job', async () => {
  sim.setFaults({ submit: 'accept_then_hang' });
  const a = newAttempt();
  const t0 = Date.now();
  const out = await makeAdapter({ timeoutMs: 300 }).submit({ ...a, model: 'acme/video', input: { prompt: 'x' } });
  assert.equal(out.kind, 'unknown', JSON.stringify(out));
  assert.ok(Date.now() - t0 < 2_000);
  assert.equal(sim.tokenCount(a.attemptId), 1);
  const res = await fetch(`${sim.baseUrl()}/_sim/tokens/${a.attemptId}`);
  assert.deepEqual(await res.json(), { token: a.attemptId, count: 1 });
});

test('submit fault error_5xx_before_accept → unknown (a 5xx never proves absence)', async () => {
  sim.setFaults({ submit: 'error_5xx_before_accept' });
  const a = newAttempt();
  const out = await adapter.submit({ ...a, model: 'acme/video', input: {} });
  assert.equal(out.kind, 'unknown');
  assert.equal(sim.tokenCount(a.attemptId), 0);
});

test('submit fault error_5xx_after_accept → unknown, and the job exists', async () => {
  sim.setFaults({ submit: 'error_5xx_after_accept' });
  const a = newAttempt();
  const out = await adapter.submit({ ...a, model: 'acme/video', input: {} });
  assert.equal(out.kind, 'unknown');
  assert.equal(sim.tokenCount(a.attemptId), 1);
});

test('submit fault rate_limit → rejected retryable with retryAfterMs from Retry-After; nothing created', async () => {
  sim.setFaults({ submit: 'rate_limit', retry_after_s: 7 });
  const a = newAttempt();
  const out = await adapter.submit({ ...a, model: 'acme/video', input: {} });
  assert.deepEqual(out.kind === 'rejected' ? { retryable: out.retryable, status: out.status, retryAfterMs: out.retryAfterMs } : out, {
    retryable: true,
    status: 429,
    retryAfterMs: 7_000,
  });
  assert.equal(sim.tokenCount(a.attemptId), 0);
});

test('submit_fault_count limits a fault to the next N submits', async () => {
  sim.setFaults({ submit: 'rate_limit', submit_fault_count: 1 });
  const first = await adapter.submit({ ...newAttempt(), model: 'acme/video', input: {} });
  const second = await adapter.submit({ ...newAttempt(), model: 'acme/video', input: {} });
  assert.equal(first.kind, 'rejected');
  assert.equal(second.kind, 'accepted');
});

test('submit fault reset_after_accept (socket destroyed after the job was created) → unknown', async () => {
  sim.setFaults({ submit: 'reset_after_accept' });
  const a = newAttempt();
  const out = await adapter.submit({ ...a, model: 'acme/video', input: {} });
  assert.equal(out.kind, 'unknown', JSON.stringify(out));
  assert.equal(sim.tokenCount(a.attemptId), 1);
});

test('submit fault answer_after_ms within our timeout → accepted', async () => {
  sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 150 });
  const out = await adapter.submit({ ...newAttempt(), model: 'acme/video', input: {} });
  assert.equal(out.kind, 'accepted');
});

test('connection refused (nothing listening) → rejected retryable: the request never left', async () => {
  const probe = createServer();
  const port = await listenOn(probe);
  await closeServer(probe);
  const out = await makeAdapter({ baseUrl: `http://127.0.0.1:${port}/replicate` }).submit({
    ...newAttempt(),
    model: 'acme/video',
    input: {},
  });
  assert.equal(out.kind, 'rejected', JSON.stringify(out));
  if (out.kind === 'rejected') {
    assert.equal(out.retryable, true);
    assert.equal(out.status, null);
    assert.match(out.reason, /ECONNREFUSED/);
  }
});

test('401 → rejected non-retryable, and the API token never appears in the reason', async () => {
  const wrong = 'r8_wrong_token_should_not_leak_123';
  const out = await makeAdapter({ apiToken: wrong }).submit({ ...newAttempt(), model: 'acme/video', input: {} });
  assert.equal(out.kind, 'rejected');
  if (out.kind === 'rejected') {
    assert.equal(out.retryable, false);
    assert.equal(out.status, 401);
    assert.ok(!out.reason.includes(wrong));
  }
});

test('secrets never appear in errors, even when the provider echoes them back', async () => {
  const echo = createServer((req, res) => {
    res.writeHead(req.method === 'POST' ? 400 : 500, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ detail: `bad request from ${req.headers.authorization} ${SECRET}` }));
  });
  const port = await listenOn(echo);
  try {
    const a = makeAdapter({ baseUrl: `http://127.0.0.1:${port}` });
    const out = await a.submit({ ...newAttempt(), model: 'm', input: {} });
    assert.equal(out.kind, 'rejected');
    assert.ok(!JSON.stringify(out).includes(TOKEN) && !JSON.stringify(out).includes(SECRET), JSON.stringify(out));
    await assert.rejects(a.getJob('abc'), (e: Error) => !e.message.includes(TOKEN) && !e.message.includes(SECRET));
  } finally {
    await closeServer(echo);
  }
});

test('getJob: 404 → ProviderNotFound; 5xx → transient plain Error', async () => {
  await assert.rejects(adapter.getJob('doesnotexist'), (e: Error) => e.name === 'ProviderNotFound');
  const { job } = await submitOk();
  sim.setFaults({ status: 'error_5xx' });
  await assert.rejects(adapter.getJob(job.jobId), (e: Error) => e.name === 'Error' && /HTTP 500/.test(e.message));
});

test('cancel: a running prediction ends canceled and the completed webhook says so', async () => {
  const { job, attemptId } = await submitOk({ sim_generation_ms: 5_000 });
  await adapter.cancel(job.jobId);
  const j = await adapter.getJob(job.jobId);
  assert.equal(j.state, 'canceled');
  await sim.webhooksIdle();
  const last = deliveriesFor(attemptId).at(-1)!;
  assert.equal(adapter.verifyCallback(last.body, last.headers).job.state, 'canceled');
});

test("every create carries Cancel-After, sized from the task's deadline plus Replicate's 30-minute run limit; no deadline, no header", async () => {
  const nowMs = Date.parse('2026-12-05T10:00:00Z');
  const sent: (string | null)[] = [];
  const a = createReplicateAdapter({
    baseUrl: `${sim.baseUrl()}/replicate`,
    apiToken: TOKEN,
    webhookSecret: SECRET,
    timeoutMs: 2_000,
    now: () => nowMs,
    fetch: (input, init) => {
      sent.push(new Headers(init?.headers).get('cancel-after'));
      return fetch(input, init);
    },
  });
  const deadlines = [new Date(nowMs + 3_600_000), new Date(nowMs + 1_500), new Date(nowMs - 3_600_000), null];
  for (const deadlineAt of deadlines) {
    const out = await a.submit({ ...newAttempt(), model: 'acme/video', input: { prompt: 'deadline' }, deadlineAt });
    assert.equal(out.kind, 'accepted', JSON.stringify(out));
  }
  assert.deepEqual(sent, ['5400s', '1802s', '1800s', null]);
  assert.equal(REPLICATE_RUN_LIMIT_MS, 1_800_000);
  assert.equal(cancelAfterFor(new Date(nowMs + 250), nowMs), '1801s', 'rounded up to whole seconds');
});

test('the simulator honours Cancel-After: a prediction not started by then is aborted (no run time to bill), a running one is canceled; a value under 5 s is refused', async () => {
  // Created with the documented minimum, 5 s (ours are never that short: the test's clock is the provider's).
  const create = async (cancelAfter: string, input: Record<string, unknown>) => {
    const res = await fetch(`${sim.baseUrl()}/replicate/v1/models/acme/video/predictions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', 'cancel-after': cancelAfter },
      body: JSON.stringify({ input }),
    });
    return { status: res.status, id: ((await res.json()) as { id?: string }).id ?? '' };
  };
  sim.setFaults({ start_delay_ms: 60_000 });
  const queued = await create('5s', { prompt: 'never starts' });
  sim.clearFaults();
  const running = await create('0h0m5s', { prompt: 'runs long', sim_generation_ms: 60_000 });
  assert.deepEqual([queued.status, running.status], [201, 201]);
  assert.equal((await adapter.getJob(queued.id)).state, 'queued');
  const ended = await waitFor(
    'both ended by Cancel-After',
    async () => {
      const [q, r] = [await adapter.getJob(queued.id), await adapter.getJob(running.id)];
      return q.state !== 'queued' && r.state !== 'running' ? ([q, r] as const) : undefined;
    },
    10_000,
  );
  assert.deepEqual([ended[0].state, ended[1].state], ['aborted', 'canceled']);
  assert.equal(ended[0].metrics?.['predict_time'], undefined, 'an aborted prediction never ran');
  assert.equal((await create('3s', { prompt: 'x' })).status, 422);
  assert.equal((await create('soon', { prompt: 'x' })).status, 422);
});

test('[sim:fail] in the prompt ends failed with an error message', async () => {
  const { job } = await submitOk({ prompt: 'please [sim:fail]' });
  const done = await untilTerminal(job.jobId);
  assert.equal(done.state, 'failed');
  assert.match(done.error ?? '', /simulated failure/);
  assert.equal(done.outputUrl, null);
});

/** The lookup an unknown submit of `attemptId` with this input makes (the submit window around now). */
const fingerprint = (attemptId: string, input: Record<string, unknown>, over: Partial<LookupQuery> = {}): LookupQuery => ({
  token: attemptId,
  model: 'acme/video',
  input,
  since: new Date(Date.now() - 60_000),
  until: new Date(Date.now() + 60_000),
  ...over,
});

/** Submits with accept_then_hang once: the provider creates the prediction, we never learn its id. */
async function lostSubmit(input: Record<string, unknown>): Promise<string> {
  sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1 });
  const lost = newAttempt();
  const out = await makeAdapter({ timeoutMs: 200 }).submit({ ...lost, model: 'acme/video', input });
  assert.equal(out.kind, 'unknown');
  sim.clearFaults();
  return lost.attemptId;
}

const inputOf = async (id: string): Promise<unknown> =>
  ((await (await fetch(`${sim.baseUrl()}/replicate/v1/predictions/${id}`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()) as { input: unknown })
    .input;

test('reconciling by fingerprint: the exact input and model inside the submit window bind the one prediction a lost submit created, across pages', async () => {
  const input = { prompt: 'the lost one', duration: 2 };
  const token = await lostSubmit(input);
  // Push it off the first page (page size 5), with the same model and other inputs.
  for (let i = 0; i < 11; i++) await submitOk({ prompt: `other ${i}` });
  const found = await adapter.findByCorrelationToken(fingerprint(token, { duration: 2, prompt: 'the lost one' }));
  assert.equal(found.kind, 'found', JSON.stringify(found));
  if (found.kind !== 'found') return;
  assert.deepEqual([found.by, found.job.correlationToken], ['fingerprint', token]);
  assert.deepEqual(await inputOf(found.job.jobId), input);
  assert.equal(sim.tokenCount(token), 1);
});

test('a Replicate miss never proves absence: no match is not-found-unproven, and the capability says so', async () => {
  await submitOk({ prompt: 'something else' });
  const miss = await adapter.findByCorrelationToken(fingerprint('never-submitted', { prompt: 'never sent' }));
  assert.equal(miss.kind, 'not-found-unproven', JSON.stringify(miss));
  assert.equal(adapter.capabilities.absenceProof, 'none');
  // Another model with the same input is not a match either.
  const { attemptId } = await submitOk({ prompt: 'same input' });
  const other = await adapter.findByCorrelationToken(fingerprint(attemptId, { prompt: 'same input' }, { model: 'acme/other' }));
  assert.equal(other.kind, 'not-found-unproven');
});

test('an ambiguous fingerprint: two predictions with the exact input in the window are "ambiguous" with both ids, never a pick', async () => {
  const input = { prompt: 'twice' };
  const token = await lostSubmit(input);
  const { job } = await submitOk(input);
  const r = await adapter.findByCorrelationToken(fingerprint(token, input));
  assert.equal(r.kind, 'ambiguous', JSON.stringify(r));
  if (r.kind !== 'ambiguous') return;
  assert.equal(r.jobs.length, 2);
  assert.ok(r.jobs.some((j) => j.jobId === job.jobId));
});

test('the submit window bounds the fingerprint (created_after / created_before), and a listing failure throws instead of claiming "not found"', async () => {
  const input = { prompt: 'old' };
  const token = await lostSubmit(input);
  await new Promise((r) => setTimeout(r, 30));
  const after = new Date();
  for (let i = 0; i < 4; i++) await submitOk({ prompt: `new ${i}` });
  assert.equal((await adapter.findByCorrelationToken(fingerprint(token, input, { since: after }))).kind, 'not-found-unproven');
  assert.equal((await adapter.findByCorrelationToken(fingerprint(token, input, { until: new Date(after.getTime() - 60_000) }))).kind, 'not-found-unproven');
  assert.equal((await adapter.findByCorrelationToken(fingerprint(token, input))).kind, 'found');
  sim.setFaults({ list: 'error_5xx' });
  await assert.rejects(adapter.findByCorrelationToken(fingerprint(token, input)));
});

test('the list `next` is followed by host, not scheme: another scheme on our host is followed (on our origin); another host is refused', async () => {
  const input = { prompt: 'deep' };
  const token = await lostSubmit(input);
  for (let i = 0; i < 11; i++) await submitOk({ prompt: `cover ${i}` });
  const port = new URL(sim.baseUrl()).port;
  sim.setFaults({ list_next_origin: `https://127.0.0.1:${port}` });
  const found = await adapter.findByCorrelationToken(fingerprint(token, input));
  assert.equal(found.kind, 'found', JSON.stringify(found));
  sim.setFaults({ list_next_origin: `http://localhost:${port}` });
  await assert.rejects(adapter.findByCorrelationToken(fingerprint(token, input)), /another host/);
  // Replicate's own documented example: an http `next` on api.replicate.com, fetched over https.
  assert.equal(
    nextPageUrl('http://api.replicate.com/v1/predictions?cursor=abc', 'https://api.replicate.com'),
    'https://api.replicate.com/v1/predictions?cursor=abc',
  );
  assert.equal(nextPageUrl('https://api.replicate.com.evil.example/v1/predictions?cursor=abc', 'https://api.replicate.com'), null);
});

test('a relative list `next` keeps the configured base path', () => {
  assert.equal(nextPageUrl('/v1/predictions?cursor=abc', 'https://proxy.example/replicate'), 'https://proxy.example/replicate/v1/predictions?cursor=abc');
  assert.equal(
    nextPageUrl('/replicate/v1/predictions?cursor=abc', 'https://proxy.example/replicate'),
    'https://proxy.example/replicate/v1/predictions?cursor=abc',
  );
  assert.equal(nextPageUrl('/v1/predictions?cursor=abc', 'https://api.replicate.com'), 'https://api.replicate.com/v1/predictions?cursor=abc');
  assert.equal(nextPageUrl('//evil.example/v1/predictions', 'https://proxy.example/replicate'), null);
});

test("callbacks 'off' sends no webhook at all (polling-only)", async () => {
  sim.setFaults({ callbacks: 'off' });
  const { job, attemptId } = await submitOk();
  assert.equal((await untilTerminal(job.jobId)).state, 'succeeded');
  await sim.webhooksIdle();
  assert.equal(deliveriesFor(attemptId).length, 0);
  assert.equal(sim.stats().webhooks_sent, 0);
});

test('callback_duplicates: N extra deliveries of each event carry the same webhook-id', async () => {
  sim.setFaults({ callback_duplicates: 2 });
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  await sim.webhooksIdle();
  const got = deliveriesFor(attemptId);
  assert.equal(got.length, 6);
  const ids = got.map((d) => adapter.verifyCallback(d.body, d.headers).providerEventId);
  const counts = new Map<string | null, number>();
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
  assert.deepEqual([...counts.values()], [3, 3]);
});

test('callback_reorder: completed arrives before start; updatedAt still orders them', async () => {
  sim.setFaults({ callback_reorder: true });
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  await sim.webhooksIdle();
  const jobs = deliveriesFor(attemptId).map((d) => adapter.verifyCallback(d.body, d.headers).job);
  assert.deepEqual(
    jobs.map((j) => j.state),
    ['succeeded', 'queued'],
  );
  assert.ok(jobs[0]!.updatedAt!.getTime() > jobs[1]!.updatedAt!.getTime());
});

test('webhook redelivery after receiver errors keeps the webhook-id', async () => {
  sim.setFaults({ callback_reorder: false });
  receiverFailNext = 2; // the first two POSTs (start event) get 500
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  await sim.webhooksIdle();
  const got = deliveriesFor(attemptId);
  assert.equal(got.length, 2);
  const s = sim.stats();
  assert.equal(s.webhooks_sent, 2);
  assert.equal(s.webhook_attempts, 4);
  assert.equal(s.webhooks_failed, 0);
});

test('admin endpoints: POST /_sim/faults replaces the config, GET /_sim/stats counts by token', async () => {
  const set = await fetch(`${sim.baseUrl()}/_sim/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ callbacks: 'off' }),
  });
  assert.equal(set.status, 200);
  const bad = await fetch(`${sim.baseUrl()}/_sim/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ submit: 'explode' }),
  });
  assert.equal(bad.status, 422);
  const { attemptId } = await submitOk();
  const stats = (await (await fetch(`${sim.baseUrl()}/_sim/stats`)).json()) as { predictions_total: number; by_token: Record<string, number> };
  assert.equal(stats.predictions_total, 1);
  assert.deepEqual(stats.by_token, { [attemptId]: 1 });
  assert.equal((await fetch(`${sim.baseUrl()}/_sim/faults`, { method: 'DELETE' })).status, 200);
  assert.equal((await fetch(`${sim.baseUrl()}/_sim/reset`, { method: 'POST' })).status, 200);
  assert.equal(sim.stats().predictions_total, 0);
});

test('rate limiter: a bucket of burstSeconds of the rate, refilled at the rate; the detail names the reset', () => {
  let now = 1_000_000;
  const limiter = new ReplicateRateLimiter({ createPerMinute: 60, otherPerMinute: 120, burstSeconds: 5 }, () => now);
  // 60 a minute = 1/s: a burst of 5, then one a second.
  for (let i = 0; i < 5; i++) assert.equal(limiter.check('create'), null, `create ${i}`);
  assert.equal(limiter.check('create'), 'Request was throttled. Your rate limit resets in ~1s.');
  now += 999;
  assert.notEqual(limiter.check('create'), null);
  now += 1;
  assert.equal(limiter.check('create'), null);
  // The classes are separate buckets: others still have their 10.
  for (let i = 0; i < 10; i++) assert.equal(limiter.check('other'), null, `other ${i}`);
  assert.equal(limiter.check('other'), 'Request was throttled. Your rate limit resets in ~1s.');
  assert.deepEqual(limiter.throttled(), { create: 2, other: 1 });
  // A long idle refills to the burst, never beyond it.
  now += 3_600_000;
  for (let i = 0; i < 5; i++) assert.equal(limiter.check('create'), null);
  assert.notEqual(limiter.check('create'), null);
  limiter.reset();
  assert.deepEqual(limiter.throttled(), { create: 0, other: 0 });
  assert.equal(limiter.check('create'), null);
  // A slow rate names a longer reset: 6 a minute, one token gone → 10 s until the next.
  const slow = new ReplicateRateLimiter({ createPerMinute: 6, otherPerMinute: 6, burstSeconds: 1 }, () => now);
  assert.equal(slow.check('create'), null);
  assert.equal(slow.check('create'), 'Request was throttled. Your rate limit resets in ~10s.');
  assert.deepEqual(replicateLimitsFromSetting('600,3000'), { createPerMinute: 600, otherPerMinute: 3_000, burstSeconds: 10 });
  assert.equal(replicateLimitsFromSetting('off'), false);
  assert.throws(() => replicateLimitsFromSetting('600'), /creates,others/);
});

test('throttleResetMs reads the documented throttle body; null when it names no reset', () => {
  assert.equal(throttleResetMs('{"detail":"Request was throttled. Your rate limit resets in ~30s."}'), 30_000);
  assert.equal(throttleResetMs('{"detail":"Request was throttled. Your rate limit resets in 2.5 s."}'), 2_500);
  assert.equal(throttleResetMs('{"detail":"Request was throttled."}'), null);
  assert.equal(throttleResetMs('not json at all'), null);
});

test("the simulated account's limits: a create over them is a retryable 429 with the reset as retryAfterMs, nothing created; reads over them are transient", async () => {
  const limited = createSimulator({
    apiToken: TOKEN,
    webhookSecret: SECRET,
    generationMs: 60_000,
    outputTtlMs: 60_000,
    dataDir,
    // 3 creates and 6 others a minute, a burst of a minute's worth: the 4th create and the 7th read are throttled.
    replicateRateLimits: { createPerMinute: 3, otherPerMinute: 6, burstSeconds: 60 },
  });
  const server = await limited.listen(0);
  try {
    const a = createReplicateAdapter({ baseUrl: `${limited.baseUrl()}/replicate`, apiToken: TOKEN, webhookSecret: SECRET, timeoutMs: 2_000 });
    const jobs: ProviderJob[] = [];
    for (let i = 0; i < 3; i++) {
      const out = await a.submit({ ...newAttempt(), model: 'acme/video', input: {} });
      assert.equal(out.kind, 'accepted', JSON.stringify(out));
      if (out.kind === 'accepted') jobs.push(out.job);
    }
    const over = newAttempt();
    const out = await a.submit({ ...over, model: 'acme/video', input: {} });
    // 3 a minute: the next token is 20 s away, and the body says so (no Retry-After header).
    assert.deepEqual(out.kind === 'rejected' ? [out.retryable, out.status, out.retryAfterMs] : out, [true, 429, 20_000]);
    assert.equal(limited.tokenCount(over.attemptId), 0);
    const raw = await fetch(`${limited.baseUrl()}/replicate/v1/models/acme/video/predictions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ input: {} }),
    });
    assert.equal(raw.status, 429);
    assert.equal(raw.headers.get('retry-after'), null);
    assert.match(((await raw.json()) as { detail: string }).detail, /^Request was throttled\. Your rate limit resets in ~\d+s\.$/);
    for (let i = 0; i < 6; i++) await a.getJob(jobs[i % 3]!.jobId);
    await assert.rejects(a.getJob(jobs[0]!.jobId), (e: Error & { status?: number; transient?: boolean }) => {
      assert.equal(e.name, 'Error');
      assert.equal(e.status, 429);
      assert.equal(e.transient, true);
      return true;
    });
    const st = limited.stats();
    assert.deepEqual(st.replicate_throttled, { create: 2, other: 1 });
    // The throttled creates arrived and were refused: the provider-side count sees them.
    assert.deepEqual([st.submits_received, st.submits_refused, st.predictions_total], [5, 2, 3]);
    limited.reset();
    assert.deepEqual(limited.stats().replicate_throttled, { create: 0, other: 0 });
    assert.equal((await a.submit({ ...newAttempt(), model: 'acme/video', input: {} })).kind, 'accepted');
  } finally {
    await server.close();
  }
});
