// DEGRADED_NOTIFY (docs/modes.md): webhook deliveries pause — events are still recorded with
// their transitions, kept and counted (vidorch_notify_backlog, its oldest age), nothing is sent;
// once the mode lifts, everything arrives, at the relay's bounded rate, none lost.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Registry } from 'prom-client';
import { setMode } from '../../db/modes';
import type { SystemMode } from '../../domain/states';
import { registerNotifyMetrics } from '../../observability/metrics';
import { startE2E, type E2E } from '../support/e2e';
import { eventually, http } from '../support/stack';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver';

let e: E2E;
let receiver: WebhookReceiver;
const secrets: string[] = [];
const RATE = 2;

before(async () => {
  e = await startE2E('webhooks_notify', { WEBHOOK_RELAY_INTERVAL_MS: '100', WEBHOOK_RELAY_RATE_PER_SECOND: String(RATE) });
  receiver = await startWebhookReceiver({ port: 0, secrets: () => secrets });
  const res = await http(e.api.baseUrl, 'POST', '/v1/webhook-endpoints', { apiKey: e.tenant.apiKey, body: { url: `${receiver.baseUrl}/hooks` } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  secrets.push(res.body.secret);
});
after(async () => {
  await receiver?.close();
  await e?.close();
});

const mode = (m: SystemMode) => setMode(e.tdb.database.db, { scope: e.config.FENCE_SCOPE, mode: m, actor: 'test', reason: 'webhooks-notify test' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function metric(registry: Registry, name: string): Promise<number> {
  const m = (await registry.getMetricsAsJSON()).find((x) => x.name === name);
  return Number(m?.values[0]?.value ?? NaN);
}

test('DEGRADED_NOTIFY: the backlog grows and nothing is sent; after the mode lifts every event arrives once, at the bounded rate', async () => {
  const relay = e.worker!.webhookRelay!;
  const registry = new Registry();
  registerNotifyMetrics(registry, () => relay.backlog());
  await mode('DEGRADED_NOTIFY');
  const ids = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => e.createTask(`notify-${i}`)));
  await Promise.all(ids.map((id) => e.waitForStatus(id, 'SUCCEEDED', 60_000)));
  // Two events a task: task.succeeded, then task.thumbnail_ready once its thumbnail is made.
  const events = ids.length * 2;
  // Every event is recorded and counted; the receiver has heard nothing.
  await eventually(async () => (relay.backlog().count === events ? true : undefined), 20_000, 100);
  await sleep(1_000);
  assert.equal(receiver.received.length, 0, 'nothing sent while DEGRADED_NOTIFY holds');
  assert.equal(await metric(registry, 'vidorch_notify_backlog'), events);
  assert.equal(await metric(registry, 'vidorch_notify_paused'), 1);
  // The relay counts the backlog at most once a second, at its next pass: the gauge follows the wait.
  await eventually(async () => ((await metric(registry, 'vidorch_notify_backlog_oldest_seconds')) >= 1 ? true : undefined), 10_000, 100);

  // Modes below it in the shedding order pause deliveries too.
  await mode('QUEUE_ONLY');
  await sleep(600);
  assert.equal(receiver.received.length, 0, 'nothing sent in QUEUE_ONLY either');

  const lifted = Date.now();
  await mode('NORMAL');
  await eventually(async () => (new Set(receiver.received.map((r) => r.webhookId)).size === events ? true : undefined), 30_000, 50);
  assert.deepEqual(
    new Set(receiver.received.map((r) => `${r.body.data.task_id} ${r.body.type}`)),
    new Set(ids.flatMap((id) => [`${id} task.succeeded`, `${id} task.thumbnail_ready`])),
    'every task was heard of, succeeded and its thumbnail',
  );
  assert.equal(receiver.received.length, events, 'each once');
  assert.ok(receiver.received.every((r) => r.verifiedBy.length === 1));
  // RATE per second, starting with a full bucket of RATE: the last can go no sooner than this.
  const spread = Math.max(...receiver.received.map((r) => r.at)) - lifted;
  assert.ok(spread >= ((events - RATE) / RATE) * 1000 - 300, `drained at the bounded rate (${spread} ms)`);
  await eventually(async () => (relay.backlog().count === 0 ? true : undefined), 5_000, 100);
  assert.equal(await metric(registry, 'vidorch_notify_paused'), 0);
});
