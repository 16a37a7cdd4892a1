// Drill: the facts database switches over to its streaming standby under load (docs/design.md §7;
// docs/runbooks/pg-switchover.md). Two private clusters: a primary and a standby made with
// pg_basebackup -R, synchronous (synchronous_standby_names), so every acknowledged commit is on
// the standby before the client hears of it: RPO = 0 for commits. The primary is stopped as a
// crash would (pg_ctl stop -m immediate), the standby promoted after a detection delay, and the
// API and workers — every pool built with DATABASE_FAILOVER_HOSTS (docs/decisions/0030) — find
// the new primary by themselves. Figures: RTO (stop → first accepted create), creates answered
// 503 meanwhile (never 500), accepted tasks lost 0 and all converged, outbox and inbox rows
// committed before the stop all on the new primary, one provider job per task, ledger balanced.
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { Db } from '../../db/client';
import { REPO_ROOT, sleep } from '../../harness';
import { ledgerImbalance, providerJobsPerTask, startDrillWorld, waitFor, awaitConvergence, tasksStored } from './harness';
import { tenantLedgerCheck, type TenantLedgerCheck } from './ledger-check';
import { startCreateLoad, type OutageLoadOutcome } from './load';
import { startPrivatePostgres, startStandby } from './private-postgres';

export interface PgSwitchoverReport extends OutageLoadOutcome, TenantLedgerCheck {
  readonly synchronous: boolean;
  /** Seconds from the primary's stop to the promotion command (the detection delay). */
  readonly promoteAfterSeconds: number;
  readonly promoteCommandSeconds: number;
  /** Primary stopped → first create answered 202 by the new primary. */
  readonly rtoSeconds: number | null;
  /** Creates answered 503 between the stop and the first 202 after it. */
  readonly creates503DuringSwitch: number;
  /** Outbox and inbox rows read on the primary just before the stop, missing on the new primary. */
  readonly outboxRowsMissing: number;
  readonly inboxRowsMissing: number;
  readonly outboxUnpublishedAtEnd: number;
  readonly spooledPeak: number;
  readonly maxProviderJobsPerTask: number;
  readonly tasksWithDuplicateJobs: number;
  readonly ledgerImbalance: number;
  readonly convergeSecondsAfterPromote: number;
}

const ids = async (db: Db, query: ReturnType<typeof sql>) => ((await db.execute(query)).rows as { id: string }[]).map((r) => r.id);
const missing = async (db: Db, table: 'outbox_event' | 'callback_inbox', column: 'event_id' | 'inbox_id', wanted: string[]) => {
  if (wanted.length === 0) return 0;
  const { rows } = await db.execute(
    sql`SELECT count(*)::int AS n FROM ${sql.identifier(table)} WHERE ${sql.identifier(column)} = ANY(${`{${wanted.join(',')}}`}::uuid[])`,
  );
  return wanted.length - (rows[0] as { n: number }).n;
};

