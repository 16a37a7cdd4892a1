// The Kling adapter against the simulator's Kling protocol, over real HTTP: JWT auth, lookup by
// our own key (tier lookup-by-key) whose miss proves nothing, the refusal of a second create with
// our key (resendable), unsigned callbacks that only trigger a re-fetch.
import { test, before, after, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { classifyKlingRefusal, createKlingAdapter, KLING_CAPABILITIES, klingModelName, type KlingAdapterOptions } from '../../providers/kling';
import { createKlingTokenSource, signKlingJwt } from '../../providers/kling-jwt';
import { checkKlingJwt, SIM_KLING_DEFAULTS } from '../../providers/simulator/kling';
import type { ProviderAdapter, ProviderJob } from '../../providers/types';
import { deadPort, lookupQuery, newAttempt, startHarness, TERMINAL, waitFor, type Harness } from './harness';

const MODEL = 'kling-v2-master';
const { accessKey, secretKey } = SIM_KLING_DEFAULTS;
let h: Harness;
let adapter: ProviderAdapter;

const makeAdapter = (over: Partial<KlingAdapterOptions> = {}): ProviderAdapter =>
  createKlingAdapter({ baseUrl: `${h.sim.baseUrl()}/kling`, accessKey, secretKey, timeoutMs: 2_000, ...over });

async function submitOk(prompt = 'a lantern', a: ProviderAdapter = adapter, on: Harness = h): Promise<{ job: ProviderJob; attemptId: string }> {
  const att = newAttempt(on.receiverUrl, 'kling');
  const out = await a.submit({ ...att, model: MODEL, input: { prompt, duration: 5, resolution: '720p' } });
  assert.equal(out.kind, 'accepted', JSON.stringify(out));
  if (out.kind !== 'accepted') throw new Error('unreachable');
  return { job: out.job, attemptId: att.attemptId };
}

const untilTerminal = (jobId: string): Promise<ProviderJob> =>
  waitFor(`kling ${jobId} terminal`, async () => {
    const j = await adapter.getJob(jobId);
    return TERMINAL.includes(j.state) ? j : undefined;
  });

const claimsOf = (jwt: string): Record<string, unknown> => JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString('utf8')) as Record<string, unknown>;

before(async () => {
  h = await startHarness({ kling: { concurrency: 3 } });
  adapter = makeAdapter();
});
after(() => h.close());
beforeEach(() => {
  h.sim.reset();
  h.sim.clearFaults();
  h.deliveries.length = 0;
});

test('JWT shape: HS256 header, iss = access key, nbf 5 s back, exp after the TTL, signed with the secret key', () => {
  const now = 1_700_000_000;
  const jwt = signKlingJwt(accessKey, secretKey, now, 1800);
  const [header, payload, sig] = jwt.split('.') as [string, string, string];
  assert.deepEqual(JSON.parse(Buffer.from(header, 'base64url').toString('utf8')), { alg: 'HS256', typ: 'JWT' });
  assert.deepEqual(claimsOf(jwt), { iss: accessKey, exp: now + 1800, nbf: now - 5 });
  assert.equal(sig, createHmac('sha256', secretKey).update(`${header}.${payload}`).digest('base64url'));
  const o = { accessKey, secretKey, concurrency: 1 };
  assert.equal(checkKlingJwt(`Bearer ${jwt}`, o, now), null);
  assert.equal(checkKlingJwt(`Bearer ${jwt}`, o, now + 1800)?.code, 1004);
  assert.equal(checkKlingJwt(`Bearer ${jwt}`, { ...o, secretKey: 'other' }, now)?.code, 1002);
  assert.equal(checkKlingJwt(undefined, o, now)?.code, 1001);
});

test('the token is reused while valid and regenerated before it expires', () => {
  let nowMs = 1_700_000_000_000;
  const src = createKlingTokenSource({ accessKey, secretKey, ttlSeconds: 1800, refreshMarginSeconds: 300, now: () => nowMs });
  const first = src.token();
  nowMs += 1000 * 1000;
  assert.equal(src.token(), first);
  nowMs += 600 * 1000; // 200 s left < 300 s margin
  const second = src.token();
  assert.notEqual(second, first);
  assert.equal(claimsOf(second)['exp'], Math.floor(nowMs / 1000) + 1800);
});

