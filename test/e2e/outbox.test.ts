// No accepted task is lost when Temporal is unreachable: the API still answers 202 (the task,
// its reservation and its outbox row are committed), and the outbox relay starts the
// workflow later. Two relays at once publish each row once.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Client } from '@temporalio/client';
import { eq, isNull } from 'drizzle-orm';
import { outboxEvent } from '../../db/schema';
import { createGenerationFacade } from '../../temporal/facade';
import { relayOnce } from '../../workers/outbox-relay';
import {
  createTestDatabase,
  createTestTenant,
  http,
  startApi,
  temporalClient,
  testConfig,
  testLogger,
  uniqueQueue,
  type RunningApi,
  type TestDatabase,
} from '../support/stack';

const config = testConfig({ TEMPORAL_TASK_QUEUE: uniqueQueue('outbox') });
let tdb: TestDatabase;
let api: RunningApi;
let client: Client;
let closeClient: () => Promise<void>;
let apiKey: string;

before(async () => {
  tdb = await createTestDatabase(config);
  ({ client, close: closeClient } = await temporalClient(config));
  // This API's Temporal is unreachable: nothing listens on port 1.
  const deadFacade = createGenerationFacade(async () => {
    const { client: c } = await temporalClient({ ...config, TEMPORAL_ADDRESS: '127.0.0.1:1' });
    return c;
  }, config.TEMPORAL_TASK_QUEUE);
  api = await startApi(config, tdb.database, { facade: deadFacade });
  ({ apiKey } = await createTestTenant(tdb.database, config, '100'));
});
after(async () => {
  await api?.close();
  await closeClient?.();
  await tdb?.drop();
});

const body = { model: 'minimax/video-01', prompt: 'outbox', duration_seconds: 1, resolution: '480p' };

test('with Temporal unreachable a create is still accepted, and the relay later starts exactly one workflow per task', async () => {
  const ids: string[] = [];
  for (let i = 0; i < 6; i += 1) {
    const res = await http(api.baseUrl, 'POST', '/v1/tasks', { apiKey, body, headers: { 'idempotency-key': `outbox-${i}` } });
    assert.equal(res.status, 202);
    ids.push(res.body.task_id);
  }
  const pending = await tdb.database.db.select().from(outboxEvent).where(isNull(outboxEvent.published_at));
  assert.equal(pending.length, 6, 'every accepted task waits in the outbox');

  const facade = createGenerationFacade(async () => client, config.TEMPORAL_TASK_QUEUE);
  const relay = { db: tdb.database.db, fence: { scope: config.FENCE_SCOPE, region: config.REGION }, facade, logger: testLogger, batchSize: 4, intervalMs: 10 };
  // Two relays at once: SKIP LOCKED splits the rows between them.
  const [a, b] = await Promise.all([relayOnce(relay), relayOnce(relay)]);
  const rest = await relayOnce(relay);
  assert.equal(a.published + b.published + rest.published, 6);

  const rows = await tdb.database.db.select().from(outboxEvent);
  assert.ok(rows.every((r) => r.published_at !== null && r.publish_attempts === 1), 'each row published once');
  for (const id of ids) {
    const d = await client.workflow.getHandle(facade.workflowIdFor(id)).describe();
    assert.equal(d.status.name, 'RUNNING');
  }
  // Publishing again (a relay that crashed before marking the row) starts nothing new.
  await tdb.database.db.update(outboxEvent).set({ published_at: null }).where(eq(outboxEvent.aggregate_id, ids[0]!));
  const again = await relayOnce(relay);
  assert.equal(again.published, 1);
  const runs: string[] = [];
  for await (const wf of client.workflow.list({ query: `WorkflowId = '${facade.workflowIdFor(ids[0]!)}'` })) runs.push(wf.runId);
  assert.ok(runs.length <= 1, `one run for the task, found ${runs.length}`);
  for (const id of ids) await client.workflow.getHandle(facade.workflowIdFor(id)).terminate('test cleanup');
});
