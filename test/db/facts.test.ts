// The fact source's own guarantees: unique constraints, CAS on status_version, the region
// fence, and an idempotent ledger. Real Postgres, one database for this file.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { and, eq, sql } from 'drizzle-orm';
import { holdFence, FenceRejectedError, type FenceToken } from '../../db/fence';
import { recordProviderEvent } from '../../db/inbox';
import { SettlementConflictError, settleReservation, reserveCredits } from '../../db/ledger';
import { creditAccount, creditLedger, generationTask, regionWriteFence, taskAttempt, taskTransition } from '../../db/schema';
import { casTaskStatus, casTaskStatusRow, InvalidTransitionError } from '../../db/tasks';
import type { ProviderJob } from '../../providers/types';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let tenantId: string;
const token = (): FenceToken => ({ scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 });

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId } = await createTestTenant(tdb.database, config, '50'));
});
after(async () => {
  await tdb?.drop();
});

async function insertTask(overrides: Partial<typeof generationTask.$inferInsert> = {}) {
  const taskId = randomUUID();
  await tdb.database.db.insert(generationTask).values({
    task_id: taskId,
    tenant_id: tenantId,
    project_id: tenantId,
    home_region: config.REGION,
    write_epoch: 1,
    status: 'QUEUED',
    idempotency_key: randomUUID(),
    reserved_amount: '5',
    request_hash: 'h',
    request: { model: 'minimax/video-01', prompt: 'p', duration_seconds: 2, resolution: '480p', priority: 0 },
    provider: 'replicate',
    provider_model: 'minimax/video-01',
    ...overrides,
  });
  return taskId;
}

const isUniqueViolation = (err: unknown) => (err as { cause?: { code?: string } }).cause?.code === '23505' || (err as { code?: string }).code === '23505';

describe('unique constraints', () => {
  test('(tenant_id, idempotency_key) admits one task', async () => {
    await insertTask({ idempotency_key: 'dup-key' });
    await assert.rejects(insertTask({ idempotency_key: 'dup-key' }), isUniqueViolation);
  });

  test('a ledger business key admits one row', async () => {
    const row = { tenant_id: tenantId, business_key: 'task:x:settle', entry_type: 'SETTLE', amount: '1', region: 'r', write_epoch: 1 };
    await tdb.database.db.insert(creditLedger).values({ entry_id: randomUUID(), ...row });
    await assert.rejects(tdb.database.db.insert(creditLedger).values({ entry_id: randomUUID(), ...row }), isUniqueViolation);
  });

  test('(task_id, attempt_no) and (provider, provider_job_id) admit one attempt', async () => {
    const taskId = await insertTask();
    const attempt = { task_id: taskId, attempt_no: 1, provider: 'replicate', provider_model: 'm', submit_state: 'PREPARED' as const, provider_job_id: 'job-1' };
    await tdb.database.db.insert(taskAttempt).values({ attempt_id: randomUUID(), ...attempt });
    await assert.rejects(tdb.database.db.insert(taskAttempt).values({ attempt_id: randomUUID(), ...attempt, provider_job_id: 'job-2' }), isUniqueViolation);
    await assert.rejects(tdb.database.db.insert(taskAttempt).values({ attempt_id: randomUUID(), ...attempt, attempt_no: 2 }), isUniqueViolation);
  });

  test('the inbox stores one row per (provider, dedupe key) and says when it was a duplicate', async () => {
    const job: ProviderJob = {
      jobId: 'job-x',
      state: 'running',
      rawStatus: 'processing',
      updatedAt: new Date(),
      outputUrl: null,
      error: null,
      correlationToken: null,
      metrics: null,
    };
    const event = {
      provider: 'replicate',
      job,
      providerEventId: 'msg_1',
      source: 'callback' as const,
      attemptId: null,
      taskId: null,
      receivedRegion: 'r',
      signatureValid: true,
      raw: {},
    };
    assert.ok(await recordProviderEvent(tdb.database.db, event));
    assert.equal(await recordProviderEvent(tdb.database.db, event), null);
  });
});