test('a token that expired on the client clock is refused by the simulator (code 1004) as a final rejection', async () => {
  const stale = makeAdapter({ now: () => Date.now() - 3_600_000 });
  const out = await stale.submit({ ...newAttempt(h.receiverUrl, 'kling'), model: MODEL, input: { prompt: 'x' } });
  assert.deepEqual(out.kind === 'rejected' ? [out.retryable, out.status, /code 1004/.test(out.reason)] : out, [false, 401, true]);
  assert.ok(!JSON.stringify(out).includes(secretKey));
});

test('happy path: external_task_id = our attempt id; polled to succeed with the video URL', async () => {
  const { job, attemptId } = await submitOk();
  assert.deepEqual([job.state, job.rawStatus, job.correlationToken], ['queued', 'submitted', attemptId]);
  const done = await untilTerminal(job.jobId);
  assert.equal(done.state, 'succeeded');
  assert.equal((await fetch(done.outputUrl!)).status, 200);
  assert.equal(h.sim.tokenCount(attemptId), 1);
  assert.equal(klingModelName(MODEL), 'kling-v2-master');
  assert.equal(klingModelName('kwaivgi/kling-v2.1'), 'kling-v2-1');
});

test('lookup by our own key uses the documented get-by-external-id: it finds the job a lost submit created; a miss of either shape (404/1203, 400/1201) proves nothing', async () => {
  h.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1 });
  const lost = newAttempt(h.receiverUrl, 'kling');
  const out = await makeAdapter({ timeoutMs: 300 }).submit({ ...lost, model: MODEL, input: { prompt: 'x' } });
  assert.equal(out.kind, 'unknown');
  for (let i = 0; i < 2; i++) await submitOk();
  const found = await adapter.findByCorrelationToken(lookupQuery(lost.attemptId));
  assert.equal(found.kind, 'found', JSON.stringify(found));
  if (found.kind === 'found') assert.deepEqual([found.by, found.job.correlationToken], ['key', lost.attemptId]);
  for (const shape of ['404-1203', '400-1201'] as const) {
    h.sim.setFaults({ kling_not_found: shape });
    const miss = await adapter.findByCorrelationToken(lookupQuery('never-submitted'));
    assert.equal(miss.kind, 'not-found-unproven', `${shape}: ${JSON.stringify(miss)}`);
  }
  assert.deepEqual([KLING_CAPABILITIES.absenceProof, KLING_CAPABILITIES.resendable], ['none', true]);
  h.sim.setFaults({ status: 'error_5xx' });
  await assert.rejects(adapter.findByCorrelationToken(lookupQuery(lost.attemptId)), (e: Error) => e.name === 'Error');
});

test('a task Kling does not serve yet (no read-after-write) is missed by the lookup and a transient read, while its key is taken at once: the same create again is refused as a duplicate', async () => {
  for (const shape of ['404-1203', '400-1201'] as const) {
    h.sim.setFaults({ kling_visible_after_ms: 1_500, kling_not_found: shape });
    const { job, attemptId } = await submitOk(`late ${shape}`);
    assert.equal((await adapter.findByCorrelationToken(lookupQuery(attemptId))).kind, 'not-found-unproven', shape);
    // Not "gone": a read failure bounded by the maximum run time, never counted towards a park.
    await assert.rejects(adapter.getJob(job.jobId), (e: Error & { transient?: boolean }) => e.name === 'Error' && e.transient === true);
    const again = await adapter.submit({ ...newAttempt(h.receiverUrl, 'kling'), attemptId, model: MODEL, input: { prompt: `late ${shape}` } });
    assert.deepEqual(again.kind === 'unknown' ? [again.kind, again.keyTaken] : again, ['unknown', true], shape);
    assert.equal(h.sim.tokenCount(attemptId), 1, `${shape}: one task for the key`);
    const found = await waitFor(`${attemptId} readable`, async () => {
      const r = await adapter.findByCorrelationToken(lookupQuery(attemptId));
      return r.kind === 'found' ? r : undefined;
    });
    assert.equal(found.job.jobId, job.jobId);
  }
});

