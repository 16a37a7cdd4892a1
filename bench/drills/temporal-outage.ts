// Drill: the Temporal server stops for 60 s under load and comes back with its state (a dev
// server with a database file). Creates keep being accepted into the outbox meanwhile; after the
// restart the relay and the workers drain the backlog. The drain time is printed next to the
// model's prediction B / (μ − λ) (docs/design.md §10), with μ the best rate sustained over 10 s of the
// drain and λ the arrival rate, for both the outbox (workflow starts) and the tasks themselves.
// (The outbox relay's per-row backoff, up to ~1 min, bounds its drain more than μ does.)
import { sql } from 'drizzle-orm';
import { queues } from '../../temporal/queues';
import { sleep } from '../../harness';
import { ledgerImbalance, startDrillWorld, type DrillWorld, awaitConvergence, tasksStored } from './harness';
import { drainFigures, peakRate, type DrainFigures } from './capacity-model';
import { startCreateLoad, type LoadReport, type OutageLoadOutcome } from './load';

export type { DrainFigures };

export interface TemporalOutageReport extends OutageLoadOutcome {
  readonly outbox: DrainFigures;
  readonly tasks: DrainFigures;
  readonly ledgerImbalance: number;
}

/** Waits until `n` workers poll the generation task queue for workflow tasks. */
async function waitForPollers(world: DrillWorld, n: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { pollers } = await world.client.workflowService.describeTaskQueue({
      namespace: world.config.TEMPORAL_NAMESPACE,
      taskQueue: { name: queues.generation(world.config.TEMPORAL_TASK_QUEUE) },
      taskQueueType: 1, // TASK_QUEUE_TYPE_WORKFLOW
    });
    if ((pollers?.length ?? 0) >= n) return;
    if (Date.now() > deadline) throw new Error(`only ${pollers?.length ?? 0} of ${n} workers polling after ${timeoutMs / 1000} s`);
    await sleep(1_000);
  }
}

const count = async (world: DrillWorld, query: ReturnType<typeof sql>) => ((await world.db.db.execute(query)).rows[0] as { n: number }).n;

export async function runTemporalOutageDrill(opts: {
  outageSeconds: number;
  ratePerSecond: number;
  log: (line: string) => void;
}): Promise<TemporalOutageReport> {
  const { log } = opts;
  const world = await startDrillWorld(
    'temporal-outage',
    { SIMULATOR_GENERATION_MS: '3000', POLL_INITIAL_MS: '2000', POLL_MAX_MS: '4000', WORKER_MAX_CONCURRENT_ACTIVITIES: '100' },
    log,
    { temporalDbFile: true },
  );
  try {
    await world.startWorker('worker-1');
    await world.startWorker('worker-2');
    // A worker that reaches its Temporal connect during the outage exits: on a loaded machine the
    // start-up (bundling included) can outlast the 15 s before the stop, so wait for both to poll.
    await waitForPollers(world, 2, 180_000);
    let phase = 'before';
    const load = startCreateLoad(world, { ratePerSecond: opts.ratePerSecond, prefix: 'temporal-outage', phase: () => phase });
    await sleep(15_000);

    log(`stopping the Temporal server for ${opts.outageSeconds} s`);
    phase = 'outage';
    await world.stopTemporal();
    await sleep(opts.outageSeconds * 1000);
    await world.startTemporal();
    const restartedAt = new Date();
    phase = 'after';
    // Backlogs when Temporal is back: unpublished outbox rows; open tasks.
    const outboxBacklog = await count(world, sql`SELECT count(*)::int AS n FROM outbox_event WHERE published_at IS NULL`);
    const taskBacklog = await count(world, sql`SELECT count(*)::int AS n FROM generation_task WHERE terminal_at IS NULL`);
    log(`Temporal is back: ${outboxBacklog} workflow starts and ${taskBacklog} open tasks waiting`);

    const windowSeconds = 10;
    let outboxDrainedAt: number | null = null;
    let tasksDrainedAt: number | null = null;
    // (seconds since restart, cumulative published, cumulative finished), one sample a second.
    const samples: [number, number, number][] = [];
    const published = () => count(world, sql`SELECT count(*)::int AS n FROM outbox_event WHERE published_at > ${restartedAt}`);
    const finished = () => count(world, sql`SELECT count(*)::int AS n FROM generation_task WHERE terminal_at > ${restartedAt}`);
    // Arrivals go on for a while after the restart (λ during the drain), then stop.
    const loadUntil = Date.now() + 30_000;
    let loadReport: LoadReport | null = null;
    const deadline = Date.now() + 5 * 60_000;
    while (Date.now() < deadline && (outboxDrainedAt === null || tasksDrainedAt === null)) {
      await sleep(1_000);
      const elapsed = (Date.now() - restartedAt.getTime()) / 1000;
      samples.push([elapsed, await published(), await finished()]);
      if (Date.now() > loadUntil && !loadReport) loadReport = await load.stop();
      if (outboxDrainedAt === null) {
        const left = await count(world, sql`SELECT count(*)::int AS n FROM outbox_event WHERE published_at IS NULL AND created_at <= ${restartedAt}`);
        if (left === 0) outboxDrainedAt = Date.now();
      }
      if (tasksDrainedAt === null) {
        const left = await count(world, sql`SELECT count(*)::int AS n FROM generation_task WHERE terminal_at IS NULL AND created_at <= ${restartedAt}`);
        if (left === 0) tasksDrainedAt = Date.now();
        else if (Math.round(elapsed) % 5 === 0) log(`draining: ${left} open tasks from before the restart`);
      }
    }
    loadReport ??= await load.stop();
    const lambda = loadReport.accepted.filter((a) => a.at >= restartedAt.getTime()).length / 30;
    // μ: the best rate sustained over any 10 s window of the drain (what the system can do once warm).
    const until = (at: number | null) => (at === null ? Infinity : (at - restartedAt.getTime()) / 1000);
    const muOutbox = peakRate(
      samples.map(([t, done]) => ({ t, done })),
      windowSeconds,
      until(outboxDrainedAt),
    );
    const muTasks = peakRate(
      samples.map(([t, , done]) => ({ t, done })),
      windowSeconds,
      until(tasksDrainedAt),
    );
    const figures = (backlog: number, mu: number, drainedAt: number | null): DrainFigures =>
      drainFigures(backlog, mu, lambda, drainedAt === null ? null : (drainedAt - restartedAt.getTime()) / 1000);

    const ids = loadReport.accepted.map((a) => a.id);
    const c = await awaitConvergence(world.db, ids.length, 5 * 60_000);
    const inDb = await tasksStored(world.db, ids);
    return {
      outageSeconds: opts.outageSeconds,
      load: loadReport.byPhase,
      serverErrors: loadReport.serverErrors,
      accepted: ids.length,
      missing: ids.length - inDb,
      unconverged: Math.max(0, ids.length - c.settled),
      byStatus: c.byStatus,
      outbox: figures(outboxBacklog, muOutbox, outboxDrainedAt),
      tasks: figures(taskBacklog, muTasks, tasksDrainedAt),
      ledgerImbalance: await ledgerImbalance(world.db),
    };
  } finally {
    await world.close();
  }
}
