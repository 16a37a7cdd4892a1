// A worker started while Temporal is down waits for it (retrying with backoff, saying so in its
// log) and starts polling once Temporal answers, instead of exiting at connect.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { startNodeProcess, startTemporal, type ManagedProcess, type TemporalProcess } from '../../harness';
import { startE2E, type E2E } from '../support/e2e';
import { configToEnv, eventually, freePort } from '../support/stack';

let e: E2E;
let child: ManagedProcess | null = null;
let temporal: TemporalProcess | null = null;

before(async () => {
  e = await startE2E('worker-start', {}, { worker: false });
});
after(async () => {
  await child?.stop('SIGKILL', 1000);
  await temporal?.stop('SIGTERM', 10_000);
  await e?.close();
});

test('a worker whose Temporal is down at start-up keeps retrying, then polls once Temporal is up; its operator listener says not ready, then ready, to the token holder only', async () => {
  const port = await freePort();
  const opsPort = await freePort();
  const token = 'worker-ops-token-0123456789';
  const ops = (path: string, auth = true) =>
    fetch(`http://127.0.0.1:${opsPort}${path}`, auth ? { headers: { authorization: `Bearer ${token}` } } : {}).catch(() => null);
  const lines: string[] = [];
  const env = {
    ...configToEnv(e.config),
    DATABASE_URL: e.tdb.url,
    TEMPORAL_ADDRESS: `127.0.0.1:${port}`,
    WORKER_METRICS_PORT: String(opsPort),
    OPS_BEARER_TOKEN: token,
    LOG_LEVEL: 'info',
  };
  child = startNodeProcess('patient-worker', 'workers/main.ts', env, { log: (l) => lines.push(l) });
  await eventually(async () => lines.filter((l) => l.includes('Temporal unreachable at start-up')).length >= 2 || undefined, 60_000, 100);
  assert.equal(child.exitInfo, undefined, 'still running while Temporal is down');
  const waiting = await ops('/readyz');
  assert.equal(waiting?.status, 503);
  assert.notEqual(((await waiting?.json()) as { polling: string }).polling, 'running');
  assert.equal((await ops('/metrics', false))?.status, 401, 'no token, no metrics');

  temporal = await startTemporal({ port, headless: true });
  await eventually(async () => lines.some((l) => l.includes('worker polling')) || undefined, 60_000, 100);
  assert.ok(
    lines.some((l) => l.includes('Temporal reachable; worker connected')),
    lines.slice(-5).join('\n'),
  );
  assert.equal(child.exitInfo, undefined);
  const ready = await ops('/readyz');
  assert.equal(ready?.status, 200);
  assert.deepEqual(((await ready?.json()) as { polling: string; region: string }).polling, 'running');
  const metrics = await (await ops('/metrics'))?.text();
  assert.match(metrics ?? '', /vidorch_worker_polling\{[^}]*\} 1/);
  assert.match(metrics ?? '', /vidorch_db_pool_clients\{[^}]*state="waiting"[^}]*\} 0/);
});
