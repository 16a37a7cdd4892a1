// `ops provider …` against a test database, run as an operator would (node --import tsx
// ops/cli.ts): the status shows the switch, the limit and the attempt facts; every change is
// written to provider_control, where the next submit claim reads it, and audited with who and why.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eq, sql } from 'drizzle-orm';
import { ApplicationFailure } from '@temporalio/common';
import { createTask, testProviderGuard } from '../support/deps';
import { configToEnv } from '../../config/env';
import { acquireFence } from '../../db/fence';
import { opsAudit, providerControl } from '../../db/schema';
import { REPLICATE_CAPABILITIES } from '../../providers/replicate';
import { runNodeScript } from '../../harness';
import { createTestDatabase, createTestTenant, testConfig, type TestDatabase } from '../support/stack';

let tdb: TestDatabase;
let env: Record<string, string>;

before(async () => {
  const config = testConfig();
  tdb = await createTestDatabase(config);
  env = { ...configToEnv(config), DATABASE_URL: tdb.url, OPS_OPERATOR: 'bob', LOG_LEVEL: 'warn' };
});
after(async () => {
  await tdb?.drop();
});

async function ops(...args: string[]) {
  const r = await runNodeScript('ops/cli.ts', ['provider', ...args], env, { timeoutMs: 60_000 });
  return { ...r, json: () => JSON.parse(r.stdout.trim().split('\n').pop() ?? 'null') };
}
const db = () => tdb.database.db;
const control = async (provider: string) => (await db().select().from(providerControl).where(eq(providerControl.provider, provider)))[0];
const audits = async (action: string) => db().select().from(opsAudit).where(eq(opsAudit.action, action));

let seq = 0;
/** An attempt of `provider` in `state`, on a task of its own (the facts the status counts). */
async function attempt(tenantId: string, provider: string, state: string, finishedAgo = '0 seconds') {
  const config = testConfig();
  const { token } = await acquireFence(db(), config.FENCE_SCOPE, config.REGION);
  const { task } = await createTask(db(), token, {
    tenantId,
    idempotencyKey: `provider-cli-${++seq}`,
    body: { model: 'minimax/video-01', prompt: 'ops', duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  await db().execute(sql`
    INSERT INTO task_attempt (attempt_id, task_id, attempt_no, provider, provider_model, submit_state, submit_finished_at)
    VALUES (gen_random_uuid(), ${task.task_id}, 1, ${provider}, 'm', ${state}, now() - ${finishedAgo}::interval)`);
}

test('provider status: every provider with its switch, limit, jobs in flight and waiting from the facts, and rejections in the window', async () => {
  const { tenantId } = await createTestTenant(tdb.database, testConfig(), '100');
  for (const state of ['SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN', 'PREPARED', 'REJECTED', 'SUCCEEDED']) await attempt(tenantId, 'kling', state);
  await attempt(tenantId, 'kling', 'REJECTED', '2 hours');
  const r = await ops('status', '--json');
  assert.equal(r.code, 0, r.stderr);
  const rows = r.json() as {
    provider: string;
    force: string | null;
    limit: number | null;
    in_flight: number;
    unknown: number;
    waiting: number;
    rejected_recent: number;
  }[];
  assert.deepEqual(
    rows.map((x) => x.provider),
    ['fal', 'kling', 'replicate', 'runway'],
  );
  const kling = rows.find((x) => x.provider === 'kling');
  assert.deepEqual(
    {
      force: kling?.force,
      limit: kling?.limit,
      inFlight: kling?.in_flight,
      unknown: kling?.unknown,
      waiting: kling?.waiting,
      rejected: kling?.rejected_recent,
    },
    { force: null, limit: 5, inFlight: 3, unknown: 1, waiting: 1, rejected: 1 },
    'in flight = SUBMITTED + RUNNING + SUBMIT_UNKNOWN; the rejection 2 h ago is outside the 15 min window',
  );
  const text = await ops('status');
  assert.equal(text.code, 0, text.stderr);
  assert.match(text.stdout, /kling\s+automatic\s+5 \(adapter\)\s+3\s+1\s+1/);
});

test('force-open, force-close, clear and limit change provider_control and are audited with who and why; the next claim obeys', async () => {
  const open = await ops('force-open', 'replicate', '--reason', 'INC-9 replicate 500s', '--json');
  assert.equal(open.code, 0, open.stderr);
  assert.deepEqual(open.json().to, { force: 'open', max_in_flight: null });
  assert.equal((await control('replicate'))?.breaker_force, 'open');
  const guard = testProviderGuard({ now: () => Date.now() });
  await assert.rejects(
    db().transaction((tx) => guard.admit(tx, 'replicate', REPLICATE_CAPABILITIES)),
    (err) => err instanceof ApplicationFailure && err.type === 'ProviderUnavailable' && /forced-open/.test(err.message),
  );
  const [audit] = await audits('provider.force-open');
  assert.deepEqual(
    { actor: audit?.actor, target: `${audit?.target_type}:${audit?.target_id}`, reason: audit?.reason, detail: audit?.detail },
    {
      actor: 'operator:bob',
      target: 'provider:replicate',
      reason: 'INC-9 replicate 500s',
      detail: { from: { force: null, max_in_flight: null }, to: { force: 'open', max_in_flight: null } },
    },
  );

  const closed = await ops('force-close', 'replicate', '--reason', 'false alarm');
  assert.equal(closed.code, 0, closed.stderr);
  assert.match(closed.stdout, /replicate: switch open, limit adapter → switch closed, limit adapter; audit /);
  assert.equal((await control('replicate'))?.breaker_force, 'closed');

  const limit = await ops('limit', 'replicate', '0', '--reason', 'drain replicate', '--json');
  assert.equal(limit.code, 0, limit.stderr);
  assert.deepEqual(limit.json().to, { force: 'closed', max_in_flight: 0 });
  const admission = await db().transaction((tx) => guard.admit(tx, 'replicate', REPLICATE_CAPABILITIES));
  // The claim takes this ceiling to the slot queue, which grants nothing under 0 (test/activities/slot-queue.test.ts).
  assert.deepEqual({ limit: admission.limit, ceiling: admission.ceiling }, { limit: 0, ceiling: 0 }, 'a limit of 0 stops new submits');

  assert.equal((await ops('clear', 'replicate', '--reason', 'incident over')).code, 0);
  assert.equal((await ops('limit', 'replicate', 'none', '--reason', 'incident over')).code, 0);
  const row = await control('replicate');
  assert.deepEqual(
    { force: row?.breaker_force, limit: row?.max_in_flight, by: row?.updated_by, reason: row?.reason },
    { force: null, limit: null, by: 'operator:bob', reason: 'incident over' },
  );
  assert.equal((await audits('provider.force-close')).length, 1);
  assert.equal((await audits('provider.clear')).length, 1);
  assert.equal((await audits('provider.limit')).length, 2);
});

test('provider changes refuse a missing reason, an unknown provider and a bad limit, and change nothing', async () => {
  const before = await db().select().from(opsAudit);
  const noReason = await ops('force-open', 'fal');
  assert.notEqual(noReason.code, 0);
  assert.match(noReason.stderr, /--reason/);
  const unknown = await ops('force-open', 'acme', '--reason', 'x');
  assert.notEqual(unknown.code, 0);
  assert.match(unknown.stderr, /one of replicate, fal, runway, kling/);
  const bad = await ops('limit', 'fal', '-3', '--reason', 'x');
  assert.notEqual(bad.code, 0);
  assert.equal((await db().select().from(opsAudit)).length, before.length);
  assert.equal(await control('fal'), undefined);
});
