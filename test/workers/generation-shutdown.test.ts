// A generation worker asked to stop while it is still starting stops, and stays stopped
// (workers/generation-worker.ts). The region supervisor (workers/fence-watcher.ts) stops it on a
// failover away, which can come at any point of its start: a stop that came while run() was
// opening its slot-grant listener used to find no worker RUNNING yet, and the workers then
// polled in a region that does not own writes until the process was killed.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { NativeConnection } from '@temporalio/worker';
import type { Config } from '../../config/env';
import { createInProcessWorkers, worldActivityDeps } from '../../harness/world';
import type { GenerationWorkers } from '../../workers/generation-worker';
import { createTestDatabase, installTestRuntime, testConfig, testLogger, uniqueQueue, workflowBundle, type TestDatabase } from '../support/stack';

let config: Config;
let tdb: TestDatabase;
let connection: NativeConnection;

before(async () => {
  installTestRuntime();
  config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('shutdown') });
  tdb = await createTestDatabase(config);
  connection = await NativeConnection.connect({ address: config.TEMPORAL_ADDRESS });
});
after(async () => {
  await connection?.close();
  await tdb?.drop();
});

const create = async (): Promise<GenerationWorkers> =>
  createInProcessWorkers(config, tdb.database, {
    connection,
    workflowBundle: await workflowBundle(),
    deps: worldActivityDeps(config, tdb.database, testLogger),
  });

const everyWorker = (w: GenerationWorkers) => [w.generation, ...w.polls.values(), ...(w.reconcile ? [w.reconcile] : [])];

/** Settles with `run`'s outcome, or rejects after `ms` (the workers still polling). */
function within<T>(run: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still running ${ms} ms after shutdown()`)), ms);
  });
  return Promise.race([run, late]).finally(() => clearTimeout(timer));
}

test('shutdown() in the same tick as run() stops every worker (the stop comes while run() opens its listener)', async () => {
  const workers = await create();
  const running = workers.run();
  workers.shutdown();
  await within(running, 15_000);
  for (const w of everyWorker(workers)) assert.equal(w.getState(), 'STOPPED', `${w.options.taskQueue} stopped`);
});

test('shutdown() a moment into run() stops every worker', async () => {
  const workers = await create();
  const running = workers.run();
  await new Promise((r) => setTimeout(r, 300));
  workers.shutdown();
  await within(running, 15_000);
  for (const w of everyWorker(workers)) assert.equal(w.getState(), 'STOPPED', `${w.options.taskQueue} stopped`);
});

test('a shutdown() before run() is kept: run() then stops at once instead of polling', async () => {
  const workers = await create();
  workers.shutdown();
  await within(workers.run(), 15_000);
  for (const w of everyWorker(workers)) assert.equal(w.getState(), 'STOPPED', `${w.options.taskQueue} stopped`);
});
