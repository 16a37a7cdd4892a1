// `npm run record-histories [-- <scenario> ...]`: runs representative tasks through the real
// stack (Postgres, Temporal, S3, the provider simulator, the API and a worker, as the e2e tests
// do) and saves each workflow's full event history as test/fixtures/histories/<scenario>.json,
// in the JSON format of `temporal workflow show --output json`. CI replays every fixture against
// the current workflow code (test/workflows/replay.test.ts) to catch non-determinism before it
// ships. Re-record only to add a fixture for a new code path (docs/workflow-versioning.md),
// never to make a replay failure go away: an old history is what running workflows look like.
//
// Uses TEMPORAL_ADDRESS and S3_ENDPOINT when both are set; otherwise starts a throwaway
// Temporal dev server and S3 server on free ports, the way `npm test` does.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import { loadConfig } from '../config/env';
import { setMode } from '../db/modes';
import { providerControl } from '../db/schema';
import { factsQuery } from '../workflows/definitions';
import { bundleWorkflows } from '../workers/generation-worker';
import { startE2E, type E2E } from '../test/support/e2e';
import { eventually, http } from '../test/support/stack';
import { historyToJson } from '../test/workflows/history-json';
import { HISTORIES_DIR, RECORDED_SCENARIOS, fixturePath, ranActivities, type ScenarioName } from '../test/workflows/support';
import { fileLogger, formatMs, freePorts, readToolPaths, startS3, startTemporal, type ManagedProcess } from '../harness';

interface Scenario {
  /** Settings for this scenario's API and worker, on top of BASE_ENV. */
  readonly env?: Record<string, string>;
  /** The simulator's generation time. */
  readonly generationMs?: number;
  /** Drives one task to its end; returns its id and the status its workflow must end with. */
  run(e: E2E): Promise<{ taskId: string; status: string }>;
}

/** Polls a second apart: a few poll cycles per history keeps the fixtures small. */
const BASE_ENV = { POLL_INITIAL_MS: '1000', POLL_MAX_MS: '2000' };

