// Unknown submit outcomes through the real workflow: never a second attempt on a guess, a job that
// exists is found (Replicate: by the fingerprint of what we sent; Kling: by our key, or by sending
// the same create again with the same key, which Kling refuses as a duplicate once a task has it),
// and what cannot be decided goes to MANUAL_REVIEW for an operator's Update (docs/providers.md).
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { and, asc, eq } from 'drizzle-orm';
import { lookupQueryFor } from '../../activities/reconcile-lookup';
import { generationTask, opsAudit, taskAttempt, taskTransition } from '../../db/schema';
import { createReplicateAdapter } from '../../providers/replicate';
import { SA_NEEDS_ATTENTION } from '../../workflows/definitions';
import { defaultRequest, startE2E, type E2E } from '../support/e2e';
import { eventually } from '../support/stack';

let e: E2E;
before(async () => {
  e = await startE2E('unknown', {
    PROVIDER_HTTP_TIMEOUT_MS: '700',
    UNKNOWN_PROOF_DELAY_MS: '1500',
    UNKNOWN_OUTCOME_DEADLINE_MS: '600000',
  });
});
after(async () => {
  await e?.close();
});
beforeEach(() => {
  e.sim.sim.clearFaults();
});

const attemptsOf = (taskId: string) => e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)).orderBy(asc(taskAttempt.attempt_no));
const jobsFor = (attemptId: string) => e.sim.jobsFor(attemptId);
/** A request with its own prompt: identical inputs in one submit window are ambiguous by design. */
const request = (prompt: string, over: Record<string, unknown> = {}) => ({ ...defaultRequest, prompt, ...over });
const KLING = { model: 'kling-v2-master', resolution: '720p', duration_seconds: 5 };

