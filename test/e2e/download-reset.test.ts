// Fault injection with a real process: a worker (workers/main.ts) with several tasks in flight
// while output downloads are cut mid-body (the simulator's 'reset_mid_body' output fault). The
// cut rescues fail and are retried; the worker stays up, every task ends SUCCEEDED, and the
// provider saw exactly one job per task.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq, inArray } from 'drizzle-orm';
import { taskAttempt } from '../../db/schema';
import { startNodeProcess, type ManagedProcess } from '../../harness';
import { startE2E, type E2E } from '../support/e2e';
import { configToEnv, freePort } from '../support/stack';

const TASKS = 6;
const CUTS = 3;

let e: E2E;
let child: ManagedProcess | null = null;

before(async () => {
  e = await startE2E('download-reset', {}, { worker: false, generationMs: 1_500 });
});
after(async () => {
  await child?.stop('SIGKILL', 1000);
  await e?.close();
});

test('downloads reset mid-body while submits are in flight: the worker lives, every task SUCCEEDED, one provider job each', { timeout: 180_000 }, async () => {
  const env = { ...configToEnv(e.config), DATABASE_URL: e.tdb.url, WORKER_METRICS_PORT: String(await freePort()), LOG_LEVEL: 'warn' };
  const lines: string[] = [];
  child = startNodeProcess('download-worker', 'workers/main.ts', env, { log: (l) => lines.push(l) });
  e.sim.sim.setFaults({ output: 'reset_mid_body', output_fault_count: CUTS });

  const ids: string[] = [];
  for (let i = 0; i < TASKS; i += 1) ids.push(await e.createTask(`reset-${i}`));
  // Fail as soon as the worker dies (what a cut download did before the fix), not at the timeout.
  let done = false;
  const died = child.exited.then((info) => {
    if (!done) throw new Error(`worker exited (${JSON.stringify(info)}):\n${lines.slice(-20).join('\n')}`);
  });
  await Promise.race([Promise.all(ids.map((id) => e.waitForStatus(id, 'SUCCEEDED', 150_000))), died]);
  done = true;

  assert.equal(child.exitInfo, undefined, 'the worker is still running');
  assert.equal(e.sim.sim.stats().output_reads >= TASKS + CUTS, true, 'the cut downloads were fetched again');
  const faults = (await (await fetch(`${e.sim.baseUrl}/_sim/faults`)).json()) as { output_fault_count?: number };
  assert.equal(faults.output_fault_count, 0, `all ${CUTS} cuts happened`);
  const attempts = await e.tdb.database.db.select().from(taskAttempt).where(inArray(taskAttempt.task_id, ids));
  assert.equal(attempts.length, TASKS, 'one attempt per task');
  for (const a of attempts) assert.equal(e.sim.jobsFor(a.attempt_id), 1, `one provider job for attempt ${a.attempt_id}`);
  const [first] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, ids[0]!));
  assert.equal(first?.submit_state, 'SUCCEEDED');
});