const SCENARIOS: Record<ScenarioName, Scenario> = {
  'happy-path': {
    async run(e) {
      const taskId = await e.createTask('rec-happy');
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED')).status };
    },
  },
  'polling-only': {
    async run(e) {
      e.sim.sim.setFaults({ callbacks: 'off' });
      const taskId = await e.createTask('rec-polling');
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED')).status };
    },
  },
  'polling-on-poll-queue': {
    async run(e) {
      e.sim.sim.setFaults({ callbacks: 'off' });
      const taskId = await e.createTask('rec-poll-queue');
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED')).status };
    },
  },
  'unknown-outcome-resolved': {
    env: { PROVIDER_HTTP_TIMEOUT_MS: '700', UNKNOWN_PROOF_DELAY_MS: '1500' },
    async run(e) {
      // Callbacks off, so the job is found by listing with its correlation token, not by a callback.
      e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1, callbacks: 'off' });
      const taskId = await e.createTask('rec-unknown');
      const task = await e.waitForStatus(taskId, 'SUCCEEDED');
      assert.ok(
        task.transitions.some((t: { to: string }) => t.to === 'SUBMIT_UNKNOWN'),
        'went through SUBMIT_UNKNOWN',
      );
      return { taskId, status: task.status };
    },
  },
  'rejected-then-retried': {
    async run(e) {
      e.sim.sim.setFaults({ submit: 'rate_limit', retry_after_s: 1, submit_fault_count: 1 });
      const taskId = await e.createTask('rec-429');
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED')).status };
    },
  },
  'cancel-while-running': {
    generationMs: 3_000,
    async run(e) {
      const taskId = await e.createTask('rec-cancel');
      await e.waitForStatus(taskId, 'RUNNING');
      const res = await http(e.api.baseUrl, 'POST', `/v1/tasks/${taskId}/cancel`, { apiKey: e.tenant.apiKey });
      assert.equal(res.status, 202, JSON.stringify(res.body));
      return { taskId, status: (await e.waitForStatus(taskId, 'CANCELLED')).status };
    },
  },
  'manual-review-resolved': {
    env: { PROVIDER_HTTP_TIMEOUT_MS: '700', UNKNOWN_PROOF_DELAY_MS: '1000', UNKNOWN_OUTCOME_DEADLINE_MS: '1500' },
    async run(e) {
      e.sim.sim.setFaults({ submit: 'error_5xx_before_accept', submit_fault_count: 1, list: 'error_5xx', callbacks: 'off' });
      const taskId = await e.createTask('rec-review');
      await e.waitForStatus(taskId, 'MANUAL_REVIEW');
      const handle = e.client.workflow.getHandle(e.api.facade.workflowIdFor(taskId));
      await eventually(async () => ((await handle.query(factsQuery))?.status === 'MANUAL_REVIEW' ? true : undefined));
      e.sim.sim.clearFaults();
      // An operator's typo first: the validator accepts it, the activity refuses it (no such job).
      await assert.rejects(
        e.api.facade.resolveReview(taskId, { kind: 'bind-job', operator: 'ops-rec', reason: 'typo in the job id', providerJobId: 'no-such-job' }),
        WorkflowUpdateFailedError,
      );
      await e.api.facade.resolveReview(taskId, { kind: 'not-submitted', operator: 'ops-rec', reason: 'provider console shows nothing' });
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED')).status };
    },
  },
  'slot-queue-wait': {
    generationMs: 3_000,
    env: { BULKHEAD_RAMP_MS: '0' },
    async run(e) {
      // One slot at the provider: the first task holds it, the recorded one waits for the grant.
      await e.tdb.database.db
        .insert(providerControl)
        .values({ provider: 'replicate', max_in_flight: 1 })
        .onConflictDoUpdate({ target: providerControl.provider, set: { max_in_flight: 1 } });
      const holder = await e.createTask('rec-slot-holder');
      await e.waitForStatus(holder, 'RUNNING');
      const taskId = await e.createTask('rec-slot-waiter');
      await eventually(async () => ((await e.getTask(taskId)).queue ? true : undefined));
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED', 60_000)).status };
    },
  },
  'review-late-webhook': {
    env: { PROVIDER_HTTP_TIMEOUT_MS: '700', UNKNOWN_PROOF_DELAY_MS: '1000', UNKNOWN_OUTCOME_DEADLINE_MS: '1500' },
    async run(e) {
      // The lookups fail and the webhooks come late: the task parks, then the webhook moves it on.
      e.sim.sim.setFaults({ submit: 'accept_then_hang', submit_fault_count: 1, list: 'error_5xx', callback_delay_ms: 4000 });
      const taskId = await e.createTask('rec-review-late');
      await e.waitForStatus(taskId, 'MANUAL_REVIEW');
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED', 60_000)).status };
    },
  },
  'lean-happy-path': {
    async run(e) {
      const taskId = await e.createTask('rec-lean-happy');
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED')).status };
    },
  },
  'lean-polling': {
    async run(e) {
      e.sim.sim.setFaults({ callbacks: 'off' });
      const taskId = await e.createTask('rec-lean-polling');
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED')).status };
    },
  },
  'waits-in-retries': {
    generationMs: 6_000,
    async run(e) {
      e.sim.sim.setFaults({ callbacks: 'off' });
      const taskId = await e.createTask('rec-waits-in-retries');
      return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED', 60_000)).status };
    },
  },
  'wait-ended-by-wake': {
    generationMs: 600_000,
    env: { POLL_INITIAL_MS: '1000', POLL_MAX_MS: '1000' },
    async run(e) {
      e.sim.sim.setFaults({ callbacks: 'off' });
      const taskId = await e.createTask('rec-wait-ended-by-wake');
      const handle = e.client.workflow.getHandle(e.api.facade.workflowIdFor(taskId));
      // A few reads retried in Temporal first, then the cancel's wake.
      await eventually(async () => {
        const wait = ((await handle.describe()).raw.pendingActivities ?? []).find((a) => a.activityType?.name === 'awaitProviderChange');
        return (wait?.attempt ?? 0) >= 3 ? true : undefined;
      }, 60_000);
      const cancel = await e.cancelTask(taskId);
      assert.ok(cancel.status < 300, `cancel answered ${cancel.status}`);
      return { taskId, status: (await e.waitForStatus(taskId, 'CANCELLED', 60_000)).status };
    },
  },
  'local-step-falls-back': {
    async run(e) {
      const scope = { scope: e.config.FENCE_SCOPE, actor: 'record-histories' };
      await setMode(e.tdb.database.db, { ...scope, mode: 'QUEUE_ONLY', reason: 'recording a paused prepare' });
      try {
        const taskId = await e.createTask('rec-local-fallback');
        await eventually(async () => ((await e.getTask(taskId)).status === 'DISPATCHING' ? true : undefined));
        // A few ModePaused retries of the regular prepareAttempt.
        await new Promise((r) => setTimeout(r, 2_000));
        await setMode(e.tdb.database.db, { ...scope, mode: 'NORMAL', reason: 'recorded' });
        return { taskId, status: (await e.waitForStatus(taskId, 'SUCCEEDED', 60_000)).status };
      } finally {
        await setMode(e.tdb.database.db, { ...scope, mode: 'NORMAL', reason: 'recorded' });
      }
    },
  },
};

function say(msg: string): void {
  process.stdout.write(`record-histories: ${msg}\n`);
}

