// What Runway answers beyond a job (docs/decisions/0070), on the whole stack against the simulator:
// a 429 on create is the tier's daily generation cap, so the task waits unsent for the reset
// (queued, shown as such) and goes out on the same attempt after it, never failing for it.
import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { providerCreateCap, taskAttempt } from '../../db/schema';
import type { SubmitReceived } from '../../providers/simulator/submit-log';
import { moderationReport } from '../../ops/provider-outcomes';
import { eventually } from '../support/stack';
import { startE2E, type E2E } from '../support/e2e';

let e: E2E;
const submits: SubmitReceived[] = [];
let stopListening = () => {};
before(async () => {
  // A capped model is asked again every 1.5 s (the default is 15 min, or the next UTC midnight); a
  // short call timeout so a 10 s deadline leaves room for a call.
  e = await startE2E('runway-outcomes', { PROVIDER_CAP_RECHECK_MS: '1500', PROVIDER_HTTP_TIMEOUT_MS: '2000' }, { generationMs: 300 });
  stopListening = e.sim.sim.onSubmit((s) => submits.push(s));
});
after(async () => {
  stopListening();
  await e?.close();
});
beforeEach(() => e.sim.sim.clearFaults());

const GEN4 = { model: 'gen4_turbo', duration_seconds: 2, resolution: '720p', input_image_url: 'https://example.com/first-frame.png' };

async function attemptsOf(taskId: string) {
  return e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
}

test("Runway: a create over the tier's daily cap waits unsent for the reset and goes out on the same attempt; no task fails for it", async () => {
  // The account allows one gen4_turbo generation a day: of two tasks created at once, one is refused for it.
  e.sim.sim.setFaults({ providers: ['runway'], runway_daily_generations: 1 });
  const ids = await Promise.all([1, 2].map((i) => e.createTask(`runway-cap-${i}`, { ...GEN4, prompt: `heron ${i} of a capped day` })));
  // Refused for the cap: queued for its reset, visible to the tenant, the attempt unsent and unspent.
  const queued = await eventually(async () => {
    for (const id of ids) {
      const t = (await e.getTask(id)) as any;
      if (t.queue?.reason === 'daily_cap') return t;
    }
    return undefined;
  }, 60_000);
  const capped: string = queued.task_id;
  const other = ids.find((id) => id !== capped)!;
  assert.equal(queued.status, 'SUBMITTING');
  assert.equal(queued.queue.provider, 'runway');
  assert.ok(queued.queue.until, 'when the allowance is asked again');
  await e.waitForStatus(other, 'SUCCEEDED', 60_000);
  const [waiting] = await attemptsOf(capped);
  assert.equal(waiting?.submit_state, 'PREPARED');
  assert.ok(waiting.capped_since);
  const [cap] = await e.tdb.database.db.select().from(providerCreateCap);
  assert.equal(cap?.provider_model, 'gen4_turbo');
  assert.equal((await e.getTask(capped)).status, 'SUBMITTING', 'still waiting: probes meet the cap');
  assert.equal((await e.ledgerOf(capped))['RELEASE'], undefined, 'its credits stay reserved while it waits');
  // The window frees room (the next day, or a rolling window moving on): the next probe is accepted,
  // on the same attempt, one job, no failure.
  e.sim.sim.setFaults({ providers: ['runway'], runway_daily_generations: 2 });
  await e.waitForStatus(capped, 'SUCCEEDED', 60_000);
  const attempts = await attemptsOf(capped);
  assert.equal(attempts.length, 1, 'never a second attempt for the cap');
  assert.equal(attempts[0]!.throttled, false, 'not counted as a throttle');
  assert.equal(e.sim.jobsFor(attempts[0]!.attempt_id), 1);
  const refused = submits.filter((s) => s.provider === 'runway' && s.token === attempts[0]!.attempt_id && s.fault === 'rate_limit');
  assert.ok(refused.length >= 1, 'its create was refused for the cap first');
  assert.equal((await e.tdb.database.db.select().from(providerCreateCap)).length, 0, 'an accepted create lifts the cap');
});

test('Runway: a task still capped at its deadline fails DEADLINE_EXCEEDED with its credits released, never sent, one attempt', async () => {
  e.sim.sim.setFaults({ providers: ['runway'], runway_daily_generations: 0 });
  const taskId = await e.createTask('runway-cap-deadline', { ...GEN4, prompt: 'a heron that never gets a turn', deadline_seconds: 10 });
  const failed = await e.waitForStatus(taskId, 'FAILED', 40_000);
  assert.equal(failed.failure.code, 'DEADLINE_EXCEEDED');
  const attempts = await attemptsOf(taskId);
  assert.equal(attempts.length, 1);
  assert.equal(attempts[0]!.submit_state, 'CANCELLED');
  assert.ok(attempts[0]!.capped_since, 'it waited for the cap');
  assert.equal(e.sim.jobsFor(attempts[0]!.attempt_id), 0);
  const ledger = await e.ledgerOf(taskId);
  assert.deepEqual([Number(ledger['SETTLE']), Number(ledger['RELEASE'])], [0, Number(ledger['RESERVE'])]);
  await e.tdb.database.db.delete(providerCreateCap);
});

for (const side of ['input', 'output'] as const) {
  test(`Runway: a task its moderation refuses (${side}) ends FAILED CONTENT_MODERATED with the side named: one job, no retry, credits released, counted for the tenant`, async () => {
    e.sim.sim.setFaults({ providers: ['runway'], runway_moderation: side });
    const taskId = await e.createTask(`runway-moderated-${side}`, { ...GEN4, prompt: `a heron the checker refuses (${side})` });
    const failed = await e.waitForStatus(taskId, 'FAILED', 60_000);
    assert.equal(failed.failure.code, 'CONTENT_MODERATED');
    assert.match(failed.failure.message, side === 'input' ? /input \(SAFETY\.INPUT\.TEXT\)/ : /output \(SAFETY\.OUTPUT\.VIDEO\)/);
    const attempts = await attemptsOf(taskId);
    assert.equal(attempts.length, 1, 'never retried, never re-routed');
    assert.equal(e.sim.jobsFor(attempts[0]!.attempt_id), 1);
    const ledger = await e.ledgerOf(taskId);
    assert.deepEqual([Number(ledger['SETTLE']), Number(ledger['RELEASE'])], [0, Number(ledger['RESERVE'])]);
    const report = await moderationReport(e.tdb.database.db, new Date(Date.now() - 3_600_000));
    const mine = report.tenants.find((t) => t.tenant_id === e.tenant.tenantId && t.provider === 'runway');
    assert.equal(mine?.tasks, side === 'input' ? 1 : 2, 'ops moderation counts the tenant');
  });
}