test('an ignored list filter can never fake a miss: with the lost task off the newest page, the lookup still finds it (no second job)', async () => {
  // Kling's list takes pageNum/pageSize only; ?external_task_id= is ignored and the 30 newest come back.
  const wide = await startHarness({ kling: { concurrency: 40 } });
  try {
    const a = createKlingAdapter({ baseUrl: `${wide.sim.baseUrl()}/kling`, accessKey, secretKey, timeoutMs: 2_000 });
    wide.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1 });
    const lost = newAttempt(wide.receiverUrl, 'kling');
    assert.equal(
      (
        await createKlingAdapter({ baseUrl: `${wide.sim.baseUrl()}/kling`, accessKey, secretKey, timeoutMs: 300 }).submit({
          ...lost,
          model: MODEL,
          input: { prompt: 'lost [sim:gen=20000]' },
        })
      ).kind,
      'unknown',
    );
    for (let i = 0; i < 31; i++) await submitOk(`cover ${i} [sim:gen=20000]`, a, wide);
    const r = await a.findByCorrelationToken(lookupQuery(lost.attemptId));
    assert.equal(r.kind, 'found', JSON.stringify(r));
    assert.equal(wide.sim.tokenCount(lost.attemptId), 1);
  } finally {
    await wide.close();
  }
});

test('a second submit with the same key is never read as a rejection: Kling refuses the duplicate, the outcome is unknown with the key taken', async () => {
  const att = newAttempt(h.receiverUrl, 'kling');
  assert.equal((await adapter.submit({ ...att, model: MODEL, input: { prompt: 'x' } })).kind, 'accepted');
  const again = await adapter.submit({ ...att, model: MODEL, input: { prompt: 'x' } });
  assert.deepEqual(again.kind === 'unknown' ? [again.kind, again.keyTaken] : again, ['unknown', true], JSON.stringify(again));
  assert.equal(h.sim.tokenCount(att.attemptId), 1);
  // Kling documents the uniqueness, not the refusal's code: any refusal naming the key or a duplicate is one.
  assert.equal(classifyKlingRefusal(1201, 'external_task_id already exists'), 'duplicate');
  assert.equal(classifyKlingRefusal(1200, 'Duplicate task id'), 'duplicate');
  assert.equal(classifyKlingRefusal(1201, 'the external task id has been used'), 'duplicate');
  assert.equal(classifyKlingRefusal(1201, 'prompt is too long'), 'final');
  assert.equal(classifyKlingRefusal(1301, 'content security'), 'final');
});

test('over the concurrency Kling answers 429 code 1303: rejected retryable, nothing created', async () => {
  for (let i = 0; i < 3; i++) await submitOk('slow [sim:gen=3000]');
  const att = newAttempt(h.receiverUrl, 'kling');
  const out = await adapter.submit({ ...att, model: MODEL, input: { prompt: 'x' } });
  assert.deepEqual(out.kind === 'rejected' ? [out.retryable, out.status, /1303/.test(out.reason)] : out, [true, 429, true]);
  assert.equal(h.sim.tokenCount(att.attemptId), 0);
});

test('callbacks are unsigned: verifyCallback keeps only the task id and asks for an authenticated re-fetch', async () => {
  const { job, attemptId } = await submitOk();
  await untilTerminal(job.jobId);
  await h.sim.webhooksIdle();
  const got = h.deliveriesFor(attemptId);
  assert.equal(got.length, 2); // processing, succeed
  for (const d of got) {
    const v = adapter.verifyCallback(d.body, d.headers);
    assert.deepEqual([v.needsRefetch, v.job.jobId, v.job.state, v.job.outputUrl], [true, job.jobId, 'queued', null]);
  }
  // A forged "succeed" with an attacker's URL is not believed either.
  const forged = Buffer.from(JSON.stringify({ task_id: job.jobId, task_status: 'succeed', task_result: { videos: [{ url: 'https://evil/x.mp4' }] } }));
  const v = adapter.verifyCallback(forged, {});
  assert.deepEqual([v.needsRefetch, v.job.outputUrl, v.job.state], [true, null, 'queued']);
});

