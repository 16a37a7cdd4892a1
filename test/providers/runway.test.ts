// The Runway adapter against the simulator's Runway protocol, over real HTTP.
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { createRunwayAdapter, RUNWAY_CAPABILITIES, runwayRequest, type RunwayAdapterOptions } from '../../providers/runway';
import { SIM_RUNWAY_DEFAULTS } from '../../providers/simulator/runway';
import { CallbackVerificationError, NO_LOOKUP, type ProviderAdapter, type ProviderJob } from '../../providers/types';
import { deadPort, lookupQuery, newAttempt, startHarness, TERMINAL, waitFor, type Harness } from './harness';

const MODEL = 'gen4_turbo';
let h: Harness;
let adapter: ProviderAdapter;

const makeAdapter = (over: Partial<RunwayAdapterOptions> = {}): ProviderAdapter =>
  createRunwayAdapter({ baseUrl: `${h.sim.baseUrl()}/runway`, apiSecret: SIM_RUNWAY_DEFAULTS.apiSecret, timeoutMs: 2_000, ...over });

const IMAGE = { duration: 5, resolution: '720p', first_frame_image: 'https://example.com/a.png' };

async function submitOk(prompt = 'a heron', model = MODEL): Promise<{ job: ProviderJob; attemptId: string }> {
  const att = newAttempt(h.receiverUrl, 'runway');
  const input = model === MODEL ? { prompt, ...IMAGE } : { prompt, duration: 5, resolution: '720p' };
  const out = await adapter.submit({ ...att, model, input });
  assert.equal(out.kind, 'accepted', JSON.stringify(out));
  if (out.kind !== 'accepted') throw new Error('unreachable');
  return { job: out.job, attemptId: att.attemptId };
}

const untilTerminal = (jobId: string): Promise<ProviderJob> =>
  waitFor(`runway ${jobId} terminal`, async () => {
    const j = await adapter.getJob(jobId);
    return TERMINAL.includes(j.state) ? j : undefined;
  });

before(async () => {
  h = await startHarness({ runway: { concurrency: 2 } });
  adapter = makeAdapter();
});
after(() => h.close());
beforeEach(() => {
  h.sim.reset();
  h.sim.clearFaults();
});

test('happy path (image_to_video): accepted PENDING, polled to SUCCEEDED with an output URL; counted once by our attempt id', async () => {
  const { job, attemptId } = await submitOk();
  assert.deepEqual([job.state, job.rawStatus], ['queued', 'PENDING']);
  const done = await untilTerminal(job.jobId);
  assert.equal(done.state, 'succeeded');
  assert.equal((await fetch(done.outputUrl!)).status, 200);
  assert.equal(h.sim.tokenCount(attemptId), 1);
});

test('bodies follow the documented matrix: gen4_turbo is image_to_video at 1280:720; gen4.5 and veo3.1 also take text_to_video', async () => {
  assert.deepEqual(runwayRequest(MODEL, { prompt: 'p', first_frame_image: 'https://x/y.png', resolution: '720p', duration: 5 }), {
    path: '/v1/image_to_video',
    body: { model: MODEL, promptText: 'p', ratio: '1280:720', duration: 5, promptImage: 'https://x/y.png' },
  });
  assert.deepEqual(runwayRequest('veo3.1', { prompt: 'p', resolution: '1080p', duration: 8 }), {
    path: '/v1/text_to_video',
    body: { model: 'veo3.1', promptText: 'p', ratio: '1920:1080', duration: 8 },
  });
  const { job } = await submitOk('no image', 'gen4.5');
  assert.equal((await untilTerminal(job.jobId)).state, 'succeeded');
});

