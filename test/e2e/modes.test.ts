// One test per row of docs/modes.md: what the API admits (create, read, cancel, callback), what
// /readyz says, and what the workflows do — paused steps wait durably (ModePaused, retried by
// Temporal) and carry on by themselves when the mode allows.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { callbackInbox, creditLedger, taskAttempt } from '../../db/schema';
import { http, eventually } from '../support/stack';
import { startModesStack, type ModesStack } from '../ops/support';

let s: ModesStack;
before(async () => {
  s = await startModesStack('modes', {}, { generationMs: 2_500 });
});
after(async () => {
  await s?.close();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** The detailed readiness, on the API's operator listener. */
const readyz = () => http(s.opsUrl, 'GET', '/readyz');
const cancel = (id: string) => s.cancel(id);
const list = () => http(s.apiUrl, 'GET', '/v1/tasks?limit=5', { apiKey: s.tenant.apiKey });
const attemptsOf = (id: string) => s.tdb.database.db.select().from(taskAttempt).where(eq(taskAttempt.task_id, id));
const ledgerOf = async (id: string) =>
  Object.fromEntries((await s.tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, id))).map((r) => [r.entry_type, r.amount]));
const callbackRows = (id: string) =>
  s.tdb.database.db
    .select()
    .from(callbackInbox)
    .where(and(eq(callbackInbox.task_id, id), eq(callbackInbox.source, 'callback')));
/** Waits until the task's provider job exists (the submit happened). */
const submitted = (id: string) =>
  eventually(async () => {
    const [a] = await attemptsOf(id);
    return a?.provider_job_id ? a : undefined;
  }, 30_000);

function assert503(res: { status: number; headers: Headers; body: any }, mode: string) {
  assert.equal(res.status, 503, JSON.stringify(res.body));
  assert.ok(res.headers.get('retry-after'), 'Retry-After is set');
  assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/);
  assert.match(res.body.detail, new RegExp(mode));
}

async function expectReady(mode: string, ready: boolean) {
  const r = await readyz();
  assert.equal(r.status, ready ? 200 : 503, JSON.stringify(r.body));
  // The public port answers the same, and says nothing more.
  const pub = await http(s.apiUrl, 'GET', '/readyz');
  assert.equal(pub.status, r.status);
  assert.deepEqual(pub.body, { status: ready ? 'ready' : 'not_ready' });
  assert.equal(r.body.mode, mode);
  assert.equal(r.body.admits.create, ready);
  return r.body;
}

async function runsLikeNormal(mode: 'NORMAL' | 'DEGRADED_NOTIFY' | 'DEGRADED_PROVIDER') {
  await s.setMode(mode);
  try {
    const body = await expectReady(mode, true);
    assert.deepEqual(body.admits, { create: true, read: true, cancel: true, callback: 'inbox' });
    const id = await s.createTask(`${mode}-1`);
    const task = await s.waitForStatus(id, 'SUCCEEDED', 60_000);
    assert.equal(task.ledger.length, 3, 'reserve, settle, release');
    assert.equal((await callbackRows(id)).length >= 1, true, 'the callback went to the inbox');
    assert.equal((await list()).status, 200);
  } finally {
    await s.setMode('NORMAL');
  }
}

test('NORMAL: creates, reads, cancels and callbacks are admitted, /readyz is 200, a task runs to SUCCEEDED', () => runsLikeNormal('NORMAL'));

// What the mode sheds is proved elsewhere: webhook deliveries kept, counted and sent after in
// test/e2e/webhooks-notify.test.ts; live events told to poll in test/e2e/events.test.ts "DEGRADED_NOTIFY: …".
test('DEGRADED_NOTIFY: tasks, callbacks, reads and provider calls run as in NORMAL: a task runs to SUCCEEDED', () => runsLikeNormal('DEGRADED_NOTIFY'));

// What the mode closes (a provider whose breaker is not closed, or trips at the lower failure
// rate) is proved at the claim in test/activities/provider-guard.test.ts "DEGRADED_PROVIDER closes…".
test('DEGRADED_PROVIDER: a healthy provider keeps taking submits: a task runs to SUCCEEDED', () => runsLikeNormal('DEGRADED_PROVIDER'));

test('QUEUE_ONLY: creates are accepted and wait durably without a provider job, then run when the mode allows', async () => {
  await s.setMode('QUEUE_ONLY');
  let reopenedAt = 0;
  try {
    await expectReady('QUEUE_ONLY', true);
    const id = await s.createTask('queue-only-1');
    await sleep(3_000);
    const waiting = await s.getTask(id);
    assert.equal(waiting.status, 'DISPATCHING');
    assert.equal((await attemptsOf(id)).length, 0, 'no attempt was prepared, so no provider job exists');
    // The wait is Temporal's retry loop on a typed, retryable failure.
    const d = await s.client.workflow.getHandle(`task-${id}`).describe();
    const pending = d.raw.pendingActivities?.[0];
    assert.equal(pending?.activityType?.name, 'prepareAttempt');
    assert.equal(pending?.lastFailure?.applicationFailureInfo?.type, 'ModePaused');
    assert.match(pending?.lastFailure?.message ?? '', /QUEUE_ONLY/);

    await s.setMode('NORMAL');
    reopenedAt = Date.now();
    const done = await s.waitForStatus(id, 'SUCCEEDED', 60_000);
    const submitting = done.transitions.find((t: { to: string }) => t.to === 'SUBMITTING');
    assert.ok(new Date(submitting.at).getTime() >= reopenedAt - 1_000, 'the attempt was prepared only after the mode allowed it');
  } finally {
    await s.setMode('NORMAL');
  }
});

