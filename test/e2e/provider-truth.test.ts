// The Runway and fal rows of the provider-truth checks (docs/providers.md "Documented evidence"),
// on the whole stack against the simulator serving only what the providers document:
// Runway's DELETE deletes a finished task, fal's status never says how a request ended and fal
// keeps a result only for a while (a result found gone parks the task, never fails it on first
// sight), and Runway's model matrix is checked before any credit moves.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { count, desc, eq } from 'drizzle-orm';
import { createRunwayAdapter } from '../../providers/runway';
import { FAL_RESULT_GONE } from '../../providers/fal';
import { SIM_RUNWAY_DEFAULTS } from '../../providers/simulator/runway';
import { creditLedger, generationTask, taskAttempt, taskTransition } from '../../db/schema';
import { eventually, http } from '../support/stack';
import { startE2E, type E2E } from '../support/e2e';

let e: E2E;
before(async () => {
  // Polls 3 s apart: a provider job finishes well before the first poll, so a test can act in between.
  e = await startE2E('provider-truth', { POLL_INITIAL_MS: '3000', POLL_MAX_MS: '3000' }, { generationMs: 300 });
});
after(async () => {
  await e?.close();
});
beforeEach(() => e.sim.sim.clearFaults());

const FAL = { model: 'fal-ai/kling-video/v2/master/text-to-video', duration_seconds: 5, resolution: '720p' };
const GEN4 = { model: 'gen4_turbo', duration_seconds: 2, resolution: '720p', input_image_url: 'https://example.com/first-frame.png' };

async function attemptOf(taskId: string) {
  return eventually(async () => {
    const [a] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    return a?.provider_job_id ? a : undefined;
  }, 20_000);
}

/** Charged nothing: SETTLE 0, the whole reservation released. */
async function assertReleased(taskId: string): Promise<void> {
  const ledger = await e.ledgerOf(taskId);
  assert.deepEqual([Number(ledger['SETTLE']), Number(ledger['RELEASE'])], [0, Number(ledger['RESERVE'])]);
}

async function ledgerRows(taskId: string) {
  return e.tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId));
}

test('Runway: a cancel racing a success deletes nothing; the output is rescued and charged once', async () => {
  const taskId = await e.createTask('runway-cancel-race', { ...GEN4, prompt: 'a heron that finishes first' });
  const attempt = await attemptOf(taskId);
  const runway = createRunwayAdapter({ baseUrl: `${e.sim.baseUrl}/runway`, apiSecret: SIM_RUNWAY_DEFAULTS.apiSecret, timeoutMs: 2_000 });
  await eventually(async () => ((await runway.getJob(attempt.provider_job_id!)).state === 'succeeded' ? true : undefined), 10_000, 50);
  // Runway finished; we have not polled yet, so the cancel races the success we do not know of.
  const cancel = await e.cancelTask(taskId);
  assert.ok([200, 202].includes(cancel.status), JSON.stringify(cancel.body));
  const task = await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
  assert.ok(
    task.transitions.some((t: { to: string }) => t.to === 'CANCEL_REQUESTED'),
    'the cancel was recorded before the success',
  );
  assert.equal((await runway.getJob(attempt.provider_job_id!)).state, 'succeeded', 'the Runway task was not deleted');
  const rows = await ledgerRows(taskId);
  assert.equal(rows.filter((r) => r.entry_type === 'SETTLE').length, 1);
  assert.ok(Number(rows.find((r) => r.entry_type === 'SETTLE')!.amount) > 0, 'charged as a success');
  assert.equal(e.sim.jobsFor(attempt.attempt_id), 1);
});

test('Runway: a cancel of a running task ends CANCELLED and uncharged, though Runway never answers for the deleted task again', async () => {
  const taskId = await e.createTask('runway-cancel-running', { ...GEN4, prompt: 'a slow heron [sim:gen=30000]' });
  const attempt = await attemptOf(taskId);
  const runway = createRunwayAdapter({ baseUrl: `${e.sim.baseUrl}/runway`, apiSecret: SIM_RUNWAY_DEFAULTS.apiSecret, timeoutMs: 2_000 });
  await eventually(async () => ((await runway.getJob(attempt.provider_job_id!)).rawStatus === 'RUNNING' ? true : undefined), 10_000, 50);
  await e.cancelTask(taskId);
  await e.waitForStatus(taskId, 'CANCELLED', 60_000);
  await assert.rejects(runway.getJob(attempt.provider_job_id!), (err: Error) => err.name === 'ProviderNotFound');
  await assertReleased(taskId);
});