test('a combination Runway does not document is refused before any call: no task is created at Runway', async () => {
  const refusals: [string, Record<string, unknown>, string][] = [
    [MODEL, { prompt: 'p', resolution: '720p', duration: 5 }, 'input_image_url'],
    [MODEL, { prompt: 'p', ...IMAGE, resolution: '1080p' }, 'resolution'],
    [MODEL, { prompt: 'p', ...IMAGE, duration: 1 }, 'duration_seconds'],
    ['veo3.1', { prompt: 'p', resolution: '720p', duration: 5 }, 'duration_seconds'],
    ['gen4.5', { prompt: 'x'.repeat(1001), resolution: '720p', duration: 5 }, 'prompt'],
    ['minimax/video-01', { prompt: 'p', resolution: '720p', duration: 5 }, 'model'],
  ];
  for (const [model, input, field] of refusals) {
    const r = runwayRequest(model, input);
    assert.equal('refused' in r ? r.refused.field : null, field, `${model} ${JSON.stringify(input).slice(0, 80)}`);
    const att = newAttempt(h.receiverUrl, 'runway');
    const out = await adapter.submit({ ...att, model, input });
    assert.deepEqual(out.kind === 'rejected' ? [out.retryable, out.status] : out, [false, null]);
    assert.equal(h.sim.stats().jobs_by_provider.runway, 0);
  }
});

test("the simulator refuses undocumented bodies with Runway's 400 and creates nothing", async () => {
  const post = (path: string, body: object) =>
    fetch(`${h.sim.baseUrl()}/runway${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${SIM_RUNWAY_DEFAULTS.apiSecret}`,
        'x-runway-version': SIM_RUNWAY_DEFAULTS.version,
        'content-type': 'application/json',
      },
      body: JSON.stringify(body),
    });
  for (const [path, body] of [
    ['/v1/text_to_video', { model: 'gen4_turbo', promptText: 'p', ratio: '1280:720', duration: 5 }],
    ['/v1/image_to_video', { model: 'gen4_turbo', promptImage: 'https://x/y.png', ratio: '854:480', duration: 5 }],
    ['/v1/image_to_video', { model: 'gen4_turbo', promptImage: 'https://x/y.png', ratio: '1920:1080', duration: 5 }],
    ['/v1/text_to_video', { model: 'veo3.1', promptText: 'p', ratio: '1280:720', duration: 5 }],
  ] as const) {
    const res = await post(path, body);
    assert.equal(res.status, 400, `${path} ${JSON.stringify(body)}`);
    assert.equal(typeof ((await res.json()) as { error?: unknown }).error, 'string');
  }
  assert.equal(h.sim.stats().jobs_by_provider.runway, 0);
});

test('THROTTLED means accepted and queued: over the concurrency, tasks are accepted, wait THROTTLED, then run', async () => {
  const jobs = [];
  for (let i = 0; i < 3; i++) jobs.push((await submitOk('slow [sim:gen=600]')).job);
  await new Promise((r) => setTimeout(r, 250));
  const third = await adapter.getJob(jobs[2]!.jobId);
  assert.deepEqual([third.rawStatus, third.state], ['THROTTLED', 'queued']);
  assert.equal((await untilTerminal(jobs[2]!.jobId)).state, 'succeeded');
});

test('[sim:fail] → FAILED with failure code and message', async () => {
  const { job } = await submitOk('please [sim:fail]');
  const done = await untilTerminal(job.jobId);
  assert.equal(done.state, 'failed');
  assert.match(done.error ?? '', /INTERNAL\.BAD_OUTPUT: simulated failure/);
});

test('cancel of a running task: DELETE aborts it, and Runway never answers for it again', async () => {
  const { job } = await submitOk('slow [sim:gen=5000]');
  await waitFor('running', async () => ((await adapter.getJob(job.jobId)).rawStatus === 'RUNNING' ? true : undefined));
  await adapter.cancel(job.jobId);
  await assert.rejects(adapter.getJob(job.jobId), (e: Error) => e.name === 'ProviderNotFound');
  await adapter.cancel(job.jobId); // a retried cancel finds nothing left to cancel
});

test('a cancel that loses the race to success deletes nothing: the task stays readable with its output', async () => {
  const { job } = await submitOk();
  const done = await untilTerminal(job.jobId);
  assert.equal(done.state, 'succeeded');
  await adapter.cancel(job.jobId);
  const after = await adapter.getJob(job.jobId);
  // The same output; each read signs its URL afresh (Runway reissues output URLs).
  const pathOf = (u: string | null) => (u ? new URL(u).pathname : null);
  assert.deepEqual([after.state, pathOf(after.outputUrl)], ['succeeded', pathOf(done.outputUrl)]);
  assert.equal((await fetch(after.outputUrl!)).status, 200);
});