describe('compare-and-set on status_version', () => {
  test('a CAS with a stale status_version changes nothing and records no transition', async () => {
    const taskId = await insertTask();
    const first = await tdb.database.db.transaction(async (tx) => {
      await holdFence(tx, token());
      return casTaskStatus(tx, token(), { taskId, from: 'QUEUED', expectedVersion: 0, to: 'DISPATCHING', sourceEvent: 't', actor: 'test' });
    });
    assert.equal(first, 1);
    const stale = await tdb.database.db.transaction((tx) =>
      casTaskStatus(tx, token(), { taskId, from: 'QUEUED', expectedVersion: 0, to: 'CANCELLED', sourceEvent: 't', actor: 'test' }),
    );
    assert.equal(stale, null);
    const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
    assert.equal(task?.status, 'DISPATCHING');
    assert.equal(task?.status_version, 1);
    const transitions = await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId));
    assert.equal(transitions.length, 1);
  });

  test('a transition the state machine forbids throws before touching the row', async () => {
    const taskId = await insertTask({ status: 'SUCCEEDED', status_version: 7 });
    await assert.rejects(
      tdb.database.db.transaction((tx) =>
        casTaskStatus(tx, token(), { taskId, from: 'SUCCEEDED', expectedVersion: 7, to: 'RUNNING', sourceEvent: 't', actor: 'test' }),
      ),
      InvalidTransitionError,
    );
  });

  test('a writer holding an older epoch cannot overwrite a task written under a newer one, and records no transition', async () => {
    const taskId = await insertTask({ write_epoch: 5 });
    const v = await tdb.database.db.transaction((tx) =>
      casTaskStatus(tx, { ...token(), epoch: 4 }, { taskId, from: 'QUEUED', expectedVersion: 0, to: 'DISPATCHING', sourceEvent: 't', actor: 'test' }),
    );
    assert.equal(v, null);
    const [task] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
    assert.deepEqual([task?.status, task?.status_version, task?.write_epoch], ['QUEUED', 0, 5]);
    assert.deepEqual(await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId)), []);
    // The same epoch as the row's may write: the guard is write_epoch <= the token's.
    const same = await tdb.database.db.transaction((tx) =>
      casTaskStatus(tx, { ...token(), epoch: 5 }, { taskId, from: 'QUEUED', expectedVersion: 0, to: 'DISPATCHING', sourceEvent: 't', actor: 'test' }),
    );
    assert.equal(same, 1);
  });

  test('a won CAS writes exactly one transition row with the move, its cause and its fence token, and returns the task as stored', async () => {
    const taskId = await insertTask({ home_region: 'elsewhere', write_epoch: 0 });
    const attemptId = randomUUID();
    const cancelRequestedAt = new Date('2026-01-02T03:04:05.678Z');
    const row = await tdb.database.db.transaction((tx) =>
      casTaskStatusRow(tx, token(), {
        taskId,
        from: 'QUEUED',
        expectedVersion: 0,
        to: 'CANCELLED',
        sourceEvent: 'api.cancel',
        actor: 'tenant:t',
        attemptId,
        detail: { charge: '0', why: ['a', 1] },
        set: { failureCode: 'X', failureMessage: 'm'.repeat(2500), settledAmount: '0', cancelRequestedAt, activeAttemptId: attemptId },
      }),
    );
    const [stored] = await tdb.database.db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
    assert.deepEqual(row, stored, 'the returned row is the row a re-read finds');
    assert.equal(stored?.status, 'CANCELLED');
    assert.equal(stored?.status_version, 1);
    assert.deepEqual([stored?.home_region, stored?.write_epoch], [config.REGION, 1]);
    assert.ok(stored?.terminal_at instanceof Date, 'a terminal move stamps terminal_at');
    assert.equal(stored?.failure_message?.length, 2000);
    assert.deepEqual([stored?.failure_code, stored?.settled_amount, stored?.active_attempt_id], ['X', '0.000000', attemptId]);
    assert.equal(stored?.cancel_requested_at?.getTime(), cancelRequestedAt.getTime());
    const transitions = await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId));
    assert.equal(transitions.length, 1);
    const { transition_id, created_at, xact_id, ...t } = transitions[0]!;
    assert.ok(transition_id > 0 && created_at instanceof Date && xact_id);
    assert.deepEqual(t, {
      task_id: taskId,
      // Filled from the task row by a trigger (the tenant stream's index).
      tenant_id: stored?.tenant_id,
      from_status: 'QUEUED',
      to_status: 'CANCELLED',
      from_version: 0,
      to_version: 1,
      source_event: 'api.cancel',
      actor: 'tenant:t',
      attempt_id: attemptId,
      detail: { charge: '0', why: ['a', 1] },
      region: config.REGION,
      write_epoch: 1,
    });
    const bare = await tdb.database.db.transaction(async (tx) => {
      const other = await insertTask();
      await casTaskStatus(tx, token(), { taskId: other, from: 'QUEUED', expectedVersion: 0, to: 'DISPATCHING', sourceEvent: 't', actor: 'test' });
      return tx.select().from(taskTransition).where(eq(taskTransition.task_id, other));
    });
    assert.deepEqual(
      bare.map((r) => [r.attempt_id, r.detail]),
      [[null, null]],
      'no attempt and no detail are SQL NULLs',
    );
  });

  test('casTaskStatusRow returns null for a lost CAS', async () => {
    const taskId = await insertTask({ status: 'DISPATCHING', status_version: 3 });
    const row = await tdb.database.db.transaction((tx) =>
      casTaskStatusRow(tx, token(), { taskId, from: 'DISPATCHING', expectedVersion: 2, to: 'FAILED', sourceEvent: 't', actor: 'test' }),
    );
    assert.equal(row, null);
    assert.deepEqual(await tdb.database.db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId)), []);
  });
});