describe('an unknown outcome is reconciled, never given a second attempt on a guess', () => {
  test('accept-then-hang: the job the provider created is found by its fingerprint and the task succeeds with one provider job', async () => {
    e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1, callbacks: 'off' });
    const taskId = await e.createTask('hang-1', request('hang one'));
    const task = await e.waitForStatus(taskId, 'SUCCEEDED');
    const attempts = await attemptsOf(taskId);
    assert.equal(attempts.length, 1, 'no second attempt');
    assert.equal(jobsFor(attempts[0]!.attempt_id), 1, 'one provider job for the attempt');
    assert.ok(task.transitions.some((t: { to: string }) => t.to === 'SUBMIT_UNKNOWN'));
    assert.ok(attempts[0]!.unknown_since, 'unknown_since recorded');
  });

  test('reset connection after accept: found by fingerprint, one provider job', async () => {
    e.sim.sim.setFaults({ submit: 'reset_after_accept', submit_fault_count: 1 });
    const taskId = await e.createTask('reset-1', request('reset one'));
    await e.waitForStatus(taskId, 'SUCCEEDED');
    const attempts = await attemptsOf(taskId);
    assert.equal(attempts.length, 1);
    assert.equal(jobsFor(attempts[0]!.attempt_id), 1);
  });

  test('accept-then-hang with every Replicate webhook dropped: 0 second jobs, each task bound by its fingerprint', async () => {
    const n = 5;
    e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: n, callbacks: 'off' });
    const ids = await Promise.all(Array.from({ length: n }, (_, i) => e.createTask(`hang-all-${i}`, request(`dropped webhooks ${i}`))));
    for (const taskId of ids) {
      const task = await e.waitForStatus(taskId, 'SUCCEEDED');
      const attempts = await attemptsOf(taskId);
      assert.equal(attempts.length, 1, `task ${taskId}: no second attempt`);
      assert.equal(jobsFor(attempts[0]!.attempt_id), 1, `task ${taskId}: one provider job`);
      assert.ok(task.transitions.some((t: { to: string }) => t.to === 'SUBMIT_UNKNOWN'));
    }
    assert.equal(e.sim.sim.stats().jobs_by_provider.replicate >= n, true);
  });

  test('an ambiguous fingerprint parks: two lost submits of the same input in one window both go to MANUAL_REVIEW with both jobs as evidence, none resubmitted', async () => {
    e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 2, callbacks: 'off' });
    const same = request('the very same input');
    const ids = await Promise.all([e.createTask('twin-a', same), e.createTask('twin-b', same)]);
    for (const taskId of ids) {
      await e.waitForStatus(taskId, 'MANUAL_REVIEW');
      const attempts = await attemptsOf(taskId);
      assert.equal(attempts.length, 1);
      assert.equal(jobsFor(attempts[0]!.attempt_id), 1);
      const [parked] = await e.tdb.database.db
        .select()
        .from(taskTransition)
        .where(and(eq(taskTransition.task_id, taskId), eq(taskTransition.source_event, 'reconcile.ambiguous')));
      assert.equal((parked?.detail as { candidate_job_ids: string[] } | undefined)?.candidate_job_ids.length, 2);
    }
    for (const taskId of ids) {
      // The Update's validator reads the workflow's facts, which follow Postgres once the step returns.
      await e.waitForWorkflowStatus(taskId, 'MANUAL_REVIEW');
      await e.api.facade.resolveReview(taskId, { kind: 'fail', operator: 'ops-test', reason: 'test cleanup' });
    }
  });

  test('Kling accept-then-hang with callbacks lost: found by the get-by-external-id, one job', async () => {
    e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1, callbacks: 'off' });
    const taskId = await e.createTask('kling-hang-1', request('kling hang', KLING));
    await e.waitForStatus(taskId, 'SUCCEEDED');
    const attempts = await attemptsOf(taskId);
    assert.equal(attempts.length, 1);
    assert.equal(jobsFor(attempts[0]!.attempt_id), 1);
  });

  test('Kling 5xx before accept: the lookup miss proves nothing; the same create goes again with the same key and makes the one job, on the same attempt', async () => {
    e.sim.sim.setFaults({ submit: 'error_5xx_before_accept', submit_fault_count: 1 });
    const taskId = await e.createTask('5xx-1', request('kling 5xx', KLING));
    await e.waitForStatus(taskId, 'SUCCEEDED');
    const attempts = await attemptsOf(taskId);
    assert.equal(attempts.length, 1, 'no second attempt, no second key');
    assert.deepEqual([attempts[0]!.resends, attempts[0]!.key_taken_at], [1, null]);
    assert.equal(jobsFor(attempts[0]!.attempt_id), 1);
  });

  for (const shape of ['404-1203', '400-1201'] as const) {
    test(`Kling accept-then-hang, callbacks lost, the task readable only 5 s after its create, a miss answered ${shape}: the re-sent create is refused as a duplicate and the task is bound once readable: one Kling job, the task succeeds`, async () => {
      e.sim.sim.setFaults({
        providers: ['kling'],
        submit: 'accept_then_hang',
        submit_fault_count: 1,
        callbacks: 'off',
        kling_visible_after_ms: 5_000,
        kling_not_found: shape,
      });
      const taskId = await e.createTask(`kling-late-${shape}`, request(`kling late ${shape}`, KLING));
      await e.waitForStatus(taskId, 'SUCCEEDED', 60_000);
      const attempts = await attemptsOf(taskId);
      assert.equal(attempts.length, 1, 'no second attempt');
      assert.ok(attempts[0]!.key_taken_at, 'Kling refused the re-sent create: the key was taken');
      assert.equal(jobsFor(attempts[0]!.attempt_id), 1, 'exactly one Kling job for the task');
    });
  }

  test('a Replicate create answered 500 is visible from the first minute: the task says SUBMIT_UNKNOWN, and its attempt since when and why', async () => {
    e.sim.sim.setFaults({ submit: 'error_5xx_before_accept', submit_fault_count: 1, callbacks: 'off' });
    const started = Date.now();
    const taskId = await e.createTask('visible-500', request('visible 500', { resolution: '720p', duration_seconds: 6 }));
    const task = await e.waitForStatus(taskId, 'SUBMIT_UNKNOWN', 60_000);
    assert.ok(Date.now() - started < 60_000);
    const [attempt] = task.attempts as { submit_state: string; unknown_since: string | null; last_error: string | null }[];
    assert.equal(attempt?.submit_state, 'SUBMIT_UNKNOWN');
    assert.ok(attempt?.unknown_since, 'since when');
    assert.match(attempt?.last_error ?? '', /HTTP 500/, 'why');
  });

  test('429 with Retry-After is a proven rejection: a new attempt after the wait, no job for the first', async () => {
    e.sim.sim.setFaults({ submit: 'rate_limit', retry_after_s: 1, submit_fault_count: 1 });
    const taskId = await e.createTask('429-1', request('rate limited'));
    await e.waitForStatus(taskId, 'SUCCEEDED');
    const [first, second] = await attemptsOf(taskId);
    assert.equal(first?.submit_state, 'REJECTED');
    assert.equal(jobsFor(first.attempt_id), 0);
    assert.equal(jobsFor(second!.attempt_id), 1);
    assert.ok(second!.submit_started_at!.getTime() - first.submit_finished_at!.getTime() >= 900);
  });
});

