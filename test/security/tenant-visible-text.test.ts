// What a tenant reads about its own tasks and deliveries carries nothing of ours (docs/security.md
// "What leaves a process"): a transition made by an operator shows `operator`, not the operator's
// OS user name (GET /v1/tasks/:id and the task's event stream; the database keeps the name), and
// a webhook attempt's error in the delivery log is redacted like every error text that leaves.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { eq } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { taskTransition, webhookAttempt, webhookDelivery } from '../../db/schema';
import { startApiInProcess, worldFacade, type InProcessApi } from '../../harness/world';
import { createMetrics } from '../../observability/metrics';
import { createTask } from '../support/deps';
import { createTestDatabase, createTestTenant, http, testConfig, testLogger, type TestDatabase } from '../support/stack';

const config = testConfig();
let tdb: TestDatabase;
let api: InProcessApi;
let tenantId: string;
let apiKey: string;
const db = () => tdb.database.db;
const token = () => ({ scope: config.FENCE_SCOPE, region: config.REGION, epoch: 1 });

before(async () => {
  tdb = await createTestDatabase(config);
  ({ tenantId, apiKey } = await createTestTenant(tdb.database, config, '100'));
  api = await startApiInProcess(config, tdb.database, {
    facade: worldFacade(config, () => undefined),
    logger: testLogger,
    metrics: createMetrics({ service: 'api-tenant-visible-text' }),
  });
});
after(async () => {
  await api?.close();
  await tdb?.drop();
});

async function cancelledByOperator(): Promise<string> {
  const created = await createTask(db(), token(), {
    tenantId,
    idempotencyKey: `tenant-visible-${randomUUID()}`,
    body: { model: 'minimax/video-01', prompt: 'tenant visible text', duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const id = created.task.task_id;
  await cancelTask(db(), token(), tenantId, id, 'operator:alice');
  return id;
}

test("an operator's transition shows the tenant `operator`, never the operator's name (the task and its event stream); the database keeps it", async () => {
  const id = await cancelledByOperator();
  const task = await http(api.baseUrl, 'GET', `/v1/tasks/${id}`, { apiKey });
  assert.equal(task.status, 200);
  const last = (task.body.transitions as { to: string; actor: string }[]).at(-1)!;
  assert.deepEqual([last.to, last.actor], ['CANCELLED', 'operator']);
  assert.doesNotMatch(JSON.stringify(task.body), /alice/);

  // The task's stream replays its transitions and closes after the terminal one.
  const res = await fetch(`${api.baseUrl}/v1/tasks/${id}/events`, { headers: { authorization: `Bearer ${apiKey}` }, signal: AbortSignal.timeout(10_000) });
  assert.equal(res.status, 200);
  const stream = await res.text();
  assert.match(stream, /"actor":"operator"/);
  assert.doesNotMatch(stream, /alice/);

  const recorded = await db().select().from(taskTransition).where(eq(taskTransition.task_id, id));
  assert.ok(
    recorded.some((t) => t.actor === 'operator:alice'),
    'the record keeps who it was',
  );
});

test("a webhook attempt's error in the delivery log is redacted: no URL query, no credential", async () => {
  const endpoint = await http(api.baseUrl, 'POST', '/v1/webhook-endpoints', { apiKey, body: { url: 'http://127.0.0.1:9/hook', events: ['task.cancelled'] } });
  assert.equal(endpoint.status, 201, JSON.stringify(endpoint.body));
  const id = await cancelledByOperator();
  const [delivery] = await db().select().from(webhookDelivery).where(eq(webhookDelivery.endpoint_id, endpoint.body.id));
  assert.ok(delivery, 'the cancel fanned out a delivery');
  await db().insert(webhookAttempt).values({
    delivery_id: delivery.delivery_id,
    attempt_no: 1,
    url: 'http://127.0.0.1:9/hook',
    started_at: new Date(),
    latency_ms: 3,
    succeeded: false,
    error: 'UND_ERR: fetch https://hooks.example.com/x?X-Amz-Signature=deadbeefcafe failed with Bearer sk_live_0123456789abcdefghij',
  });
  const list = await http(api.baseUrl, 'GET', `/v1/webhook-endpoints/${endpoint.body.id}/deliveries`, { apiKey });
  assert.equal(list.status, 200);
  const shown = (list.body.deliveries as { task_id: string; attempts: { error: string | null }[] }[]).find((d) => d.task_id === id)!;
  const error = shown.attempts[0]!.error ?? '';
  assert.match(error, /hooks\.example\.com\/x/);
  assert.doesNotMatch(error, /deadbeefcafe|sk_live_0123456789abcdefghij/);
});