describe('region fence', () => {
  test('holdFence rejects a token of an inactive region or an old epoch', async () => {
    await assert.rejects(
      tdb.database.db.transaction((tx) => holdFence(tx, { ...token(), region: 'elsewhere' })),
      FenceRejectedError,
    );
    await assert.rejects(
      tdb.database.db.transaction((tx) => holdFence(tx, { ...token(), epoch: 0 })),
      FenceRejectedError,
    );
  });

  test('an epoch bump waits for a transaction holding the fence, and its writes commit under the old epoch first', async () => {
    const order: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const writer = tdb.database.db.transaction(async (tx) => {
      await holdFence(tx, token());
      order.push('writer holds fence');
      await held;
      order.push('writer commits');
    });
    await new Promise((r) => setTimeout(r, 50));
    const bump = tdb.database.db
      .update(regionWriteFence)
      .set({ write_epoch: sql`${regionWriteFence.write_epoch} + 1` })
      .where(eq(regionWriteFence.resource_scope, config.FENCE_SCOPE))
      .then(() => order.push('epoch bumped'));
    await new Promise((r) => setTimeout(r, 100));
    release();
    await Promise.all([writer, bump]);
    assert.deepEqual(order, ['writer holds fence', 'writer commits', 'epoch bumped']);
    await assert.rejects(
      tdb.database.db.transaction((tx) => holdFence(tx, token())),
      FenceRejectedError,
    );
    await tdb.database.db.update(regionWriteFence).set({ write_epoch: 1 }).where(eq(regionWriteFence.resource_scope, config.FENCE_SCOPE));
  });
});