/** A throwaway Temporal dev server and S3 server, unless the environment names running ones. */
async function ensureServices(): Promise<(keepLogs: boolean) => Promise<void>> {
  if (process.env['TEMPORAL_ADDRESS'] && process.env['S3_ENDPOINT']) {
    say(`using temporal ${process.env['TEMPORAL_ADDRESS']}, s3 ${process.env['S3_ENDPOINT']}`);
    return async () => undefined;
  }
  const config = loadConfig(process.env);
  const tools = readToolPaths();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vidorch-record-'));
  const [temporalPort, s3Port] = (await freePorts(2)) as [number, number];
  const temporalLog = fileLogger(path.join(dir, 'temporal.log'));
  const s3Log = fileLogger(path.join(dir, 's3.log'));
  const started: ManagedProcess[] = [];
  const stop = async (keepLogs: boolean) => {
    await Promise.all(started.map((p) => p.stop('SIGTERM', 5_000)));
    await Promise.all([temporalLog.close(), s3Log.close()]);
    if (keepLogs) say(`server logs kept in ${dir}`);
    else fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    const temporal = await startTemporal({ port: temporalPort, headless: true, log: temporalLog, temporalPath: tools.temporal });
    started.push(temporal);
    const s3 = await startS3({
      port: s3Port,
      dataDir: path.join(dir, 's3'),
      accessKey: config.S3_ACCESS_KEY_ID,
      secretKey: config.S3_SECRET_ACCESS_KEY,
      buckets: [config.S3_BUCKET_OUTPUTS, `${config.S3_BUCKET_OUTPUTS}-fallback`],
      log: s3Log,
      versitygwPath: tools.versitygw,
    });
    started.push(s3);
    process.env['TEMPORAL_ADDRESS'] = temporal.address;
    process.env['S3_ENDPOINT'] = s3.endpoint;
    say(`started temporal ${temporal.address}, s3 ${s3.endpoint}`);
    return stop;
  } catch (err) {
    await stop(true);
    throw err;
  }
}

async function record(name: ScenarioName, workflowBundle: Awaited<ReturnType<typeof bundleWorkflows>>): Promise<void> {
  const scenario = SCENARIOS[name];
  const t0 = Date.now();
  const e = await startE2E(`rec_${name.replaceAll('-', '_')}`, { ...BASE_ENV, ...scenario.env }, { generationMs: scenario.generationMs ?? 400 });
  try {
    const { taskId, status } = await scenario.run(e);
    const handle = e.client.workflow.getHandle(e.api.facade.workflowIdFor(taskId));
    const result = (await handle.result()) as { status: string };
    assert.equal(result.status, status, `${name}: the workflow ended ${result.status}, the task ${status}`);
    const history = await handle.fetchHistory();
    const ran = ranActivities(history);
    for (const a of RECORDED_SCENARIOS[name].activities) assert.ok(ran.has(a), `${name}: the history has no ${a} activity`);
    // A fixture that does not replay against the code that made it is a recorder bug.
    await Worker.runReplayHistory({ workflowBundle, replayName: `record-${name}` }, history, `record-${name}`);
    // One event per line: small, and a re-recording diffs event by event.
    const { events } = JSON.parse(historyToJson(history)) as { events: unknown[] };
    const json = `{"events": [\n${events.map((ev) => JSON.stringify(ev)).join(',\n')}\n]}\n`;
    fs.writeFileSync(fixturePath(name), json);
    say(`${name}: ${status}, ${history.events?.length ?? 0} events, ${(json.length / 1024).toFixed(1)} KiB in ${formatMs(Date.now() - t0)}`);
  } finally {
    await e.close();
  }
}

async function main(): Promise<number> {
  const wanted = process.argv.slice(2).filter((a) => !a.startsWith('-'));
  const names = Object.keys(SCENARIOS) as ScenarioName[];
  const unknown = wanted.filter((w) => !names.includes(w as ScenarioName));
  if (unknown.length) {
    console.error(`record-histories: unknown scenario ${unknown.join(', ')}; known: ${names.join(', ')}`);
    return 2;
  }
  const selected = wanted.length ? (wanted as ScenarioName[]) : names;
  fs.mkdirSync(HISTORIES_DIR, { recursive: true });
  const stopServices = await ensureServices();
  let ok = false;
  try {
    const workflowBundle = await bundleWorkflows();
    for (const name of selected) await record(name, workflowBundle);
    say(`wrote ${selected.length} ${selected.length === 1 ? 'history' : 'histories'} to ${path.relative(process.cwd(), HISTORIES_DIR)}/`);
    ok = true;
    return 0;
  } finally {
    await stopServices(!ok);
  }
}

process.exitCode = await main();