test('submit faults map to the three outcomes; counts per external id prove what was created', async () => {
  const cases: { fault: object; kind: string; jobs: number }[] = [
    { fault: { submit: 'accept_then_hang' }, kind: 'unknown', jobs: 1 },
    { fault: { submit: 'error_5xx_before_accept' }, kind: 'unknown', jobs: 0 },
    { fault: { submit: 'error_5xx_after_accept' }, kind: 'unknown', jobs: 1 },
    { fault: { submit: 'reset_after_accept' }, kind: 'unknown', jobs: 1 },
    { fault: { submit: 'rate_limit', retry_after_s: 1 }, kind: 'rejected', jobs: 0 },
    { fault: { submit: 'answer_after_ms', submit_delay_ms: 100 }, kind: 'accepted', jobs: 1 },
  ];
  const a = makeAdapter({ timeoutMs: 400 });
  for (const c of cases) {
    h.sim.setFaults(c.fault);
    const att = newAttempt(h.receiverUrl, 'kling');
    const out = await a.submit({ ...att, model: MODEL, input: { prompt: 'x' } });
    assert.equal(out.kind, c.kind, `${JSON.stringify(c.fault)} → ${JSON.stringify(out)}`);
    assert.equal(h.sim.tokenCount(att.attemptId), c.jobs, JSON.stringify(c.fault));
    if (out.kind === 'rejected') assert.deepEqual([out.retryable, out.status, out.retryAfterMs], [true, 429, 1_000]);
  }
});

test('[sim:fail] → failed; a task id Kling does not serve → transient, never gone; status 5xx → transient; refused connection → rejected retryable', async () => {
  const { job } = await submitOk('please [sim:fail]');
  const done = await untilTerminal(job.jobId);
  assert.deepEqual([done.state, /simulated failure/.test(done.error ?? '')], ['failed', true]);
  await assert.rejects(adapter.getJob('123'), (e: Error) => e.name === 'Error' && /not readable \(HTTP 404, code 1203\)/.test(e.message));
  h.sim.setFaults({ status: 'error_5xx' });
  await assert.rejects(adapter.getJob(job.jobId), (e: Error) => e.name === 'Error');
  const refused = await makeAdapter({ baseUrl: `http://127.0.0.1:${await deadPort()}/kling` }).submit({
    ...newAttempt(h.receiverUrl, 'kling'),
    model: MODEL,
    input: { prompt: 'x' },
  });
  assert.deepEqual(refused.kind === 'rejected' ? [refused.retryable, refused.status] : refused, [true, null]);
});

test('capabilities: tier lookup-by-key, unsigned callbacks, no cancel API (cancel is a no-op), 30-day outputs', async () => {
  assert.equal(KLING_CAPABILITIES.unknownOutcomeTier, 'lookup-by-key');
  assert.equal(KLING_CAPABILITIES.callbackSignature, 'none');
  assert.equal(KLING_CAPABILITIES.canCancel, false);
  assert.equal(KLING_CAPABILITIES.outputUrlTtlMs, 30 * 24 * 3_600_000);
  const { job } = await submitOk();
  await adapter.cancel(job.jobId);
  assert.equal((await untilTerminal(job.jobId)).state, 'succeeded');
});

test('image input is refused before sending (the text2video adapter cannot honour it)', async () => {
  const att = newAttempt(h.receiverUrl, 'kling');
  const out = await adapter.submit({ ...att, model: MODEL, input: { prompt: 'x', first_frame_image: 'https://x/y.png' } });
  assert.deepEqual(out.kind === 'rejected' ? [out.retryable, out.status] : out, [false, null]);
  assert.equal(h.sim.tokenCount(att.attemptId), 0);
});