describe('ledger', () => {
  test('a reservation over the available credits is refused and moves nothing', async () => {
    const { tenantId: t } = await createTestTenant(tdb.database, config, '3');
    const ok = await tdb.database.db.transaction((tx) => reserveCredits(tx, token(), { tenantId: t, taskId: randomUUID(), amount: '3.000001' }));
    assert.equal(ok, false);
    const [acct] = await tdb.database.db.select().from(creditAccount).where(eq(creditAccount.tenant_id, t));
    assert.equal(acct?.reserved, '0.000000');
    assert.equal(acct?.version, 1, 'only the opening grant moved the account');
  });

  test('settling twice writes one settle and one release and moves the account once', async () => {
    const { tenantId: t } = await createTestTenant(tdb.database, config, '10');
    const taskId = randomUUID();
    await tdb.database.db.transaction((tx) => reserveCredits(tx, token(), { tenantId: t, taskId, amount: '4' }));
    for (let i = 0; i < 2; i += 1) {
      await tdb.database.db.transaction((tx) => settleReservation(tx, token(), { tenantId: t, taskId, reserved: '4', charge: '2.5' }));
    }
    const rows = await tdb.database.db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId));
    assert.deepEqual(rows.map((r) => [r.entry_type, r.amount]).sort(), [
      ['RELEASE', '1.500000'],
      ['RESERVE', '4.000000'],
      ['SETTLE', '2.500000'],
    ]);
    const [acct] = await tdb.database.db.select().from(creditAccount).where(eq(creditAccount.tenant_id, t));
    assert.equal(acct?.balance, '7.500000');
    assert.equal(acct?.reserved, '0.000000');
    assert.equal(acct?.version, 3, 'the grant, the reserve and one settle each bump the account once');
  });

  test('a settlement other than the one the ledger carries is refused, naming both, and moves nothing; the same one again passes', async () => {
    const { tenantId: t } = await createTestTenant(tdb.database, config, '10');
    const taskId = randomUUID();
    await tdb.database.db.transaction((tx) => reserveCredits(tx, token(), { tenantId: t, taskId, amount: '4' }));
    await tdb.database.db.transaction((tx) => settleReservation(tx, token(), { tenantId: t, taskId, reserved: '4', charge: '0' }));
    await assert.rejects(
      tdb.database.db.transaction((tx) => settleReservation(tx, token(), { tenantId: t, taskId, reserved: '4', charge: '3' })),
      (err: Error) =>
        err instanceof SettlementConflictError &&
        /already closed with SETTLE 0\.000000 \/ RELEASE 4\.000000; a settlement charging 3 \(releasing 1\.000000\)/.test(err.message),
    );
    await tdb.database.db.transaction((tx) => settleReservation(tx, token(), { tenantId: t, taskId, reserved: '4', charge: '0.000' }));
    const [acct] = await tdb.database.db.select().from(creditAccount).where(eq(creditAccount.tenant_id, t));
    assert.deepEqual([acct?.balance, acct?.reserved, acct?.version], ['10.000000', '0.000000', 3]);
  });

  test('a second reserve for the same task is refused and moves nothing', async () => {
    const { tenantId: t } = await createTestTenant(tdb.database, config, '10');
    const taskId = randomUUID();
    assert.equal(await tdb.database.db.transaction((tx) => reserveCredits(tx, token(), { tenantId: t, taskId, amount: '4' })), true);
    await assert.rejects(
      tdb.database.db.transaction((tx) => reserveCredits(tx, token(), { tenantId: t, taskId, amount: '1' })),
      /already exists/,
    );
    const [acct] = await tdb.database.db.select().from(creditAccount).where(eq(creditAccount.tenant_id, t));
    assert.deepEqual([acct?.reserved, acct?.version], ['4.000000', 2]);
    // The account moves only with its own ledger row, even for a caller that swallows the error.
    const inside = await tdb.database.db.transaction(async (tx) => {
      await assert.rejects(reserveCredits(tx, token(), { tenantId: t, taskId, amount: '1' }), /already exists/);
      const [a] = await tx.select().from(creditAccount).where(eq(creditAccount.tenant_id, t));
      return [a?.reserved, a?.version];
    });
    assert.deepEqual(inside, ['4.000000', 2]);
  });

  test('a half-settled ledger (a settle row without its release) is refused: the settlement rolls back and the account stays', async () => {
    const { tenantId: t } = await createTestTenant(tdb.database, config, '10');
    const taskId = randomUUID();
    await tdb.database.db.transaction((tx) => reserveCredits(tx, token(), { tenantId: t, taskId, amount: '4' }));
    await tdb.database.db.insert(creditLedger).values({
      entry_id: randomUUID(),
      tenant_id: t,
      task_id: taskId,
      business_key: `task:${taskId}:settle`,
      entry_type: 'SETTLE',
      amount: '1',
      region: config.REGION,
      write_epoch: 1,
    });
    await assert.rejects(
      tdb.database.db.transaction((tx) => settleReservation(tx, token(), { tenantId: t, taskId, reserved: '4', charge: '2' })),
      /half settled/,
    );
    const release = await tdb.database.db
      .select()
      .from(creditLedger)
      .where(and(eq(creditLedger.task_id, taskId), eq(creditLedger.entry_type, 'RELEASE')));
    assert.deepEqual(release, []);
    const [acct] = await tdb.database.db.select().from(creditAccount).where(eq(creditAccount.tenant_id, t));
    assert.deepEqual([acct?.balance, acct?.reserved, acct?.version], ['10.000000', '4.000000', 2]);
    // The account moves only when both rows are new, even for a caller that swallows the error.
    let inside: unknown;
    await assert.rejects(
      tdb.database.db.transaction(async (tx) => {
        await assert.rejects(settleReservation(tx, token(), { tenantId: t, taskId, reserved: '4', charge: '2' }), /half settled/);
        const [a] = await tx.select().from(creditAccount).where(eq(creditAccount.tenant_id, t));
        inside = [a?.balance, a?.reserved, a?.version];
        tx.rollback();
      }),
    );
    assert.deepEqual(inside, ['10.000000', '4.000000', 2]);
  });
});
