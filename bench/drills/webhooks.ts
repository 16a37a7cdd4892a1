// Drill: tenant webhooks under a bad receiver (docs/webhooks.md). Two worker processes (each
// with its webhook relay), N tasks, one endpoint at a real receiver
// (test/support/webhook-receiver.ts, verifying with standardwebhooks). The receiver answers for
// a while, is down (connections refused) for a window, answers 500 for a while, then 200 again.
// At the end every terminal event must have been answered 200 under its webhook-id, every
// request verified, duplicates only under the same id (and the same event), and the delivery
// log must hold exactly one attempt with a status per request the receiver saw.
import { sql } from 'drizzle-orm';
import { freePort, sleep } from '../../harness';
import { startWebhookReceiver } from '../../test/support/webhook-receiver';
import { convergence, createTasks, startDrillWorld, waitFor } from './harness';

export interface WebhooksDrillReport {
  readonly tasks: number;
  readonly byStatus: Record<string, number>;
  readonly terminalEvents: number;
  readonly delivered: number;
  /** Terminal events the receiver never answered 200: must be 0. */
  readonly lost: number;
  readonly requestsReceived: number;
  /** Requests beyond the first per webhook-id (retries after a 500, or a crashed lease). */
  readonly duplicates: number;
  /** Requests answered 200 beyond the first 200 per webhook-id (at-least-once seen from the receiver). */
  readonly duplicatesAfterSuccess: number;
  /** One webhook-id carrying two different events: must be 0. */
  readonly mismatchedDuplicates: number;
  readonly unverified: number;
  /** |attempts with a status − requests received|: must be 0. */
  readonly logMismatch: number;
  readonly attempts: number;
  readonly attemptsWithoutAnswer: number;
  readonly answered500: number;
  readonly maxDelaySeconds: number;
  readonly p50DelaySeconds: number;
  readonly downSeconds: number;
  readonly failingSeconds: number;
}

export async function runWebhooksDrill(opts: {
  tasks: number;
  downSeconds: number;
  failingSeconds: number;
  log: (line: string) => void;
}): Promise<WebhooksDrillReport> {
  const { log } = opts;
  const world = await startDrillWorld(
    'webhooks',
    {
      SIMULATOR_GENERATION_MS: '2000',
      POLL_INITIAL_MS: '2000',
      POLL_MAX_MS: '4000',
      WORKER_MAX_CONCURRENT_ACTIVITIES: '100',
      WEBHOOK_RETRY_SCHEDULE_MS: [0, 1_000, 2_000, 4_000, ...Array.from({ length: 30 }, () => 5_000)].join(','),
      WEBHOOK_RELAY_INTERVAL_MS: '200',
      WEBHOOK_ATTEMPT_TIMEOUT_MS: '3000',
    },
    log,
  );
  const secrets: string[] = [];
  const receiver = await startWebhookReceiver({ port: await freePort(), secrets: () => secrets });
  try {
    const created = await fetch(`${world.apiUrl}/v1/webhook-endpoints`, {
      method: 'POST',
      headers: { authorization: `Bearer ${world.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: `${receiver.baseUrl}/drill`, description: 'webhooks drill' }),
    });
    if (created.status !== 201) throw new Error(`endpoint create answered ${created.status}: ${await created.text()}`);
    secrets.push(((await created.json()) as { secret: string }).secret);
    await world.startWorker('worker-1');
    await world.startWorker('worker-2');

    log(`creating ${opts.tasks} tasks`);
    const creating = createTasks(world, 'webhooks', opts.tasks, 8);
    // Receiver up while the first tasks finish, then down, then failing, then up.
    await waitFor(async () => (await count(world, sql`SELECT count(*)::int AS n FROM webhook_event`)) >= Math.min(10, opts.tasks), 300_000);
    log(`receiver down for ${opts.downSeconds} s`);
    await receiver.setState('down');
    await sleep(opts.downSeconds * 1000);
    log(`receiver answering 500 for ${opts.failingSeconds} s`);
    await receiver.setState('failing');
    await sleep(opts.failingSeconds * 1000);
    log('receiver answering 200');
    await receiver.setState('up');
    await creating;

    await waitFor(async () => (await convergence(world.db)).settled >= opts.tasks, 600_000);
    await waitFor(async () => (await count(world, sql`SELECT count(*)::int AS n FROM webhook_delivery WHERE state = 'pending'`)) === 0, 300_000);
    const { byStatus } = await convergence(world.db);

    const events = (
      await world.db.db.execute(sql`
      SELECT e.event_id, e.event_type, e.task_id, e.status_version, e.created_at, d.state
      FROM webhook_event e JOIN webhook_delivery d ON d.event_id = e.event_id
      WHERE e.event_type IN ('task.succeeded', 'task.failed', 'task.cancelled')`)
    ).rows as {
      event_id: string;
      event_type: string;
      task_id: string;
      status_version: number;
      created_at: string | Date;
      state: string;
    }[];
    const attemptRows = (await world.db.db.execute(sql`SELECT response_status FROM webhook_attempt`)).rows as { response_status: number | null }[];

    const byId = new Map<string, typeof receiver.received>();
    for (const r of receiver.received) byId.set(r.webhookId, [...(byId.get(r.webhookId) ?? []), r]);
    let lost = 0;
    let mismatched = 0;
    let afterSuccess = 0;
    const delays: number[] = [];
    for (const ev of events) {
      const seen = byId.get(`msg_${ev.event_id}`) ?? [];
      const ok = seen.filter((s) => s.answered === 200);
      if (ok.length === 0) {
        lost += 1;
        continue;
      }
      afterSuccess += ok.length - 1;
      delays.push((Math.min(...ok.map((s) => s.at)) - new Date(ev.created_at).getTime()) / 1000);
      const distinct = new Set(
        seen.map(({ body }: { body: { type?: string; data?: { task_id?: string; status_version?: number } } | null }) =>
          JSON.stringify([body?.type, body?.data?.task_id, body?.data?.status_version]),
        ),
      );
      if (distinct.size !== 1 || !distinct.has(JSON.stringify([ev.event_type, ev.task_id, Number(ev.status_version)]))) mismatched += 1;
    }
    delays.sort((a, b) => a - b);
    const withStatus = attemptRows.filter((a) => a.response_status !== null).length;
    return {
      tasks: opts.tasks,
      byStatus,
      terminalEvents: events.length,
      delivered: events.filter((e) => e.state === 'succeeded').length,
      lost,
      requestsReceived: receiver.received.length,
      duplicates: receiver.received.length - byId.size,
      duplicatesAfterSuccess: afterSuccess,
      mismatchedDuplicates: mismatched,
      unverified: receiver.received.filter((r) => r.verifiedBy.length === 0).length,
      logMismatch: Math.abs(withStatus - receiver.received.length),
      attempts: attemptRows.length,
      attemptsWithoutAnswer: attemptRows.length - withStatus,
      answered500: receiver.received.filter((r) => r.answered === 500).length,
      maxDelaySeconds: delays[delays.length - 1] ?? 0,
      p50DelaySeconds: delays[Math.floor(delays.length / 2)] ?? 0,
      downSeconds: opts.downSeconds,
      failingSeconds: opts.failingSeconds,
    };
  } finally {
    await receiver.close();
    await world.close();
  }
}

const count = async (world: { db: { db: { execute: (q: ReturnType<typeof sql>) => Promise<{ rows: unknown[] }> } } }, q: ReturnType<typeof sql>) =>
  ((await world.db.db.execute(q)).rows[0] as { n: number }).n;
