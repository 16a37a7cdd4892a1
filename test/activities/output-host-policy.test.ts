// An output refused by the host allow-list (PROVIDER_<P>_OUTPUT_HOSTS) is not a silent loss
// (activities/rescue-output.ts): while its URL is valid the task waits in OUTPUT_AT_RISK with the
// refused host named, counted by a gauge an alert can use, and the rescue keeps looking; once the
// worker runs with the host allowed the output is rescued. Past the URL's expiry it parks for a
// person as before. Never FAILED. (Before, the first refusal was a non-retryable failure.)
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { desc, eq } from 'drizzle-orm';
import { createTaskActivities } from '../../activities';
import { buildProviders, buildStorage } from '../../config/services';
import { generationTask, taskAttempt, taskTransition } from '../../db/schema';
import { FailureType, OUTPUT_HOST_REFUSED_EVENT } from '../../domain/errors';
import { startFactSampler } from '../../observability/facts';
import { providerSucceededTask, runActivity, startActivityWorld, type ActivityWorld } from '../support/activities';
import { testActivityDeps } from '../support/deps';
import { testLogger } from '../support/stack';

let w: ActivityWorld;
before(async () => {
  // The providers' own hosts only: the simulator's outputs (on 127.0.0.1) are refused by the list.
  w = await startActivityWorld({ generationMs: 100, config: { PROVIDER_REPLICATE_OUTPUT_HOSTS: 'replicate.delivery,*.replicate.delivery' } });
});
after(async () => {
  await w?.close();
});

const statusOf = async (id: string) => (await w.tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!.status;
const latestTransition = async (id: string) =>
  (await w.tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, id)).orderBy(desc(taskTransition.to_version)).limit(1))[0]!;

test(
  'a refused output host parks the task in OUTPUT_AT_RISK naming the host; the rescue retries, and succeeds once the host is allowed',
  { timeout: 60_000 },
  async () => {
    const id = await providerSucceededTask(w, 'host-policy');

    const facts = await w.run('rescueOutput', id);
    assert.equal(facts.status, 'OUTPUT_AT_RISK');
    const parked = await latestTransition(id);
    assert.equal(parked.source_event, OUTPUT_HOST_REFUSED_EVENT);
    const detail = parked.detail as Record<string, unknown>;
    assert.equal(detail['refused_host'], '127.0.0.1');
    assert.match(String(detail['reason']), /PROVIDER_REPLICATE_OUTPUT_HOSTS/);
    assert.ok(detail['output_deadline_at']);

    // Still refused: a retry on its own clock (no escalation), the task where it is.
    await assert.rejects(
      w.run('rescueOutput', id),
      (e: unknown) => e instanceof ApplicationFailure && e.type === FailureType.OutputHostRefused && !e.nonRetryable && e.nextRetryDelay !== undefined,
    );
    assert.equal(await statusOf(id), 'OUTPUT_AT_RISK');

    // The gauge an alert (and the runbook) reads.
    const sampler = startFactSampler({ databaseUrl: w.tdb.url, intervalMs: 3_600_000, logger: testLogger, applicationName: 'host-policy-test' });
    try {
      assert.deepEqual((await sampler.refresh()).outputHostRefused, [{ provider: 'replicate', tasks: 1 }]);
    } finally {
      await sampler.stop();
    }

    // The operator allows the host and the workers run with it: the next retry rescues the output.
    const allowed = { ...w.config, PROVIDER_REPLICATE_OUTPUT_HOSTS: [...w.config.PROVIDER_REPLICATE_OUTPUT_HOSTS, '127.0.0.1'] };
    const acts = createTaskActivities(testActivityDeps(allowed, { db: w.tdb.database, storage: buildStorage(allowed), providers: buildProviders(allowed) }));
    assert.equal((await runActivity(acts, 'rescueOutput', id)).status, 'SUCCEEDED');
  },
);

test("past the URL's expiry a still-refused host parks the task for a person (never FAILED)", { timeout: 60_000 }, async () => {
  const id = await providerSucceededTask(w, 'host-policy-expired');
  await w.tdb.database.db
    .update(taskAttempt)
    .set({ output_deadline_at: new Date(Date.now() - 1_000) })
    .where(eq(taskAttempt.task_id, id));
  await assert.rejects(
    w.run('rescueOutput', id),
    (e: unknown) => e instanceof ApplicationFailure && e.type === FailureType.UnsafeOutputUrl && e.nonRetryable && /127\.0\.0\.1/.test(e.message),
  );
  assert.equal(await statusOf(id), 'FETCHING_OUTPUT', 'the workflow escalates it to MANUAL_REVIEW');
});
