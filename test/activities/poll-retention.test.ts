// A provider that keeps a completed result only for a while (fal: 6 minutes for a large one,
// docs/decisions/0014) is polled well inside that window, however slow the configured pace:
// the poll activity writes a next_poll_at at most a quarter of the retention away.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { MockActivityEnvironment } from '@temporalio/testing';
import { eq } from 'drizzle-orm';
import { createTaskActivities, type TaskActivities } from '../../activities';
import { createTask, testActivityDeps } from '../support/deps';
import { buildProviders, buildStorage } from '../../config/services';
import { taskAttempt } from '../../db/schema';
import { FAL_CAPABILITIES } from '../../providers/fal';
import { createTestDatabase, createTestTenant, startSimulator, testConfig, type RunningSimulator, type TestDatabase } from '../support/stack';

/** A pace far slower than fal's retention allows: polls 10 minutes apart. */
const SLOW_MS = 600_000;

let sim: RunningSimulator;
let tdb: TestDatabase;
let tenantId: string;
let config: ReturnType<typeof testConfig>;
let acts: TaskActivities;

before(async () => {
  sim = await startSimulator(testConfig(), { generationMs: 60_000 });
  config = testConfig({
    PROVIDER_REPLICATE_BASE_URL: `${sim.baseUrl}/replicate`,
    PROVIDER_FAL_BASE_URL: `${sim.baseUrl}/fal`,
    PROVIDER_FAL_JWKS_URL: `${sim.baseUrl}/fal/.well-known/jwks.json`,
    POLL_INITIAL_MS: String(SLOW_MS),
    POLL_MAX_MS: String(SLOW_MS),
  });
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '1000'));
  acts = createTaskActivities(testActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) }));
});
after(async () => {
  await sim?.close();
  await tdb?.drop();
});

const run = <K extends keyof TaskActivities>(name: K, ...args: Parameters<TaskActivities[K]>): ReturnType<TaskActivities[K]> =>
  new MockActivityEnvironment().run(acts[name] as never, ...(args as unknown as never[])) as ReturnType<TaskActivities[K]>;

async function polledInterval(body: { model: string; duration_seconds: number; resolution: '480p' | '720p' }): Promise<number> {
  const created = await createTask(
    tdb.database.db,
    { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 },
    {
      tenantId,
      idempotencyKey: `retention-${body.model}-${Date.now()}`,
      body: { ...body, prompt: 'a slow fox', priority: 0 },
    },
  );
  const taskId = created.task.task_id;
  await run('dispatchTask', taskId);
  const prepared = await run('prepareAttempt', taskId);
  assert.equal((await run('submitAttempt', taskId)).facts.status, 'SUBMITTED');
  await run('pollProvider', taskId);
  const [a] = await tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, prepared.activeAttemptId!));
  return a!.next_poll_at!.getTime() - a!.last_polled_at!.getTime();
}

test('a fal job is polled at most a quarter of its result retention apart, whatever the configured pace; other providers keep the pace', async () => {
  const fal = await polledInterval({ model: 'fal-ai/kling-video/v2/master/text-to-video', duration_seconds: 5, resolution: '720p' });
  assert.ok(fal <= FAL_CAPABILITIES.resultRetentionMs! / 4, `fal polled ${fal} ms apart`);
  const replicate = await polledInterval({ model: 'minimax/video-01', duration_seconds: 6, resolution: '720p' });
  assert.ok(replicate > FAL_CAPABILITIES.resultRetentionMs!, `replicate keeps the configured pace (${replicate} ms)`);
});
