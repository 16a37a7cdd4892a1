// Drill: the primary S3 server stops under load while the provider's output URLs expire within
// minutes (SIMULATOR_OUTPUT_TTL_MS). Rescues go to the fallback bucket (docs/decisions/0029);
// once the primary is back the asset reconciler copies them home. Figures: outputs rescued to
// the fallback, outputs lost (must be 0 while the fallback is up), copied back, ledger balanced,
// time to converge.
import { and, eq, isNull, sql } from 'drizzle-orm';
import { buildFallbackStorage, buildStorage } from '../../config/services';
import { acquireFence } from '../../db/fence';
import { asset } from '../../db/schema';
import { sleep } from '../../harness';
import { reconcileAssets } from '../../storage/asset-reconciler';
import { convergence, createTasks, ledgerImbalance, providerJobsPerTask, startDrillWorld, waitFor } from './harness';

export interface StorageOutageReport {
  readonly tasks: number;
  readonly outageSeconds: number;
  readonly outputTtlSeconds: number;
  readonly byStatus: Record<string, number>;
  readonly unconverged: number;
  readonly rescuedToFallback: number;
  readonly rescuedToPrimary: number;
  readonly outputsLost: number;
  /** Videos copied back; with their thumbnails, copiedBackObjects. */
  readonly copiedBack: number;
  readonly copiedBackObjects: number;
  readonly leftInFallback: number;
  readonly secondReconcileChanged: number;
  readonly maxProviderJobsPerTask: number;
  readonly ledgerImbalance: number;
  /** From the stop until every task was terminal. */
  readonly convergeSeconds: number;
  /** Whether that happened while the primary was still down (on the fallback alone). */
  readonly convergedWhileDown: boolean;
  readonly copyBackSeconds: number;
}

export async function runStorageOutageDrill(opts: {
  tasks: number;
  outageSeconds: number;
  outputTtlSeconds: number;
  log: (line: string) => void;
}): Promise<StorageOutageReport> {
  const { log } = opts;
  const world = await startDrillWorld(
    'storage-outage',
    {
      SIMULATOR_GENERATION_MS: '3000',
      SIMULATOR_OUTPUT_TTL_MS: String(opts.outputTtlSeconds * 1000),
      OUTPUT_AT_RISK_MARGIN_MS: String(Math.floor((opts.outputTtlSeconds * 1000) / 2)),
      POLL_INITIAL_MS: '2000',
      POLL_MAX_MS: '4000',
      WORKER_MAX_CONCURRENT_ACTIVITIES: '100',
    },
    log,
  );
  try {
    await world.startWorker('worker-1');
    await world.startWorker('worker-2');
    log(`creating ${opts.tasks} tasks; provider output URLs expire ${opts.outputTtlSeconds} s after completion`);
    const ids = await createTasks(world, 'storage-outage', opts.tasks, 8);
    // Stop once the first outputs are ready to rescue, so the outage meets the rescue wave.
    await waitFor(async () => ((await convergence(world.db)).byStatus['PROVIDER_SUCCEEDED'] ?? 0) > 0, 120_000).catch(() => undefined);
    log(`stopping the primary S3 for ${opts.outageSeconds} s`);
    const stoppedAt = Date.now();
    await world.stopS3();

    let c = await convergence(world.db);
    // Converged: every task terminal, whether the primary is back yet or not.
    let convergedAt: number | null = null;
    const outageEnds = stoppedAt + opts.outageSeconds * 1000;
    while (Date.now() < outageEnds) {
      if (convergedAt === null) log(`primary down: ${c.settled}/${ids.length} ${JSON.stringify(c.byStatus)}`);
      await sleep(1_000);
      c = await convergence(world.db);
      if (convergedAt === null && c.settled >= ids.length) convergedAt = Date.now();
    }
    const convergedWhileDown = convergedAt !== null;
    await world.startS3();
    log('primary S3 is back');
    const deadline = Date.now() + 5 * 60_000;
    while (c.settled < ids.length && Date.now() < deadline) {
      log(`converging: ${c.settled}/${ids.length} ${JSON.stringify(c.byStatus)}`);
      await sleep(2_000);
      c = await convergence(world.db);
    }
    const convergeSeconds = ((convergedAt ?? Date.now()) - stoppedAt) / 1000;
    const count = async (location: 'primary' | 'fallback') =>
      (
        await world.db.db
          .select({ n: sql<number>`count(*)::int` })
          .from(asset)
          .where(and(eq(asset.kind, 'video'), eq(asset.location, location), isNull(asset.deleted_at)))
      )[0]?.n ?? 0;
    // Videos only: a thumbnail sits next to its video.
    const rescuedToFallback = await count('fallback');
    const rescuedToPrimary = await count('primary');
    const { rows } = await world.db.db.execute(sql`SELECT count(*)::int AS n FROM generation_task WHERE failure_code = 'OUTPUT_LOST'`);
    const outputsLost = (rows[0] as { n: number }).n;

    const deps = {
      db: world.db.db,
      storage: buildStorage(world.config),
      fallbackStorage: buildFallbackStorage(world.config),
      token: async () => (await acquireFence(world.db.db, world.config.FENCE_SCOPE, world.config.REGION)).token,
    };
    const copyStarted = Date.now();
    let copiedBack = 0;
    let copiedBackObjects = 0;
    for (let round = 0; round < 10; round += 1) {
      const r = await reconcileAssets(deps, { dryRun: false, limit: 1000 });
      const copied = r.findings.filter((f) => f.kind === 'copied_back');
      copiedBackObjects += copied.length;
      copiedBack += copied.filter((f) => f.key?.includes('/output.')).length;
      if ((await count('fallback')) === 0) break;
    }
    const copyBackSeconds = (Date.now() - copyStarted) / 1000;
    const second = await reconcileAssets(deps, { dryRun: false, limit: 1000 });
    const jobs = await providerJobsPerTask(world);
    return {
      tasks: ids.length,
      outageSeconds: opts.outageSeconds,
      outputTtlSeconds: opts.outputTtlSeconds,
      byStatus: c.byStatus,
      unconverged: Math.max(0, ids.length - c.settled),
      rescuedToFallback,
      rescuedToPrimary,
      outputsLost,
      copiedBack,
      copiedBackObjects,
      leftInFallback: await count('fallback'),
      secondReconcileChanged: second.changed,
      maxProviderJobsPerTask: Math.max(0, ...jobs.values()),
      ledgerImbalance: await ledgerImbalance(world.db),
      convergeSeconds,
      convergedWhileDown,
      copyBackSeconds,
    };
  } finally {
    await world.close();
  }
}
