// Activities run one at a time, as a worker would run them (MockActivityEnvironment), against
// real Postgres and the provider simulator speaking all four protocols. For tests that arrange
// a step sequence by hand.
import { MockActivityEnvironment } from '@temporalio/testing';
import { createTaskActivities, type TaskActivities } from '../../activities';
import type { TaskActivityDeps } from '../../activities/deps';
import { buildActivityDeps, buildProviders, buildStorage } from '../../config/services';
import type { FenceToken } from '../../db/fence';
import type { ObjectStorage } from '../../storage/s3';
import { createTestDatabase, createTestTenant, startSimulator, testConfig, type RunningSimulator, type TestDatabase } from './stack';

export interface ActivityWorld {
  readonly sim: RunningSimulator;
  readonly tdb: TestDatabase;
  readonly config: ReturnType<typeof testConfig>;
  readonly tenantId: string;
  readonly token: FenceToken;
  run<K extends keyof TaskActivities>(name: K, ...args: Parameters<TaskActivities[K]>): ReturnType<TaskActivities[K]>;
  close(): Promise<void>;
}

export async function startActivityWorld(opts: {
  readonly config?: Record<string, string>;
  readonly generationMs?: number;
  /** Adjusts the activities' dependencies (e.g. a fixed provider-health view). */
  readonly deps?: (deps: TaskActivityDeps) => TaskActivityDeps;
} = {}): Promise<ActivityWorld> {
  const sim = await startSimulator(testConfig(), { generationMs: opts.generationMs ?? 60_000 });
  const config = testConfig({
    PROVIDER_REPLICATE_BASE_URL: `${sim.baseUrl}/replicate`,
    PROVIDER_FAL_BASE_URL: `${sim.baseUrl}/fal`,
    PROVIDER_FAL_JWKS_URL: `${sim.baseUrl}/fal/.well-known/jwks.json`,
    PROVIDER_RUNWAY_BASE_URL: `${sim.baseUrl}/runway`,
    PROVIDER_KLING_BASE_URL: `${sim.baseUrl}/kling`,
    PROVIDER_HTTP_TIMEOUT_MS: '3000',
    ...opts.config,
  });
  const tdb = await createTestDatabase(config);
  const base = buildActivityDeps(config, { db: tdb.database, storage: buildStorage(config), providers: buildProviders(config) });
  const acts = createTaskActivities(opts.deps ? opts.deps(base) : base);
  const { tenantId } = await createTestTenant(tdb.database, config, '1000');
  return {
    sim,
    tdb,
    config,
    tenantId,
    token: { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 },
    run(name, ...args) {
      const env = new MockActivityEnvironment();
      return env.run(acts[name] as never, ...(args as unknown as never[])) as never;
    },
    async close() {
      await sim.close();
      await tdb.drop();
    },
  };
}

/** `storage`, except that its presigned GETs fail while `failures.left` is above 0 (the media step cannot read the stored video). */
export function withPresignFailures(storage: ObjectStorage, failures: { left: number }): ObjectStorage {
  const wrapped: ObjectStorage = Object.create(storage) as ObjectStorage;
  wrapped.presignGet = async (key, ttl) => {
    if (failures.left > 0) {
      failures.left -= 1;
      throw new Error('storage unreachable (test)');
    }
    return storage.presignGet(key, ttl);
  };
  return wrapped;
}