/** A fal task polled only (its webhooks dropped) until it ends FAILED; its attempt's error. */
async function falFailedByPolling(key: string, prompt: string): Promise<string | null> {
  e.sim.sim.setFaults({ providers: ['fal'], callbacks: 'off' });
  const taskId = await e.createTask(key, { ...FAL, prompt });
  await e.waitForStatus(taskId, 'FAILED', 60_000);
  const [attempt] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.equal(attempt?.submit_state, 'FAILED');
  await assertReleased(taskId);
  return attempt?.last_error ?? null;
}

test('fal: a failure seen by polling only (no webhook) is recorded FAILED and the credits are released', async () => {
  assert.match((await falFailedByPolling('fal-fail-polled', 'a fox that fails [sim:fail]')) ?? '', /simulated failure/);
});

test('fal: a result found gone by polling is read again, then parks the task in MANUAL_REVIEW with the evidence; never FAILED, never stuck', async () => {
  e.sim.sim.setFaults({ providers: ['fal'], callbacks: 'off' });
  const taskId = await e.createTask('fal-result-gone', { ...FAL, prompt: 'a fox whose result expires [sim:result_ttl=1]' });
  await e.waitForStatus(taskId, 'MANUAL_REVIEW', 90_000);
  const rows = await e.tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(desc(taskTransition.to_version));
  assert.ok(!rows.some((r) => r.to_status === 'FAILED'), 'never FAILED');
  const evidence = (rows.find((r) => r.to_status === 'MANUAL_REVIEW')?.detail ?? {}) as Record<string, unknown>;
  assert.equal(evidence['failure'], 'gone', JSON.stringify(evidence));
  assert.equal(evidence['http_status'], 404);
  assert.equal(evidence['consecutive_read_failures'], e.config.PROVIDER_READ_FAILURE_LIMIT, 'read again up to the bound first');
  assert.ok(String(evidence['last_error']).includes(FAL_RESULT_GONE), String(evidence['last_error']));
  // The reservation waits for the operator's resolution (docs/runbooks/manual-review.md).
  assert.equal((await e.ledgerOf(taskId))['RELEASE'], undefined);
});

test('Runway: a combination it does not document is refused at create with a 400 naming the field, before any credit is reserved', async () => {
  const cases: [Record<string, unknown>, string][] = [
    [{ ...GEN4, input_image_url: undefined }, 'input_image_url'],
    [{ ...GEN4, resolution: '1080p' }, 'resolution'],
    [{ ...GEN4, duration_seconds: 1 }, 'duration_seconds'],
    [{ model: 'veo3.1', duration_seconds: 5, resolution: '1080p' }, 'duration_seconds'],
    [{ model: 'gen4.5', duration_seconds: 5, resolution: '720p', prompt: 'x'.repeat(1001) }, 'prompt'],
  ];
  const tasksBefore = await e.tdb.database.db.select({ n: count() }).from(generationTask);
  const ledgerBefore = await e.tdb.database.db.select({ n: count() }).from(creditLedger);
  for (const [i, [body, field]] of cases.entries()) {
    const res = await http(e.api.baseUrl, 'POST', '/v1/tasks', {
      apiKey: e.tenant.apiKey,
      body: { prompt: 'a heron', ...body },
      headers: { 'idempotency-key': `runway-refused-${i}` },
    });
    assert.equal(res.status, 400, JSON.stringify(res.body));
    assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/);
    assert.deepEqual(
      res.body.errors.map((x: { field: string }) => x.field),
      [field],
      JSON.stringify(res.body),
    );
  }
  assert.deepEqual(await e.tdb.database.db.select({ n: count() }).from(generationTask), tasksBefore);
  assert.deepEqual(await e.tdb.database.db.select({ n: count() }).from(creditLedger), ledgerBefore);
});
