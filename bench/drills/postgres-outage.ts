// Drill: Postgres stops for 30 s under load and comes back (docs/design.md §7: the fact
// database lost). The drill runs its own throwaway cluster (private-postgres.ts), never the machine's.
// Figures: creates answered 503 — never 500 — while it is down; callbacks received meanwhile
// spooled and replayed; no accepted task lost; one provider job per task; ledger balanced.
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { REPO_ROOT, sleep } from '../../harness';
import { ledgerImbalance, providerJobsPerTask, startDrillWorld, awaitConvergence, tasksStored } from './harness';
import { startCreateLoad, type OutageLoadOutcome } from './load';
import { startPrivatePostgres } from './private-postgres';

export interface PostgresOutageReport extends OutageLoadOutcome {
  readonly spooledPeak: number;
  readonly spoolDrainedAfterRestartSeconds: number | null;
  readonly firstAcceptAfterRestartSeconds: number | null;
  readonly maxProviderJobsPerTask: number;
  readonly ledgerImbalance: number;
  readonly convergeSecondsAfterRestart: number;
}

export async function runPostgresOutageDrill(opts: {
  outageSeconds: number;
  ratePerSecond: number;
  log: (line: string) => void;
}): Promise<PostgresOutageReport> {
  const { log } = opts;
  const pg = await startPrivatePostgres(path.join(REPO_ROOT, '.data', 'drill', `pg_${randomBytes(3).toString('hex')}`));
  log(`private PostgreSQL on port ${pg.port}`);
  try {
    const world = await startDrillWorld(
      'postgres-outage',
      {
        DATABASE_URL: pg.url,
        SIMULATOR_GENERATION_MS: '4000',
        POLL_INITIAL_MS: '2000',
        POLL_MAX_MS: '4000',
        CALLBACK_SPOOL_REPLAY_MS: '1000',
        WORKER_MAX_CONCURRENT_ACTIVITIES: '100',
      },
      log,
    );
    try {
      await world.startWorker('worker-1');
      await world.startWorker('worker-2');
      let phase = 'before';
      const load = startCreateLoad(world, { ratePerSecond: opts.ratePerSecond, prefix: 'pg-outage', phase: () => phase });
      await sleep(15_000);

      log(`stopping PostgreSQL for ${opts.outageSeconds} s`);
      phase = 'outage';
      await pg.stop();
      let spooledPeak = 0;
      const outageEnds = Date.now() + opts.outageSeconds * 1000;
      while (Date.now() < outageEnds) {
        spooledPeak = Math.max(spooledPeak, await world.api.spool.pending());
        await sleep(1_000);
      }
      spooledPeak = Math.max(spooledPeak, await world.api.spool.pending());
      await pg.start();
      const restartedAt = Date.now();
      phase = 'after';
      log(`PostgreSQL is back; ${spooledPeak} callbacks were spooled meanwhile`);

      let spoolDrainedAt: number | null = null;
      let firstAcceptAt: number | null = null;
      const afterEnds = Date.now() + 15_000;
      while (Date.now() < afterEnds) {
        if (spoolDrainedAt === null && (await world.api.spool.pending()) === 0) spoolDrainedAt = Date.now();
        if (firstAcceptAt === null && load.acceptedSince(restartedAt) > 0) firstAcceptAt = Date.now();
        await sleep(250);
      }
      const loadReport = await load.stop();
      const ids = loadReport.accepted.map((a) => a.id);

      const c = await awaitConvergence(world.db, ids.length, 5 * 60_000, {
        progress: (p) => log(`converging: ${p.settled}/${ids.length} ${JSON.stringify(p.byStatus)}`),
      });
      const convergeSecondsAfterRestart = (Date.now() - restartedAt) / 1000;
      const inDb = await tasksStored(world.db, ids);
      const jobsPerTask = await providerJobsPerTask(world);
      return {
        outageSeconds: opts.outageSeconds,
        load: loadReport.byPhase,
        serverErrors: loadReport.serverErrors,
        accepted: ids.length,
        missing: ids.length - inDb,
        unconverged: Math.max(0, ids.length - c.settled),
        byStatus: c.byStatus,
        spooledPeak,
        spoolDrainedAfterRestartSeconds: spoolDrainedAt === null ? null : (spoolDrainedAt - restartedAt) / 1000,
        firstAcceptAfterRestartSeconds: firstAcceptAt === null ? null : (firstAcceptAt - restartedAt) / 1000,
        maxProviderJobsPerTask: Math.max(0, ...jobsPerTask.values()),
        ledgerImbalance: await ledgerImbalance(world.db),
        convergeSecondsAfterRestart,
      };
    } finally {
      await world.close();
    }
  } finally {
    await pg.destroy();
  }
}
