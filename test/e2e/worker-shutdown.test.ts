// Graceful shutdown: SIGTERM stops a worker from polling but lets the in-flight provider call
// finish and record its outcome, so a deploy never turns a submit into an unknown outcome.
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
  e = await startE2E('shutdown', { WORKER_SHUTDOWN_GRACE_MS: '15000' }, { worker: false });
});
after(async () => {
  await child?.stop('SIGKILL', 1000);
  await e?.close();
});

test('SIGTERM during a provider call: readiness fails at once, the call finishes and is recorded, the worker exits 0, the task succeeds', async () => {
  const lines: string[] = [];
  const opsPort = await freePort();
  const env = { ...configToEnv(e.config), DATABASE_URL: e.tdb.url, WORKER_METRICS_PORT: String(opsPort), LOG_LEVEL: 'info' };
  const ops = (path: string) => fetch(`http://127.0.0.1:${opsPort}${path}`, { signal: AbortSignal.timeout(2_000) });
  child = startNodeProcess('draining-worker', 'workers/main.ts', env, { log: (l) => lines.push(l) });
  e.sim.sim.setFaults({ submit: 'answer_after_ms', submit_delay_ms: 2500, submit_fault_count: 1 });
  const taskId = await e.createTask('drain-1');
  const attempt = await eventually(
    async () => {
      const [a] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
      return a?.submit_state === 'SUBMITTING' ? a : undefined;
    },
    60_000,
    50,
  );

  // One scrape shows ours and the Temporal SDK's own worker metrics.
  const exposition = await (await ops('/metrics')).text();
  assert.match(exposition, /^vidorch_worker_polling\{/m);
  assert.match(exposition, /^temporal_\w+/m, 'the SDK Core exporter is served beside our metrics');
  assert.equal((await ops('/readyz')).status, 200);

  const stopping = child.stop('SIGTERM', 20_000);
  // Not ready from the start of the shutdown, while the in-flight call still drains.
  const draining = await eventually(
    async () => {
      const res = await ops('/readyz').catch(() => null);
      return res?.status === 503 ? ((await res.json()) as { polling: string }) : undefined;
    },
    5_000,
    25,
  );
  assert.equal(draining.polling, 'draining');
  const [inFlight] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attempt.attempt_id));
  assert.equal(inFlight?.submit_state, 'SUBMITTING', 'readiness failed before the drain finished the call');
  await stopping;
  assert.equal(child.exitInfo?.code, 0, `worker exit: ${JSON.stringify(child.exitInfo)}\n${lines.slice(-10).join('\n')}`);
  const [after] = await e.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, attempt.attempt_id));
  assert.equal(after?.submit_state, 'SUBMITTED', 'the in-flight submit recorded its acceptance before exit');
  assert.equal(after?.unknown_since, null);

  e.worker = await startWorker(e.config, e.tdb.database);
  await e.waitForStatus(taskId, 'SUCCEEDED');
  assert.equal(e.sim.jobsFor(attempt.attempt_id), 1);
});
