// An old Last-Event-ID on the tenant stream (docs/events.md "Resync", issue #49): over a table
// of 1,000,000 transitions, other tenants' nearly all and the tenant's own days old, `0-0` opens
// the stream in well under a second with `event: resync` instead of replaying (or walking)
// everything since; the stream then goes on live, and a recent Last-Event-ID is still replayed.
// The tenant stream's read goes through the tenant's own index (EXPLAIN of the statement the
// stream ran).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sql } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { createGenerationFacade } from '../../temporal/facade';
import { createTask } from '../support/deps';
import { createTestDatabase, createTestTenant, startApi, testConfig, type RunningApi, type TestDatabase } from '../support/stack';

const config = testConfig({ EVENTS_HEARTBEAT_MS: '60000', REDIS_URL: '' });
const token = { scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 };
const body = { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p' as const, priority: 0 };
const TRANSITIONS = 1_000_000;
const CHUNK = 50_000;
let tdb: TestDatabase;
let api: RunningApi;
let mine: { tenantId: string; apiKey: string };
const mineOpen: string[] = [];
/** The statements the API ran that read the tenant stream's page, with their parameters. */
const tenantReads: { text: string; values: unknown[] }[] = [];

before(async () => {
  tdb = await createTestDatabase(config);
  const db = tdb.database.db;
  mine = await createTestTenant(tdb.database, config, '1000');
  const others = [];
  for (let t = 0; t < 4; t += 1) others.push((await createTestTenant(tdb.database, config, '1000')).tenantId);
  // A month of history in two statements: the tasks, then their transitions, 99 % other
  // tenants' and then the tenant's own last 1 % (a week old and more). The triggers that tell
  // receivers and listeners are off for the load (nobody must hear of a million made-up
  // transitions); the rows are as any writer's.
  const { rows } = await db.execute(sql`
    INSERT INTO generation_task (task_id, tenant_id, project_id, home_region, write_epoch, status, idempotency_key, reserved_amount,
        request_hash, request, provider, provider_model, created_at)
    SELECT gen_random_uuid(), t.tenant_id, t.tenant_id, ${config.REGION}, 1, 'RUNNING', 'history-' || i, 0, 'h', ${JSON.stringify(body)}::jsonb,
        'replicate', 'minimax/video-01', now() - interval '31 days'
    FROM unnest(${`{${[mine.tenantId, ...others].join(',')}}`}::uuid[]) AS t(tenant_id) CROSS JOIN generate_series(1, 5) AS i
    RETURNING task_id, tenant_id`);
  const history = rows as { task_id: string; tenant_id: string }[];
  const ours = history.filter((r) => r.tenant_id === mine.tenantId).map((r) => r.task_id);
  const theirs = history.filter((r) => r.tenant_id !== mine.tenantId).map((r) => r.task_id);
  await db.execute(sql`ALTER TABLE task_transition DISABLE TRIGGER task_transition_notify, DISABLE TRIGGER task_transition_webhook_event`);
  try {
    // In chunks, each its own transaction: the tenant streams of other test files wait for the
    // cluster-wide snapshot xmin, which one long insert would hold back for its whole run.
    for (let from = 1; from <= TRANSITIONS; from += CHUNK) {
      await db.execute(sql`
        INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, region, write_epoch, created_at)
        SELECT CASE WHEN n > ${TRANSITIONS * 0.99} THEN (${`{${ours.join(',')}}`}::uuid[])[1 + n % ${ours.length}]
                    ELSE (${`{${theirs.join(',')}}`}::uuid[])[1 + n % ${theirs.length}] END,
               'RUNNING', 'RUNNING', n - 1, n, 'bulk', 'test', ${config.REGION}, 1, now() - interval '30 days' + n * interval '2 seconds'
        FROM generate_series(${from}::int, ${Math.min(from + CHUNK - 1, TRANSITIONS)}::int) AS n`);
    }
  } finally {
    await db.execute(sql`ALTER TABLE task_transition ENABLE TRIGGER task_transition_notify, ENABLE TRIGGER task_transition_webhook_event`);
  }
  await db.execute(sql`ANALYZE task_transition`);
  // Tasks of today, whose transitions come after the history.
  for (let i = 0; i < 2; i += 1) mineOpen.push((await createTask(db, token, { tenantId: mine.tenantId, idempotencyKey: `mine-${i}`, body })).task.task_id);

  // Record what the API sends that reads task_transition for the tenant stream.
  const pool = tdb.database.pool as unknown as { query: (...args: unknown[]) => unknown };
  const send = pool.query.bind(pool);
  pool.query = (...args: unknown[]) => {
    const q = args[0] as string | { text?: string; values?: unknown[] };
    const text = typeof q === 'string' ? q : (q?.text ?? '');
    if (text.includes('FROM task_transition tt')) tenantReads.push({ text, values: ((typeof q === 'string' ? undefined : q.values) ?? args[1]) as unknown[] });
    return send(...args);
  };
  api = await startApi(config, tdb.database, {
    facade: createGenerationFacade(async () => {
      throw new Error('no Temporal here');
    }, 'unused'),
  });
});
after(async () => {
  await api?.close();
  await tdb?.drop();
});

interface SseEvent {
  readonly event: string | null;
  readonly id: string | null;
  readonly data: any;
}

/** GET /v1/events with `lastEventId`; `next()` resolves with the next event (comments and `retry:` blocks skipped). */
async function openTenantStream(lastEventId?: string): Promise<{ status: number; next: () => Promise<SseEvent>; close: () => void }> {
  const abort = new AbortController();
  const res = await fetch(`${api.baseUrl}/v1/events`, {
    headers: { authorization: `Bearer ${mine.apiKey}`, ...(lastEventId !== undefined ? { 'last-event-id': lastEventId } : {}) },
    signal: abort.signal,
  });
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = '';
  async function next(): Promise<SseEvent> {
    for (;;) {
      const end = buffered.indexOf('\n\n');
      if (end >= 0) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const fields = new Map<string, string>();
        for (const line of block.split('\n')) {
          const colon = line.indexOf(':');
          if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1).trimStart());
        }
        if (!fields.has('data')) continue;
        return { event: fields.get('event') ?? null, id: fields.get('id') ?? null, data: JSON.parse(fields.get('data')!) };
      }
      const { done, value } = await reader.read();
      if (done) throw new Error(`the stream ended; unread: ${buffered}`);
      buffered += value;
    }
  }
  return { status: res.status, next, close: () => abort.abort() };
}