test('submit faults map to the three outcomes; counts per attempt id prove what was created', async () => {
  const cases: { fault: object; kind: string; jobs: number }[] = [
    { fault: { submit: 'accept_then_hang' }, kind: 'unknown', jobs: 1 },
    { fault: { submit: 'error_5xx_before_accept' }, kind: 'unknown', jobs: 0 },
    { fault: { submit: 'error_5xx_after_accept' }, kind: 'unknown', jobs: 1 },
    { fault: { submit: 'reset_after_accept' }, kind: 'unknown', jobs: 1 },
    { fault: { submit: 'rate_limit', retry_after_s: 2 }, kind: 'rejected', jobs: 0 },
    { fault: { submit: 'answer_after_ms', submit_delay_ms: 100 }, kind: 'accepted', jobs: 1 },
  ];
  const a = makeAdapter({ timeoutMs: 400 });
  for (const c of cases) {
    h.sim.setFaults(c.fault);
    const att = newAttempt(h.receiverUrl, 'runway');
    const out = await a.submit({ ...att, model: MODEL, input: { prompt: 'x', ...IMAGE } });
    assert.equal(out.kind, c.kind, `${JSON.stringify(c.fault)} → ${JSON.stringify(out)}`);
    assert.equal(h.sim.tokenCount(att.attemptId), c.jobs, JSON.stringify(c.fault));
    if (out.kind === 'rejected') assert.deepEqual([out.retryable, out.retryAfterMs], [true, 2_000]);
  }
});

test('faults scoped to another provider leave Runway alone', async () => {
  h.sim.setFaults({ submit: 'error_5xx_before_accept', providers: ['fal'] });
  await submitOk();
});

test('a wrong X-Runway-Version or secret is a final rejection; the secret never leaks', async () => {
  const v = await makeAdapter({ apiVersion: '2020-01-01' }).submit({ ...newAttempt(h.receiverUrl, 'runway'), model: MODEL, input: { prompt: 'x', ...IMAGE } });
  assert.deepEqual(v.kind === 'rejected' ? [v.retryable, v.status] : v, [false, 400]);
  const secret = 'runway-wrong-secret-should-not-leak';
  const s = await makeAdapter({ apiSecret: secret }).submit({ ...newAttempt(h.receiverUrl, 'runway'), model: MODEL, input: { prompt: 'x', ...IMAGE } });
  assert.deepEqual(s.kind === 'rejected' ? [s.retryable, s.status] : s, [false, 401]);
  assert.ok(!JSON.stringify(s).includes(secret));
});

test('connection refused → rejected retryable (the request never left)', async () => {
  const out = await makeAdapter({ baseUrl: `http://127.0.0.1:${await deadPort()}/runway` }).submit({
    ...newAttempt(h.receiverUrl, 'runway'),
    model: MODEL,
    input: { prompt: 'x', ...IMAGE },
  });
  assert.deepEqual(out.kind === 'rejected' ? [out.retryable, out.status] : out, [true, null]);
});

test('getJob: 404 → ProviderNotFound; 5xx → transient', async () => {
  await assert.rejects(adapter.getJob('nope'), (e: Error) => e.name === 'ProviderNotFound');
  const { job } = await submitOk();
  h.sim.setFaults({ status: 'error_5xx' });
  await assert.rejects(adapter.getJob(job.jobId), (e: Error) => e.name === 'Error');
});

test('poll only: capabilities say so, verifyCallback always refuses, and there is nothing to look up', async () => {
  assert.deepEqual([RUNWAY_CAPABILITIES.pollOnly, RUNWAY_CAPABILITIES.unknownOutcomeTier, RUNWAY_CAPABILITIES.callbackSignature], [true, 'none', 'none']);
  assert.throws(() => adapter.verifyCallback(Buffer.from('{"id":"x","status":"SUCCEEDED"}'), {}), CallbackVerificationError);
  assert.equal(RUNWAY_CAPABILITIES.absenceProof, 'none');
  assert.deepEqual(await adapter.findByCorrelationToken(lookupQuery('anything', { backMs: Date.now() })), NO_LOOKUP);
});
