// Worker Versioning on the real dev server (docs/deploy.md, docs/decisions/0073-worker-versioning.md):
// two worker builds of one Worker Deployment. A task started while build 1 is current stays on
// build 1 after build 2 becomes current (the generation workflow is PINNED): every workflow task
// and every activity of its history ran on build 1's workers; a task created after the switch runs
// on build 2 only. The switch goes through the commands an operator runs (ops/deploy.ts).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Client } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { createInProcessWorkers, worldActivityDeps } from '../../harness/world';
import { describeDeployment, setCurrentVersion, setRampingVersion, type DeployTarget } from '../../ops/deploy';
import type { GenerationWorkers } from '../../workers/generation-worker';
import { startE2E, type E2E } from '../support/e2e';
import { eventually, installTestRuntime, testLogger, workflowBundle } from '../support/stack';

let e: E2E;
let connection: NativeConnection;
const workers: { w: GenerationWorkers; running: Promise<void> }[] = [];
let deploymentName: string;
let target: DeployTarget;

before(async () => {
  e = await startE2E('worker-versioning', {}, { worker: false });
  installTestRuntime();
  connection = await NativeConnection.connect({ address: e.config.TEMPORAL_ADDRESS });
  deploymentName = `vidorch-${e.config.TEMPORAL_TASK_QUEUE}`;
  target = { client: e.client, namespace: e.config.TEMPORAL_NAMESPACE, deploymentName, identity: 'operator:test' };
});
after(async () => {
  for (const { w } of workers) w.shutdown();
  await Promise.allSettled(workers.map(({ running }) => running));
  await connection?.close();
  await e?.close();
});

/** A worker process's Temporal workers, polling as `<deploymentName>`/`buildId`, identities `build-<id>…`. */
async function startBuild(buildId: string): Promise<void> {
  const w = await createInProcessWorkers(e.config, e.tdb.database, {
    connection,
    workflowBundle: await workflowBundle(),
    deps: worldActivityDeps(e.config, e.tdb.database, testLogger),
    extra: {
      identity: `build-${buildId}`,
      deployment: { useWorkerVersioning: true, version: { deploymentName, buildId }, defaultVersioningBehavior: 'PINNED' },
    },
  });
  workers.push({ w, running: w.run() });
}

/** Retried until the server has seen the build's pollers (a version exists once a worker of it polled). */
const settle = <T>(what: () => Promise<T>) =>
  eventually(
    () =>
      what().then(
        (v) => v ?? (true as T),
        () => undefined,
      ),
    30_000,
    250,
  );

/** Who completed each workflow task, and who ran each activity, in the task's whole history (every run). */
async function executors(client: Client, workflowId: string): Promise<{ workflowTasks: Set<string>; activities: Set<string>; buildIds: Set<string> }> {
  const workflowTasks = new Set<string>();
  const activities = new Set<string>();
  const buildIds = new Set<string>();
  let runId: string | undefined = (await client.workflow.getHandle(workflowId).describe()).raw.workflowExecutionInfo?.firstRunId ?? undefined;
  for (;;) {
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    let next: string | undefined;
    for (const ev of history.events ?? []) {
      const wft = ev.workflowTaskCompletedEventAttributes;
      if (wft?.identity) workflowTasks.add(wft.identity);
      const buildId = wft?.deploymentVersion?.buildId;
      if (buildId) buildIds.add(buildId);
      const act = ev.activityTaskStartedEventAttributes;
      if (act?.identity) activities.add(act.identity);
      next = ev.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId ?? next;
    }
    if (!next) break;
    runId = next;
  }
  return { workflowTasks, activities, buildIds };
}

const onBuild = (identities: Set<string>, buildId: string) => [...identities].every((id) => id.startsWith(`build-${buildId}`));

test('a task started on build 1 finishes on build 1 after build 2 becomes current; a task created after the switch runs on build 2', async () => {
  await startBuild('1');
  await settle(() => setCurrentVersion(target, '1'));
  // The first task waits at its provider until the switch is done: no callbacks, its status reads fail (and are retried).
  e.sim.sim.setFaults({ callbacks: 'off', status: 'error_5xx' });
  const first = await e.createTask('versioning-first');
  await eventually(async () => (['SUBMITTED', 'RUNNING'].includes((await e.getTask(first)).status) ? true : undefined), 30_000);
  const firstId = e.api.facade.workflowIdFor(first);

  // The rollout: build 2's workers start, take a ramp, then become current.
  await startBuild('2');
  await settle(() => setRampingVersion(target, '2', 25));
  await settle(() => setCurrentVersion(target, '2'));
  const state = await describeDeployment(e.client, target.namespace, deploymentName);
  assert.equal(state?.current, '2');
  assert.equal(state?.ramping, null, 'making a build current ends its ramp');
  assert.ok(['SUBMITTED', 'RUNNING'].includes((await e.getTask(first)).status), 'the first task is still at its provider');

  e.sim.sim.clearFaults();
  const second = await e.createTask('versioning-second');
  await e.waitForStatus(first, 'SUCCEEDED', 60_000);
  await e.waitForStatus(second, 'SUCCEEDED', 60_000);

  const a = await executors(e.client, firstId);
  assert.ok(a.workflowTasks.size > 0 && a.activities.size > 0);
  assert.ok(onBuild(a.workflowTasks, '1'), `the first task's workflow tasks ran on build 1 only: ${[...a.workflowTasks].join(', ')}`);
  assert.ok(onBuild(a.activities, '1'), `the first task's activities ran on build 1 only: ${[...a.activities].join(', ')}`);
  assert.deepEqual([...a.buildIds], ['1']);
  const b = await executors(e.client, e.api.facade.workflowIdFor(second));
  assert.ok(onBuild(b.workflowTasks, '2'), `the second task's workflow tasks ran on build 2 only: ${[...b.workflowTasks].join(', ')}`);
  assert.ok(onBuild(b.activities, '2'), `the second task's activities ran on build 2 only: ${[...b.activities].join(', ')}`);

  // The server's own record: pinned, to the version that started it.
  const info = (await e.client.workflow.getHandle(firstId).describe()).raw.workflowExecutionInfo?.versioningInfo;
  assert.equal(info?.behavior, 1, 'VERSIONING_BEHAVIOR_PINNED');
  assert.equal(info?.deploymentVersion?.buildId, '1');
  assert.ok(Object.keys(await e.ledgerOf(first)).length > 0 && Object.keys(await e.ledgerOf(second)).length > 0, 'both tasks settled');
});