test('a Last-Event-ID of 0-0 over 1,000,000 transitions opens in under a second with event: resync, then live events follow; a recent one is replayed', async (t) => {
  const started = Date.now();
  const s = await openTenantStream('0-0');
  try {
    assert.equal(s.status, 200);
    const first = await s.next();
    const elapsed = Date.now() - started;
    t.diagnostic(`Last-Event-ID 0-0: the first event (${first.event}) came ${elapsed} ms after the request`);
    assert.ok(elapsed < 1_000, `the first event came ${elapsed} ms after the request`);
    assert.equal(first.event, 'resync', `answered ${JSON.stringify(first)}`);
    assert.equal(first.data.reason, 'resume_point_too_old');
    assert.equal(first.data.resume_max_age_ms, config.EVENTS_RESUME_MAX_AGE_MS);
    assert.match(first.id ?? '', /^\d+-0$/, 'its id is the position the stream goes on from');

    // Live: a transition of the tenant's written now arrives on the same stream.
    await cancelTask(tdb.database.db, token, mine.tenantId, mineOpen[0]!);
    const cancelledAt = Date.now();
    // The stream goes on from the horizon (the cluster's oldest open transaction): today's tasks'
    // own creations may come first.
    let live = await s.next();
    while (live.event === 'transition' && live.data.status === 'QUEUED' && mineOpen.includes(live.data.task_id)) live = await s.next();
    t.diagnostic(`the live transition came ${Date.now() - cancelledAt} ms after its commit`);
    assert.equal(live.event, 'transition');
    assert.equal(live.data.task_id, mineOpen[0]);
    assert.equal(live.data.status, 'CANCELLED');
    s.close();

    // Resuming from that recent id replays what came after it, no resync.
    await cancelTask(tdb.database.db, token, mine.tenantId, mineOpen[1]!);
    const again = await openTenantStream(live.id!);
    try {
      const replayed = await again.next();
      assert.equal(replayed.event, 'transition');
      assert.equal(replayed.data.task_id, mineOpen[1]);
    } finally {
      again.close();
    }
  } finally {
    s.close();
  }
});

test("the tenant stream's read is served by the tenant's own index, from the oldest cursor too", async () => {
  assert.ok(tenantReads.length > 0, 'the streams above read the tenant page');
  const { text, values } = tenantReads.at(-1)!;
  assert.equal(values[0], mine.tenantId, 'the first parameter is the tenant');
  for (const params of [values, values.map((v, i) => (i === 1 ? '0' : i === 2 ? 0 : v))]) {
    const { rows } = await tdb.database.pool.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (FORMAT JSON) ${text}`, params);
    const plan = JSON.stringify(rows[0]!['QUERY PLAN']);
    assert.match(plan, /idx_task_transition_tenant_xact/, `cursor ${String(params[1])}-${String(params[2])}: ${plan.slice(0, 2_000)}`);
  }
});
