// End to end against the real Temporal dev server, Postgres, the S3 server and the provider
// simulator: API → Postgres facts → workflow → provider → S3 → settled ledger.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, beforeEach, describe, test } from 'node:test';
import type { Client } from '@temporalio/client';
import { asc, eq } from 'drizzle-orm';
import { callbackInbox, creditAccount, taskTransition } from '../../db/schema';
import { compareMoney, addMoney } from '../../domain/money';
import { SA_PROVIDER, SA_TASK_STATUS, SA_TENANT_ID } from '../../workflows/definitions';
import { eventually, http } from '../support/stack';
import { defaultRequest, startE2E, type E2E } from '../support/e2e';

let e: E2E;
let api: E2E['api'];
let sim: E2E['sim'];
let client: Client;
let tenant: E2E['tenant'];
let tdb: E2E['tdb'];

before(async () => {
  e = await startE2E('e2e');
  ({ api, sim, client, tenant, tdb } = e);
});
after(async () => {
  await e?.close();
});
beforeEach(() => {
  sim.sim.clearFaults();
});

const request = defaultRequest;
const createTask = (key: string) => e.createTask(key);
const waitForStatus = (taskId: string, status: string) => e.waitForStatus(taskId, status);
const ledgerOf = (taskId: string) => e.ledgerOf(taskId);

