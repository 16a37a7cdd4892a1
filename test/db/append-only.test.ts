// The record cannot be rewritten: credit_ledger, task_transition, ops_audit, region_failover and
// region_failover_event refuse UPDATE, DELETE and TRUNCATE in the database itself (a trigger,
// SQLSTATE VR001, docs/decisions/0017-append-only-record.md), whoever connects; INSERT still
// works; a failover's later facts are new rows that `ops fence status` shows. Real Postgres.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { eq } from 'drizzle-orm';
import type { DatabaseError } from 'pg';
import { createTask } from '../support/deps';
import { configToEnv } from '../../config/env';
import { acquireFence } from '../../db/fence';
import { selectFailoverRecords } from '../../db/modes';
import { regionFailover, regionFailoverEvent } from '../../db/schema';
import { runFailover } from '../../ops/failover';
import { grantTenantCredits } from '../../ops/tenants';
import { runNodeScript } from '../../harness';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

/** The SQLSTATE the append-only trigger raises (db/migrations/0008_append_only_record.sql). */
const REWRITE_REFUSED = 'VR001';

const config = testConfig();
let tdb: TestDatabase;
let tenantName: string;
let failoverId: string;

const query = (text: string) => tdb.database.pool.query(text);

before(async () => {
  tdb = await createTestDatabase(config);
  // A tenant (GRANT + audit), a task (RESERVE + transition), a failover (record + reconciliation).
  const { tenantId } = await createTestTenant(tdb.database, config, '100');
  const { rows } = await query(`SELECT name FROM tenant WHERE tenant_id = '${tenantId}'`);
  tenantName = (rows[0] as { name: string }).name;
  const { token } = await acquireFence(tdb.database.db, config.FENCE_SCOPE, config.REGION);
  await createTask(tdb.database.db, token, {
    tenantId,
    idempotencyKey: 'append-only-1',
    body: { model: 'minimax/video-01', prompt: 'a record', duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const failover = await runFailover(tdb.database.db, {
    scope: config.FENCE_SCOPE,
    toRegion: 'region-b',
    incidentId: 'INC-APPEND',
    acceptedRpoSeconds: 0,
    operator: 'operator:test',
    reason: 'append-only test',
    awaitWriteMs: 0,
  });
  failoverId = failover.record.failover_id;
});
after(async () => {
  await tdb?.drop();
});

/** A rewrite of each record table: an UPDATE that changes a fact. */
const REWRITES = {
  credit_ledger: `UPDATE credit_ledger SET amount = amount + 1`,
  task_transition: `UPDATE task_transition SET to_status = 'SUCCEEDED'`,
  ops_audit: `UPDATE ops_audit SET actor = 'someone else'`,
  region_failover: `UPDATE region_failover SET accepted_rpo_seconds = 3600`,
  region_failover_event: `UPDATE region_failover_event SET recorded_at = now() - interval '1 day'`,
} as const;

/** Every row of the table, as text: what must not change. */
async function contents(table: string): Promise<string[]> {
  const { rows } = await query(`SELECT t::text AS row FROM ${table} t ORDER BY 1`);
  return rows.map((r: { row: string }) => r.row);
}

async function refused(statement: string, table: string, op: string): Promise<void> {
  await assert.rejects(query(statement), (err: DatabaseError) => {
    assert.equal(err.code, REWRITE_REFUSED, `${statement}: ${err.message}`);
    assert.equal(err.message, `${op} on ${table} refused: the table is append-only`);
    assert.match(err.hint ?? '', /new row with its own business key/);
    return true;
  });
}

describe('the record cannot be rewritten', () => {
  for (const [table, update] of Object.entries(REWRITES)) {
    test(`${table}: UPDATE, DELETE and TRUNCATE are refused with ${REWRITE_REFUSED} and change nothing`, async () => {
      const before = await contents(table);
      assert.ok(before.length > 0, `${table} has rows to protect`);
      await refused(update, table, 'UPDATE');
      await refused(`DELETE FROM ${table}`, table, 'DELETE');
      // CASCADE, the strongest form: region_failover is referenced by region_failover_event.
      await refused(`TRUNCATE ${table} CASCADE`, table, 'TRUNCATE');
      assert.deepEqual(await contents(table), before);
    });
  }

  test('cascading deletes from the tables the record points at are refused too (a task, a tenant)', async () => {
    const before = await contents('task_transition');
    await assert.rejects(query(`DELETE FROM generation_task`));
    await assert.rejects(query(`TRUNCATE generation_task, tenant CASCADE`), (err: DatabaseError) => err.code === REWRITE_REFUSED);
    assert.deepEqual(await contents('task_transition'), before);
  });

  test('an INSERT still works in each of them: a correction is a new row with its own business key', async () => {
    const one = async (sql: string) => (await query(sql)).rows[0] as Record<string, string>;
    const { tenant_id: tenantId } = await one(`SELECT tenant_id FROM tenant LIMIT 1`);
    const { task_id: taskId } = await one(`SELECT task_id FROM generation_task LIMIT 1`);
    const counts = async () =>
      one(`SELECT (SELECT count(*) FROM credit_ledger) || ' ' || (SELECT count(*) FROM task_transition) || ' ' ||
      (SELECT count(*) FROM ops_audit) || ' ' || (SELECT count(*) FROM region_failover) AS n`);
    const before = (await counts()).n!.split(' ').map(Number);
    await query(`INSERT INTO credit_ledger (entry_id, tenant_id, business_key, entry_type, amount, region, write_epoch, note)
      VALUES ('${randomUUID()}', '${tenantId}', 'correction:INC-APPEND:1', 'GRANT', '1', 'region-a', 1, 'correction of an opening grant')`);
    await query(`INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, region, write_epoch)
      VALUES ('${taskId}', 'QUEUED', 'QUEUED', 0, 99, 'test.insert', 'test', 'region-a', 1)`);
    await query(`INSERT INTO ops_audit (audit_id, actor, action, target_type, target_id, reason)
      VALUES ('${randomUUID()}', 'operator:test', 'ledger.correct', 'tenant', '${tenantId}', 'correction')`);
    await query(`INSERT INTO region_failover (failover_id, resource_scope, incident_id, operator, reason, old_region, new_region, old_epoch, new_epoch,
      replication_position, accepted_rpo_seconds, started_at, traffic_switch_time)
      VALUES ('${randomUUID()}', 'another-scope', 'INC-OTHER', 'test', 'test', 'region-a', 'region-b', 1, 2, '0/0', 0, now(), now())`);
    assert.deepEqual(
      (await counts()).n!.split(' ').map(Number),
      before.map((n) => n + 1),
    );
  });
});

test('the failover records its first write and reconciliation result as new rows, and `ops fence status` shows them', async () => {
  const [switched] = await tdb.database.db.select().from(regionFailover).where(eq(regionFailover.failover_id, failoverId));
  const events = async () =>
    (await tdb.database.db.select().from(regionFailoverEvent).where(eq(regionFailoverEvent.failover_id, failoverId))).map((e) => e.kind).sort();
  assert.deepEqual(await events(), ['reconciliation']);

  // Region-b's first write (an operator's canary grant there), then `fence status` records it.
  await grantTenantCredits(tdb.database.db, {
    name: tenantName,
    credits: '1',
    reason: 'canary',
    actor: 'operator:test',
    fence: { scope: config.FENCE_SCOPE, region: 'region-b' },
  });
  const env = { ...configToEnv(config), DATABASE_URL: tdb.url, LOG_LEVEL: 'warn' };
  const status = await runNodeScript('ops/cli.ts', ['fence', 'status', '--json'], env);
  assert.equal(status.code, 0, status.stderr);
  const shown = (JSON.parse(status.stdout.trim().split('\n').pop()!) as { failovers: Array<Record<string, unknown>> }).failovers.find(
    (f) => f['failover_id'] === failoverId,
  );
  assert.ok(shown?.['first_successful_write_time'], 'first write shown');
  assert.equal((shown?.['reconciliation_result'] as { clean?: boolean } | undefined)?.clean !== undefined, true, 'reconciliation result shown');
  assert.deepEqual(await events(), ['first_write', 'reconciliation']);

  // The human form shows them too; a second status changes nothing; the switch row is as written.
  const human = await runNodeScript('ops/cli.ts', ['fence', 'status'], env);
  assert.match(human.stdout, /incident id\s+INC-APPEND/);
  assert.doesNotMatch(human.stdout, /none yet|pending/);
  const [rec] = await selectFailoverRecords(tdb.database.db).where(eq(regionFailover.failover_id, failoverId));
  assert.equal(rec?.first_successful_write_time?.toISOString(), shown?.['first_successful_write_time']);
  assert.deepEqual(await events(), ['first_write', 'reconciliation']);
  const [after] = await tdb.database.db.select().from(regionFailover).where(eq(regionFailover.failover_id, failoverId));
  assert.deepEqual(after, switched);
});
