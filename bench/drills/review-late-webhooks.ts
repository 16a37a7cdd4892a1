// Drill: late webhooks for tasks already parked in MANUAL_REVIEW. Every submit hangs after the
// provider created the job (an unknown outcome), the listing lookups fail and the webhooks are
// held back past the unknown-outcome deadline (set short here), so every task parks in review.
// Then the webhooks arrive. Each task must apply its late webhook, bind its one job and
// converge SUCCEEDED: no second job, nothing lost, the ledger balanced (docs/design.md §5).
import { sql } from 'drizzle-orm';
import { convergence, createTasks, ledgerImbalance, providerJobsPerTask, startDrillWorld, waitFor, awaitConvergence } from './harness';

export interface ReviewLateWebhooksReport {
  readonly tasks: number;
  readonly parkedInReview: number;
  readonly succeeded: number;
  readonly stillInReview: number;
  readonly other: Record<string, number>;
  readonly maxProviderJobsPerTask: number;
  readonly attemptsPerTaskMax: number;
  readonly ledgerImbalance: number;
  readonly lost: number;
  readonly parkSeconds: number;
  readonly convergeSecondsAfterPark: number;
}

export async function runReviewLateWebhooksDrill(opts: {
  tasks: number;
  webhookDelaySeconds: number;
  log: (line: string) => void;
  timeoutMs?: number;
}): Promise<ReviewLateWebhooksReport> {
  const { log } = opts;
  const world = await startDrillWorld(
    'review-late-webhooks',
    {
      SIMULATOR_GENERATION_MS: '1500',
      PROVIDER_HTTP_TIMEOUT_MS: '2000',
      POLL_INITIAL_MS: '500',
      POLL_MAX_MS: '2000',
      UNKNOWN_PROOF_DELAY_MS: '2000',
      UNKNOWN_OUTCOME_DEADLINE_MS: '4000',
      // A parked attempt keeps its provider slot (its job may exist): the whole limit from the start,
      // so every task can park before the first webhook comes (at most Replicate's 50).
      BULKHEAD_RAMP_START_SHARE: '1',
    },
    log,
  );
  try {
    await world.startWorker('worker-a');
    const started = Date.now();
    log(`${opts.tasks} tasks: submits hang, lookups fail, webhooks held back ${opts.webhookDelaySeconds} s`);
    world.sim.setFaults({ submit: 'accept_then_hang', list: 'error_5xx', callback_delay_ms: opts.webhookDelaySeconds * 1000 });
    const ids = await createTasks(world, 'review', opts.tasks);
    const inReview = async () => {
      const { byStatus } = await convergence(world.db);
      log(`parking: ${JSON.stringify(byStatus)}`);
      return byStatus['MANUAL_REVIEW'] ?? 0;
    };
    // The worker process may still be bundling its workflows: wait for the first submits.
    await waitFor(async () => ((await convergence(world.db)).byStatus['QUEUED'] ?? 0) < ids.length, 180_000);
    await waitFor(async () => (await inReview()) === ids.length, opts.webhookDelaySeconds * 1000);
    const parkedInReview = await inReview();
    const parkedAt = Date.now();
    log(`${parkedInReview} tasks parked in MANUAL_REVIEW after ${((parkedAt - started) / 1000).toFixed(1)} s; waiting for the late webhooks`);

    const c = await awaitConvergence(world.db, ids.length, opts.timeoutMs ?? 5 * 60_000, {
      progress: (p) => log(`converging: ${JSON.stringify(p.byStatus)}`),
      done: (p) => (p.byStatus['SUCCEEDED'] ?? 0) + (p.byStatus['FAILED'] ?? 0) + (p.byStatus['CANCELLED'] ?? 0) >= ids.length,
    });
    const convergeSecondsAfterPark = (Date.now() - parkedAt) / 1000;
    const jobs = await providerJobsPerTask(world);
    const { rows } = await world.db.db.execute(sql`SELECT coalesce(max(n), 0)::int AS n FROM (SELECT count(*) AS n FROM task_attempt GROUP BY task_id) a`);
    const { byStatus } = c;
    const other = Object.fromEntries(Object.entries(byStatus).filter(([s]) => s !== 'SUCCEEDED' && s !== 'MANUAL_REVIEW'));
    const known = await world.db.db.execute(sql`SELECT count(*)::int AS n FROM generation_task`);
    return {
      tasks: opts.tasks,
      parkedInReview,
      succeeded: byStatus['SUCCEEDED'] ?? 0,
      stillInReview: byStatus['MANUAL_REVIEW'] ?? 0,
      other,
      maxProviderJobsPerTask: Math.max(0, ...jobs.values()),
      attemptsPerTaskMax: (rows[0] as { n: number }).n,
      ledgerImbalance: await ledgerImbalance(world.db),
      lost: ids.length - (known.rows[0] as { n: number }).n + (byStatus['MANUAL_REVIEW'] ?? 0),
      parkSeconds: (parkedAt - started) / 1000,
      convergeSecondsAfterPark,
    };
  } finally {
    await world.close();
  }
}
