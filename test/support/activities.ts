// Activities run one at a time, as a worker would run them (MockActivityEnvironment), against
// real Postgres and the provider simulator speaking all four protocols. For tests that arrange
// a step sequence by hand.
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { eq } from 'drizzle-orm';
import { taskAttempt } from '../../db/schema';
import { outputObjectKey } from '../../storage/s3';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createTask, testActivityDeps } from './deps';
import { buildProviders, buildStorage } from '../../config/services';
import { createTaskActivities, type TaskActivities } from '../../activities';
import type { TaskActivityDeps } from '../../activities/deps';
import type { FenceToken } from '../../db/fence';
import type { ObjectStorage } from '../../storage/s3';
import type { ProviderAdapter } from '../../providers/types';
import { simulatorProviderSettings, worldActivityDeps } from '../../harness/world';
import { createTestDatabase, createTestTenant, eventually, startSimulator, testConfig, testLogger, type RunningSimulator, type TestDatabase } from './stack';

export interface ActivityWorld {
  readonly sim: RunningSimulator;
  readonly tdb: TestDatabase;
  readonly config: ReturnType<typeof testConfig>;
  readonly tenantId: string;
  readonly token: FenceToken;
  /** The activities themselves, for a test that runs one in its own environment (to cancel it). */
  readonly activities: TaskActivities;
  /** The dependencies the activities were built with (their process state: guard, route statistics, poll demand). */
  readonly deps: TaskActivityDeps;
  run<K extends keyof TaskActivities>(name: K, ...args: Parameters<TaskActivities[K]>): ReturnType<TaskActivities[K]>;
  close(): Promise<void>;
}

export async function startActivityWorld(
  opts: {
    readonly config?: Record<string, string>;
    readonly generationMs?: number;
    /** Adjusts the activities' dependencies (e.g. a fixed provider-health view). */
    readonly deps?: (deps: TaskActivityDeps) => TaskActivityDeps;
    /** The tenant's credits (default 1000). */
    readonly credits?: string;
  } = {},
): Promise<ActivityWorld> {
  const sim = await startSimulator(testConfig(), { generationMs: opts.generationMs ?? 60_000 });
  const config = testConfig({
    ...simulatorProviderSettings(sim.baseUrl),
    PROVIDER_HTTP_TIMEOUT_MS: '3000',
    ...opts.config,
  });
  const tdb = await createTestDatabase(config);
  const base = worldActivityDeps(config, tdb.database, testLogger);
  const deps = opts.deps ? opts.deps(base) : base;
  const acts = createTaskActivities(deps);
  const { tenantId } = await createTestTenant(tdb.database, config, opts.credits ?? '1000');
  return {
    sim,
    tdb,
    config,
    tenantId,
    token: { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 },
    activities: acts,
    deps,
    run(name, ...args) {
      return runActivity(acts, name, ...args);
    },
    async close() {
      await sim.close();
      await tdb.drop();
    },
  };
}

/** `acts`' activity `name`, run once as a worker would run it (its own MockActivityEnvironment). */
export function runActivity<K extends keyof TaskActivities>(
  acts: TaskActivities,
  name: K,
  ...args: Parameters<TaskActivities[K]>
): ReturnType<TaskActivities[K]> {
  return new MockActivityEnvironment().run(acts[name] as never, ...(args as unknown as never[])) as ReturnType<TaskActivities[K]>;
}

/**
 * Activities built afresh on the world's database and storage, with none of the world's process
 * state (provider guard, route statistics, poll demand, callback health); `providers` replace
 * the configured adapters of the same name (a counting or faulty wrapper).
 */
export function freshActivities(w: ActivityWorld, providers: Readonly<Record<string, ProviderAdapter>> = {}): TaskActivities {
  const config = w.config;
  return createTaskActivities(
    testActivityDeps(config, { db: w.tdb.database, storage: buildStorage(config), providers: { ...buildProviders(config), ...providers } }),
  );
}

/**
 * `adapter` as if its provider documented that a miss of its lookup proves the job was never
 * created (absenceProof 'exact-lookup'). None of ours does (docs/providers.md "Proof of absence"):
 * for tests of what follows a proof of absence.
 */
export function provingAbsence(adapter: ProviderAdapter): ProviderAdapter {
  return {
    ...adapter,
    capabilities: { ...adapter.capabilities, absenceProof: 'exact-lookup', resendable: false },
    async findByCorrelationToken(q) {
      const r = await adapter.findByCorrelationToken(q);
      return r.kind === 'not-found-unproven' ? { kind: 'not-found-proven', evidence: `stand-in proof: ${r.reason}` } : r;
    },
  };
}

let seq = 0;
/** A Replicate task whose provider job has succeeded and whose inbox is applied: PROVIDER_SUCCEEDED. */
export async function providerSucceededTask(w: ActivityWorld, label: string): Promise<string> {
  seq += 1;
  const created = await createTask(w.tdb.database.db, w.token, {
    tenantId: w.tenantId,
    idempotencyKey: `${label}-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `${label} ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const id = created.task.task_id;
  await w.run('dispatchTask', id);
  await w.run('prepareAttempt', id);
  assert.equal((await w.run('submitAttempt', id)).facts.status, 'SUBMITTED');
  await untilProviderSucceeded(w, id);
  return id;
}

/** Polls a SUBMITTED task's job and applies its inbox until the task is PROVIDER_SUCCEEDED. */
export async function untilProviderSucceeded(w: ActivityWorld, id: string): Promise<void> {
  await eventually(
    async () => {
      await w.run('pollProvider', id);
      return (await w.run('applyInbox', id)).status === 'PROVIDER_SUCCEEDED' ? true : undefined;
    },
    20_000,
    300,
  );
}

/**
 * Moves `taskId`'s provider output behind `origin` (a test server on loopback, answering as the
 * test needs): the bytes the provider served, its attempt, and the key the rescue stores them under.
 */
export async function outputMovedTo(w: ActivityWorld, taskId: string, origin: Server): Promise<{ bytes: Buffer; attemptId: string; key: string }> {
  const db = w.tdb.database.db;
  const [attempt] = await db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  const bytes = Buffer.from(await (await fetch(attempt!.output_url!, { headers: { 'accept-encoding': 'identity' } })).arrayBuffer());
  await db
    .update(taskAttempt)
    .set({ output_url: `http://127.0.0.1:${(origin.address() as AddressInfo).port}/files/x/output.mp4` })
    .where(eq(taskAttempt.attempt_id, attempt!.attempt_id));
  return { bytes, attemptId: attempt!.attempt_id, key: outputObjectKey(w.tenantId, taskId, attempt!.attempt_id, 'mp4') };
}

/** `storage`, except that its presigned GETs fail while `failures.left` is above 0 (the media step cannot read the stored video). */
export function withPresignFailures(storage: ObjectStorage, failures: { left: number }): ObjectStorage {
  const wrapped: ObjectStorage = Object.create(storage) as ObjectStorage;
  wrapped.presignGet = async (key, ttl, served) => {
    if (failures.left > 0) {
      failures.left -= 1;
      throw new Error('storage unreachable (test)');
    }
    return storage.presignGet(key, ttl, served);
  };
  return wrapped;
}
