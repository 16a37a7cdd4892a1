// Fault injection with a real process: a worker is SIGKILLed in the middle of the submit
// activity (the provider has the request; no answer has been recorded). Another worker takes
// over after the heartbeat timeout, finds the attempt in SUBMITTING, records the outcome as
// unknown and reconciles it: one provider job, one charge, SUCCEEDED.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { taskAttempt } from '../../db/schema';
import { startNodeProcess, type ManagedProcess } from '../../harness';
import { startE2E, type E2E } from '../support/e2e';
import { configToEnv, eventually, freePort, startWorker } from '../support/stack';

let e: E2E;
let child: ManagedProcess | null = null;

before(async () => {
  e = await startE2E('crash', { PROVIDER_HTTP_TIMEOUT_MS: '8000', UNKNOWN_PROOF_DELAY_MS: '60000' }, { worker: false });
});
after(async () => {
  await child?.stop('SIGKILL', 1000);
  await e?.close();
});

test('a worker SIGKILLed mid-submit: the retry never calls the provider again, the job is found and the task succeeds', async () => {
  const env = { ...configToEnv(e.config), DATABASE_URL: e.tdb.url, WORKER_METRICS_PORT: String(await freePort()), LOG_LEVEL: 'warn' };
  const lines: string[] = [];
  child = startNodeProcess('doomed-worker', 'workers/main.ts', env, { log: (l) => lines.push(l) });
  // The provider takes the request and answers late: the worker dies while waiting.
  e.sim.sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 4000, submit_fault_count: 1 });
  const taskId = await e.createTask('crash-1');

  const attempt = await eventually(
    async () => {
      const [a] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
      return a?.submit_state === 'SUBMITTING' ? a : undefined;
    },
    60_000,
    50,
  ).catch((err: unknown) => {
    throw new Error(`worker never reached the submit: ${(err as Error).message}\n${lines.slice(-20).join('\n')}`);
  });
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(e.sim.jobsFor(attempt.attempt_id), 1, 'the provider has the request');
  await child.stop('SIGKILL', 1000);
  assert.equal(child.exitInfo?.signal, 'SIGKILL');

  e.worker = await startWorker(e.config, e.tdb.database);
  const task = await e.waitForStatus(taskId, 'SUCCEEDED', 90_000);
  const path = task.transitions.map((t: { to: string }) => t.to);
  assert.ok(path.includes('SUBMIT_UNKNOWN'), `the retry recorded the unknown outcome: ${path.join(' → ')}`);
  assert.equal(e.sim.jobsFor(attempt.attempt_id), 1, 'still exactly one provider job');
  const attempts = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.equal(attempts.length, 1);
  const ledger = await e.ledgerOf(taskId);
  assert.equal(ledger['SETTLE'], '4.500000');
});