export async function runPgSwitchoverDrill(opts: {
  ratePerSecond: number;
  loadSeconds: number;
  promoteAfterSeconds: number;
  synchronous: boolean;
  log: (line: string) => void;
}): Promise<PgSwitchoverReport> {
  const { log } = opts;
  const root = path.join(REPO_ROOT, '.data', 'drill', `pg_switchover_${randomBytes(3).toString('hex')}`);
  const primary = await startPrivatePostgres(path.join(root, 'primary'), {
    settings: opts.synchronous ? { synchronous_standby_names: 'standby1', synchronous_commit: 'on' } : {},
  });
  const standby = await startStandby(path.join(root, 'standby'), primary, 'standby1').catch(async (err: unknown) => {
    await primary.destroy();
    throw err;
  });
  log(`primary on port ${primary.port}, ${opts.synchronous ? 'synchronous' : 'asynchronous'} standby on port ${standby.port}`);
  try {
    const world = await startDrillWorld(
      'pg-switchover',
      {
        DATABASE_URL: primary.url,
        DATABASE_FAILOVER_HOSTS: `127.0.0.1:${standby.port}`,
        SIMULATOR_GENERATION_MS: '4000',
        POLL_INITIAL_MS: '2000',
        POLL_MAX_MS: '4000',
        CALLBACK_SPOOL_REPLAY_MS: '1000',
        WORKER_MAX_CONCURRENT_ACTIVITIES: '100',
      },
      log,
    );
    try {
      if (opts.synchronous) {
        await waitFor(async () => {
          const { rows } = await world.db.db.execute(
            sql`SELECT count(*)::int AS n FROM pg_stat_replication WHERE application_name = 'standby1' AND sync_state = 'sync'`,
          );
          return (rows[0] as { n: number }).n === 1;
        }, 30_000);
        log('standby1 streams synchronously');
      }
      await world.startWorker('worker-1');
      await world.startWorker('worker-2');
      let phase = 'before';
      const load = startCreateLoad(world, { ratePerSecond: opts.ratePerSecond, prefix: 'pg-switchover', phase: () => phase });
      await sleep(opts.loadSeconds * 1000);

      // What the primary holds a moment before it stops: it must all be on the new primary.
      const outboxBefore = await ids(world.db.db, sql`SELECT event_id::text AS id FROM outbox_event`);
      const inboxBefore = await ids(world.db.db, sql`SELECT inbox_id::text AS id FROM callback_inbox`);
      log(`stopping the primary (immediate) with ${outboxBefore.length} outbox and ${inboxBefore.length} inbox rows`);
      phase = 'switch';
      await primary.crash();
      const stoppedAt = Date.now();
      let spooledPeak = 0;
      while (Date.now() < stoppedAt + opts.promoteAfterSeconds * 1000) {
        spooledPeak = Math.max(spooledPeak, await world.api.spool.pending());
        await sleep(250);
      }
      const promoteStarted = Date.now();
      await standby.promote();
      const promotedAt = Date.now();
      log(`standby promoted in ${((promotedAt - promoteStarted) / 1000).toFixed(2)} s`);

      let firstAcceptAt: number | null = null;
      const afterEnds = promotedAt + opts.loadSeconds * 1000;
      while (Date.now() < afterEnds) {
        spooledPeak = Math.max(spooledPeak, await world.api.spool.pending());
        if (firstAcceptAt === null && load.firstAcceptedSince(stoppedAt) !== null) {
          firstAcceptAt = load.firstAcceptedSince(stoppedAt);
          phase = 'after';
          log(`first create accepted ${(((firstAcceptAt ?? 0) - stoppedAt) / 1000).toFixed(2)} s after the stop`);
        }
        await sleep(100);
      }
      const loadReport = await load.stop();
      const accepted = loadReport.accepted.map((a) => a.id);

      const c = await awaitConvergence(world.db, accepted.length, 3 * 60_000, {
        progress: (p) => log(`converging: ${p.settled}/${accepted.length} ${JSON.stringify(p.byStatus)}`),
      });
      const convergeSecondsAfterPromote = (Date.now() - promotedAt) / 1000;
      await waitFor(async () => (await world.api.spool.pending()) === 0, 30_000).catch(() => undefined);
      const inDb = await tasksStored(world.db, accepted);
      const { rows: unpublished } = await world.db.db.execute(sql`SELECT count(*)::int AS n FROM outbox_event WHERE published_at IS NULL`);
      const jobs = [...(await providerJobsPerTask(world)).values()];
      return {
        outageSeconds: (firstAcceptAt ?? Date.now()) / 1000 - stoppedAt / 1000,
        load: loadReport.byPhase,
        serverErrors: loadReport.serverErrors,
        accepted: accepted.length,
        missing: accepted.length - inDb,
        unconverged: Math.max(0, accepted.length - c.settled),
        byStatus: c.byStatus,
        synchronous: opts.synchronous,
        promoteAfterSeconds: opts.promoteAfterSeconds,
        promoteCommandSeconds: (promotedAt - promoteStarted) / 1000,
        rtoSeconds: firstAcceptAt === null ? null : (firstAcceptAt - stoppedAt) / 1000,
        creates503DuringSwitch: loadReport.byPhase['switch']?.['503'] ?? 0,
        outboxRowsMissing: await missing(world.db.db, 'outbox_event', 'event_id', outboxBefore),
        inboxRowsMissing: await missing(world.db.db, 'callback_inbox', 'inbox_id', inboxBefore),
        outboxUnpublishedAtEnd: (unpublished[0] as { n: number }).n,
        spooledPeak,
        maxProviderJobsPerTask: Math.max(0, ...jobs),
        tasksWithDuplicateJobs: jobs.filter((n) => n > 1).length,
        ledgerImbalance: await ledgerImbalance(world.db),
        ...(await tenantLedgerCheck(world.db.db)),
        convergeSecondsAfterPromote,
      };
    } finally {
      await world.close();
    }
  } finally {
    await standby.destroy();
    await primary.destroy();
    await rm(root, { recursive: true, force: true });
  }
}