describe('MANUAL_REVIEW and operator Updates', () => {
  let review: E2E;
  before(async () => {
    // Lookups fail, so nothing can be proved; the deadline sends the task to review.
    review = await startE2E('review', {
      PROVIDER_HTTP_TIMEOUT_MS: '700',
      UNKNOWN_PROOF_DELAY_MS: '1000',
      UNKNOWN_OUTCOME_DEADLINE_MS: '1500',
    });
  });
  after(async () => {
    await review?.close();
  });

  async function parkInReview(key: string, submit: 'accept_then_hang' | 'error_5xx_before_accept', listing: 'ok' | 'error_5xx' = 'error_5xx') {
    review.sim.sim.setFaults({ submit, submit_fault_count: 1, list: listing, callbacks: 'off' });
    const taskId = await review.createTask(key, request(`review ${key}`));
    await review.waitForStatus(taskId, 'MANUAL_REVIEW');
    const handle = review.client.workflow.getHandle(review.api.facade.workflowIdFor(taskId));
    // The workflow publishes NeedsAttention after the step that wrote MANUAL_REVIEW commits.
    await eventually(async () => ((await handle.describe()).typedSearchAttributes.get(SA_NEEDS_ATTENTION) === true ? true : undefined), 15_000);
    review.sim.sim.clearFaults();
    return taskId;
  }

  test('an unknown outcome past its deadline parks the task in MANUAL_REVIEW; a malformed resolution is refused by the validator', async () => {
    const taskId = await parkInReview('review-validate', 'error_5xx_before_accept');
    await assert.rejects(
      review.api.facade.resolveReview(taskId, { kind: 'fail', operator: 'ops-alice', reason: '' }),
      (err: unknown) => err instanceof WorkflowUpdateFailedError && /reason required/.test(String(((err as Error).cause as Error | undefined)?.message)),
    );
    await assert.rejects(
      review.api.facade.resolveReview(taskId, { kind: 'bind-job', operator: 'ops-alice', reason: 'found it', providerJobId: 'no-such-job' }),
      WorkflowUpdateFailedError,
    );
    assert.equal((await review.getTask(taskId)).status, 'MANUAL_REVIEW');
    // Resolve to leave no workflow behind.
    await review.api.facade.resolveReview(taskId, { kind: 'fail', operator: 'ops-alice', reason: 'test cleanup' });
  });

  test('a Replicate miss proves nothing: 5xx before accept with a working list never buys a second job; the task parks at the deadline', async () => {
    const taskId = await parkInReview('review-miss', 'error_5xx_before_accept', 'ok');
    const attempts = await review.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    assert.equal(attempts.length, 1, 'no second attempt');
    assert.equal(attempts[0]!.submit_state, 'SUBMIT_UNKNOWN');
    assert.equal(review.sim.jobsFor(attempts[0]!.attempt_id), 0);
    await review.api.facade.resolveReview(taskId, { kind: 'fail', operator: 'ops-alice', reason: 'test cleanup' });
  });

  test('confirm not submitted: a new attempt goes out, the task succeeds, the audit row names the operator', async () => {
    const taskId = await parkInReview('review-not-submitted', 'error_5xx_before_accept');
    const facts = await review.api.facade.resolveReview(taskId, { kind: 'not-submitted', operator: 'ops-bob', reason: 'provider dashboard shows nothing' });
    assert.equal(facts.status, 'DISPATCHING');
    await review.waitForStatus(taskId, 'SUCCEEDED');
    const attempts = await review.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    assert.equal(attempts.length, 2);
    const audit = await review.tdb.database.db
      .select()
      .from(opsAudit)
      .where(and(eq(opsAudit.target_id, taskId), eq(opsAudit.action, 'review.not-submitted')));
    assert.equal(audit[0]?.actor, 'operator:ops-bob');
    assert.equal(audit[0]?.reason, 'provider dashboard shows nothing');
  });

  test('bind a provider job: the hung job is bound, the task succeeds with one provider job', async () => {
    const taskId = await parkInReview('review-bind', 'accept_then_hang');
    const [attempt] = await review.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
    const adapter = createReplicateAdapter({
      baseUrl: review.config.PROVIDER_REPLICATE_BASE_URL,
      apiToken: review.config.PROVIDER_REPLICATE_API_TOKEN,
      webhookSecret: review.config.PROVIDER_REPLICATE_WEBHOOK_SECRET,
      timeoutMs: 2000,
    });
    const [task] = await review.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
    const found = await adapter.findByCorrelationToken(lookupQueryFor(attempt!, task!.request, new Date()));
    assert.ok(found.kind === 'found', 'the operator finds the job at the provider');
    await review.api.facade.resolveReview(taskId, {
      kind: 'bind-job',
      operator: 'ops-carol',
      reason: 'job found in provider console',
      providerJobId: found.job.jobId,
    });
    await review.waitForStatus(taskId, 'SUCCEEDED');
    assert.equal(review.sim.jobsFor(attempt!.attempt_id), 1);
  });

  test('fail: the task fails and its credits are released', async () => {
    const taskId = await parkInReview('review-fail', 'error_5xx_before_accept');
    await review.api.facade.resolveReview(taskId, { kind: 'fail', operator: 'ops-dan', reason: 'customer asked to drop it' });
    const task = await review.waitForStatus(taskId, 'FAILED');
    assert.equal(task.failure.code, 'OPERATOR_FAILED');
    assert.deepEqual(await review.ledgerOf(taskId), { RESERVE: '4.500000', SETTLE: '0.000000', RELEASE: '4.500000' });
  });
});