test('RECONCILE_ONLY: creates 503, no new submits, while a task at the provider is polled, rescued and settled, and cancels still work', async () => {
  try {
    const inflight = await s.createTask('reconcile-inflight');
    await submitted(inflight);
    await s.setMode('QUEUE_ONLY');
    const held = await s.createTask('reconcile-held');
    await s.setMode('RECONCILE_ONLY');

    assert503(await s.create('reconcile-new'), 'RECONCILE_ONLY');
    const body = await expectReady('RECONCILE_ONLY', false);
    assert.deepEqual(body.admits, { create: false, read: true, cancel: true, callback: 'inbox' });
    assert.ok(body.reasons.some((r: string) => /RECONCILE_ONLY/.test(r)));

    const done = await s.waitForStatus(inflight, 'SUCCEEDED', 60_000);
    assert.ok(done.output?.download_url, 'the output was rescued into storage');
    assert.ok((await ledgerOf(inflight))['SETTLE'], 'settled');
    assert.equal((await attemptsOf(held)).length, 0, 'the held task got no provider job');
    assert.equal((await s.getTask(held)).status, 'DISPATCHING');

    assert.equal((await cancel(held)).status, 202);
    await s.waitForStatus(held, 'CANCELLED', 10_000);
    const heldLedger = await ledgerOf(held);
    assert.equal(heldLedger['RELEASE'], heldLedger['RESERVE'], 'the whole reservation released');
  } finally {
    await s.setMode('NORMAL');
  }
});

test('READ_ONLY: reads only; callbacks are spooled (2xx) and replayed into the inbox after the mode reopens; the task then succeeds', async () => {
  try {
    const id = await s.createTask('read-only-1');
    await submitted(id);
    const other = await s.createTask('read-only-2');
    await s.setMode('READ_ONLY');
    const inboxBefore = (await callbackRows(id)).length;

    assert503(await s.create('read-only-new'), 'READ_ONLY');
    assert503(await cancel(other), 'READ_ONLY');
    assert.equal((await list()).status, 200);
    assert.ok((await s.getTask(id)).status);
    const body = await expectReady('READ_ONLY', false);
    assert.deepEqual(body.admits, { create: false, read: true, cancel: false, callback: 'spool' });

    // The provider finishes and calls back: the callback is acknowledged and spooled, not lost.
    await eventually(async () => ((await s.ctx.spool.pending()) >= 1 ? true : undefined), 30_000);
    assert.equal((await callbackRows(id)).length, inboxBefore, 'nothing more was written to the inbox');
    await sleep(1_500);
    assert.notEqual((await s.getTask(id)).status, 'SUCCEEDED', 'workflow fact steps wait');

    await s.setMode('NORMAL');
    await s.waitForStatus(id, 'SUCCEEDED', 60_000);
    await s.waitForStatus(other, 'SUCCEEDED', 60_000);
    await eventually(async () => ((await s.ctx.spool.pending()) === 0 ? true : undefined), 10_000);
    assert.ok((await callbackRows(id)).length > inboxBefore, 'the spooled callback was replayed into the inbox');
  } finally {
    await s.setMode('NORMAL');
  }
});

test('MAINTENANCE: reads, creates and cancels answer 503; callbacks are still spooled and the task finishes after reopening', async () => {
  try {
    const id = await s.createTask('maintenance-1');
    await submitted(id);
    await s.setMode('MAINTENANCE');
    const inboxBefore = (await callbackRows(id)).length;

    assert503(await http(s.apiUrl, 'GET', `/v1/tasks/${id}`, { apiKey: s.tenant.apiKey }), 'MAINTENANCE');
    assert503(await list(), 'MAINTENANCE');
    assert503(await s.create('maintenance-new'), 'MAINTENANCE');
    assert503(await cancel(id), 'MAINTENANCE');
    const body = await expectReady('MAINTENANCE', false);
    assert.deepEqual(body.admits, { create: false, read: false, cancel: false, callback: 'spool' });
    await eventually(async () => ((await s.ctx.spool.pending()) >= 1 ? true : undefined), 30_000);

    await s.setMode('NORMAL');
    await s.waitForStatus(id, 'SUCCEEDED', 60_000);
    assert.ok((await callbackRows(id)).length > inboxBefore, 'the spooled callback was replayed');
  } finally {
    await s.setMode('NORMAL');
  }
});