describe('a task runs to SUCCEEDED with its video in S3 and a settled ledger', () => {
  test('callbacks on: SUCCEEDED, sha256 of the stored object matches, reserve = settle + release, transitions in order, search attributes visible', async () => {
    const taskId = await createTask('e2e-happy');
    const task = await waitForStatus(taskId, 'SUCCEEDED');

    // The object in S3 is the provider's video, byte for byte.
    const bytes = await fetch(task.output.download_url).then(async (r) => Buffer.from(await r.arrayBuffer()));
    assert.equal(createHash('sha256').update(bytes).digest('hex'), task.output.sha256);
    assert.equal(bytes.length, task.output.size_bytes);
    assert.equal(bytes.subarray(4, 8).toString('latin1'), 'ftyp');
    assert.equal(task.output.media.videoCodec, 'h264');
    // The thumbnail follows SUCCEEDED (made just after it): GET shows it once it exists.
    const thumbnailUrl = await eventually(async () => (await e.getTask(taskId)).output?.thumbnail_url ?? undefined, 20_000, 100);
    const jpeg = await fetch(thumbnailUrl).then(async (r) => Buffer.from(await r.arrayBuffer()));
    assert.equal(jpeg.subarray(0, 2).toString('hex'), 'ffd8', 'the thumbnail is a JPEG');

    // Ledger: one reserve, one settle, one release; they balance; the account holds nothing back.
    const ledger = await ledgerOf(taskId);
    assert.deepEqual(Object.keys(ledger).sort(), ['RELEASE', 'RESERVE', 'SETTLE']);
    assert.equal(compareMoney(addMoney(ledger['SETTLE']!, ledger['RELEASE']!), ledger['RESERVE']!), 0);
    assert.equal(ledger['SETTLE'], task.settled_amount);
    const [acct] = await tdb.database.db.select().from(creditAccount).where(eq(creditAccount.tenant_id, tenant.tenantId));
    assert.equal(acct?.reserved, '0.000000');

    // Transitions: every version once, in order, along the happy path.
    const transitions = await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(asc(taskTransition.to_version));
    assert.deepEqual(
      transitions.map((t) => t.to_version),
      transitions.map((_, i) => i),
    );
    const path = transitions.map((t) => t.to_status).filter((s) => s !== 'RUNNING');
    assert.deepEqual(path, ['QUEUED', 'DISPATCHING', 'SUBMITTING', 'SUBMITTED', 'PROVIDER_SUCCEEDED', 'FETCHING_OUTPUT', 'PROCESSING_MEDIA', 'SUCCEEDED']);

    // Search attributes: operators find the task by status, tenant and provider.
    const handle = client.workflow.getHandle(api.facade.workflowIdFor(taskId));
    await handle.result();
    const desc = await handle.describe();
    assert.equal(desc.typedSearchAttributes.get(SA_TASK_STATUS), 'SUCCEEDED');
    assert.equal(desc.typedSearchAttributes.get(SA_TENANT_ID), tenant.tenantId);
    assert.equal(desc.typedSearchAttributes.get(SA_PROVIDER), 'replicate');
    const found = await eventually(async () => {
      for await (const wf of client.workflow.list({ query: `TaskStatus = 'SUCCEEDED' AND TenantId = '${tenant.tenantId}'` })) {
        if (wf.workflowId === api.facade.workflowIdFor(taskId)) return true;
      }
      return undefined;
    }, 15_000);
    assert.equal(found, true);
  });

  test('callbacks off: polling alone takes the task to SUCCEEDED', async () => {
    sim.sim.setFaults({ callbacks: 'off' });
    const taskId = await createTask('e2e-polling');
    await waitForStatus(taskId, 'SUCCEEDED');
    const inbox = await tdb.database.db.select().from(callbackInbox).where(eq(callbackInbox.task_id, taskId));
    assert.ok(inbox.length > 0);
    assert.ok(
      inbox.every((r) => r.source === 'poll'),
      'every applied event came from a poll',
    );
  });

  test('one callback delivered three times is stored once and applied once', async () => {
    sim.sim.setFaults({ callback_duplicates: 2, status: 'error_5xx' }); // polls fail: callbacks alone drive it
    const taskId = await createTask('e2e-duplicates');
    await waitForStatus(taskId, 'SUCCEEDED');
    await sim.sim.webhooksIdle();
    const inbox = await tdb.database.db.select().from(callbackInbox).where(eq(callbackInbox.task_id, taskId));
    const ids = inbox.map((r) => r.provider_event_id);
    assert.equal(new Set(ids).size, ids.length, 'each webhook-id stored once');
    assert.ok(inbox.some((r) => r.event_type === 'succeeded'));
    const transitions = await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId));
    assert.equal(transitions.filter((t) => t.to_status === 'PROVIDER_SUCCEEDED').length, 1);
    assert.equal(Object.keys(await ledgerOf(taskId)).length, 3);
  });

  test('a failed generation releases the whole reservation and the workflow completes', async () => {
    const res = await http(api.baseUrl, 'POST', '/v1/tasks', {
      apiKey: tenant.apiKey,
      body: { ...request, prompt: 'this one breaks [sim:fail]' },
      headers: { 'idempotency-key': 'e2e-fail' },
    });
    const task = await waitForStatus(res.body.task_id, 'FAILED');
    assert.equal(task.failure.code, 'PROVIDER_FAILED');
    assert.deepEqual(await ledgerOf(res.body.task_id), { RESERVE: '4.500000', SETTLE: '0.000000', RELEASE: '4.500000' });
  });

  test('callbacks signed with a wrong key are refused and stored nowhere; polling still completes the task', async () => {
    sim.sim.setFaults({ callback_wrong_key: true });
    const taskId = await createTask('e2e-wrong-key');
    await waitForStatus(taskId, 'SUCCEEDED');
    await sim.sim.webhooksIdle();
    const inbox = await tdb.database.db.select().from(callbackInbox).where(eq(callbackInbox.task_id, taskId));
    assert.ok(inbox.length > 0);
    assert.ok(
      inbox.every((r) => r.source !== 'callback'),
      'no forged callback reached the inbox',
    );
    assert.ok(sim.sim.stats().webhooks_failed > 0, 'the simulator saw its deliveries refused');
  });

  test('the metrics tell callbacks from polls: callback lag is reported and the poll-fallback ratio is a share, per provider', async () => {
    await api.refreshFacts();
    const text = await fetch(`${api.opsUrl}/metrics`).then((r) => r.text());
    const lag = /vidorch_callback_lag_seconds\{provider="replicate",quantile="0.5"[^}]*\} ([0-9.e+-]+)/.exec(text);
    assert.ok(lag, 'callback lag p50 present after callback-driven tasks');
    const ratio = Number(/vidorch_poll_fallback_ratio\{provider="replicate"[^}]*\} ([0-9.e+-]+)/.exec(text)?.[1]);
    assert.ok(ratio > 0 && ratio < 1, `some tasks here completed by polling only, some by callback: ${ratio}`);
    assert.match(text, /vidorch_ledger_imbalance\{[^}]*\} 0/);
  });
});
