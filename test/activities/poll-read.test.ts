// A poll makes one status read, also when the read is slow: the poll queue admits polls against
// the provider's query quota, which is a contract (docs/providers.md "Poll queues and pacing"), so
// a read is never sent twice (hedged reads were removed, issue #51). The poll activity under
// MockActivityEnvironment, against real Postgres and the provider simulator, through an adapter
// that counts its reads and makes one of them slow.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createTask } from '../support/deps';
import { buildProviders } from '../../config/services';
import type { ProviderAdapter } from '../../providers/types';
import { freshActivities, runActivity as run, startActivityWorld, type ActivityWorld } from '../support/activities';

let w: ActivityWorld;
before(async () => {
  w = await startActivityWorld({ generationMs: 600_000, config: { POLL_INITIAL_MS: '1000', POLL_MAX_MS: '1000' } });
});
after(async () => w?.close());

/** The Replicate adapter with its reads counted, the `slow`-th one held 400 ms; `quota` replaces its declared one. */
function countingProviders(quota: number | undefined, slow: number) {
  const providers = buildProviders(w.config);
  const real = providers['replicate']!;
  const reads = { count: 0 };
  const wrapped: ProviderAdapter = Object.assign(Object.create(real) as ProviderAdapter, {
    capabilities: { ...real.capabilities, requestsPerSecond: quota },
    async getJob(...args: Parameters<ProviderAdapter['getJob']>) {
      reads.count += 1;
      if (reads.count === slow) await new Promise((r) => setTimeout(r, 400));
      return real.getJob(...args);
    },
  });
  return { providers: { replicate: wrapped }, reads };
}

let seq = 0;
/** A submitted task, then 25 polls, the 26th read slow: reads the 26th poll made. */
async function readsOfASlowPoll(quota: number | undefined): Promise<number> {
  const POLLS = 25;
  const { providers, reads } = countingProviders(quota, POLLS + 1);
  const acts = freshActivities(w, providers);
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `slow-read-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `slow read ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const taskId = created.task.task_id;
  await run(acts, 'dispatchTask', taskId);
  await run(acts, 'prepareAttempt', taskId);
  assert.equal((await run(acts, 'submitAttempt', taskId)).facts.status, 'SUBMITTED');
  for (let i = 0; i < POLLS; i++) await run(acts, 'pollProvider', taskId);
  const before = reads.count;
  assert.equal(before, POLLS, 'one read per fast poll');
  await run(acts, 'pollProvider', taskId);
  return reads.count - before;
}

describe('one status read per poll', () => {
  test('a provider without a query quota: a slow read is one request', async () => {
    assert.equal(await readsOfASlowPoll(undefined), 1);
  });

  test('a provider with a query quota: a slow read is one request', async () => {
    assert.equal(await readsOfASlowPoll(10), 1);
  });
});
