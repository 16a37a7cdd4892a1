// Drill: point-in-time recovery from a logical mistake (docs/runbooks/pitr.md). A private
// cluster archives its WAL (archive_mode=on, archive_command copying to a folder); a base backup
// is taken under load; then, still under load, an operator's wrong statement: every SUCCEEDED
// task marked FAILED (a mass update on a mutable table, outside the CAS) and a second tenant's
// API keys deleted. The base backup plus the archive is restored to the moment before into an
// isolated cluster (its own port, archiving off, no process of ours connected), `ops pitr diff`
// compares it with the damaged database, `ops pitr repair` (dry run, then applied) writes the
// corrections under the fence, and a second diff proves nothing is left to repair. Figures:
// RPO (mistake − recovery target), restore time, what differed, what was repaired, the tenant's
// key working again, nothing lost, ledger balanced.
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { sql, type SQL } from 'drizzle-orm';
import { createDatabase, type Db } from '../../db/client';
import { REPO_ROOT, sleep } from '../../harness';
import { pitrDiff, type PitrDiff } from '../../ops/pitr';
import { applyPitrRepair, planPitrRepair, type PitrRepairResult } from '../../ops/pitr-repair';
import { createTenant } from '../../ops/tenants';
import { convergence, ledgerImbalance, providerJobsPerTask, startDrillWorld, waitFor, awaitConvergence, tasksStored } from './harness';
import { tenantLedgerCheck, type TenantLedgerCheck } from './ledger-check';
import { startCreateLoad } from './load';
import { ownedDir, restorePointInTime, startPrivatePostgres, type PrivatePostgres } from './private-postgres';

export interface PitrReport extends TenantLedgerCheck {
  readonly accepted: number;
  readonly serverErrors: number;
  readonly load: Record<string, Record<string, number>>;
  readonly recoveryTarget: string;
  readonly mistakeAt: string;
  /** Mistake − recovery target: what the restored copy lacks (the repair keeps it from the live database). */
  readonly rpoSeconds: number;
  readonly baseBackupSeconds: number;
  readonly walSegmentsArchived: number;
  readonly mistake: { readonly tasksRewritten: number; readonly apiKeysDeleted: number };
  /** One restore, diff and repair each; a second only when the first could not reach every damaged task. */
  readonly rounds: PitrRound[];
  readonly keyRefusedAfterMistake: number;
  readonly keyAnswersAfterRepair: number;
  readonly missing: number;
  readonly unconverged: number;
  readonly byStatus: Record<string, number>;
  readonly tasksWithDuplicateJobs: number;
  readonly ledgerImbalance: number;
}

export interface PitrRound {
  readonly target: string;
  /** Copy of the base backup, WAL replayed to the target, promoted: until read-write. */
  readonly restoreSeconds: number;
  readonly diff: PitrDiff;
  readonly repair: PitrRepairResult & { readonly skipped: number };
  /** Tasks off their record and deleted keys a diff still finds after the repair. */
  readonly leftAfterRepair: number;
}

const one = async <T>(db: Db, q: SQL) => (await db.execute(q)).rows[0] as T;

export async function runPitrDrill(opts: { ratePerSecond: number; loadSeconds: number; log: (line: string) => void }): Promise<PitrReport> {
  const { log } = opts;
  const root = path.join(REPO_ROOT, '.data', 'drill', `pitr_${randomBytes(3).toString('hex')}`);
  const archive = path.join(root, 'wal-archive');
  await ownedDir(archive);
  const primary = await startPrivatePostgres(path.join(root, 'live'), {
    settings: { archive_mode: 'on', archive_command: `test ! -f ${archive}/%f && cp %p ${archive}/%f`, wal_level: 'replica' },
  });
  log(`live cluster on port ${primary.port}, WAL archived to ${archive}`);
  const restoredClusters: PrivatePostgres[] = [];
  try {
    const world = await startDrillWorld(
      'pitr',
      { DATABASE_URL: primary.url, SIMULATOR_GENERATION_MS: '3000', POLL_INITIAL_MS: '2000', POLL_MAX_MS: '4000', WORKER_MAX_CONCURRENT_ACTIVITIES: '100' },
      log,
    );
    try {
      const fence = { scope: world.config.FENCE_SCOPE, region: world.config.REGION };
      const other = await createTenant(world.db.db, {
        name: `pitr-other-${randomBytes(3).toString('hex')}`,
        credits: '1000',
        ifMissing: false,
        actor: 'drill',
        fence,
      });
      await world.startWorker('worker-1');
      await world.startWorker('worker-2');
      let phase = 'before the mistake';
      const load = startCreateLoad(world, { ratePerSecond: opts.ratePerSecond, prefix: 'pitr', phase: () => phase });
      await sleep(3_000);
      const backupStarted = Date.now();
      await primary.baseBackup(path.join(root, 'base'));
      const baseBackupSeconds = (Date.now() - backupStarted) / 1000;
      log(`base backup in ${baseBackupSeconds.toFixed(1)} s`);
      await sleep(opts.loadSeconds * 1000);
      // The mistake must have something to hit: wait for the first tasks to succeed (a cold
      // worker bundles its workflows first).
      await waitFor(async () => ((await convergence(world.db)).byStatus['SUCCEEDED'] ?? 0) >= 10, 120_000);

      // The moment before, from the server's clock (what recovery_target_time compares commits with).
      const { t: recoveryTarget } = await one<{ t: string }>(world.db.db, sql`SELECT clock_timestamp()::text AS t`);
      await sleep(200);
      const mistake = await world.db.db.transaction(async (tx) => {
        const tasks = await tx.execute(
          sql`UPDATE generation_task SET status = 'FAILED', failure_code = 'operator_cleanup', failure_message = 'bulk fail' WHERE status = 'SUCCEEDED'`,
        );
        const keys = await tx.execute(sql`DELETE FROM api_key WHERE tenant_id = ${other.tenant_id}::uuid`);
        // What the server log would show for the statement (log_line_prefix %x): its transaction id.
        const { t, xid } = (await tx.execute(sql`SELECT clock_timestamp()::text AS t, txid_current()::text AS xid`)).rows[0] as { t: string; xid: string };
        return { tasksRewritten: tasks.rowCount ?? 0, apiKeysDeleted: keys.rowCount ?? 0, at: t, xid };
      });
      phase = 'after the mistake';
      log(`the mistake: ${mistake.tasksRewritten} SUCCEEDED tasks marked FAILED, ${mistake.apiKeysDeleted} API key(s) deleted`);
      const keyCheck = async () => (await fetch(`${world.apiUrl}/v1/tasks`, { headers: { authorization: `Bearer ${other.api_key}` } })).status;
      const keyRefusedAfterMistake = await keyCheck();
      await sleep(opts.loadSeconds * 1000);

      // Every WAL segment up to now archived, so the restore can replay past the target.
      const { w } = await one<{ w: string }>(world.db.db, sql`SELECT pg_walfile_name(pg_switch_wal()) AS w`);
      await waitFor(async () => {
        const { last } = await one<{ last: string | null }>(world.db.db, sql`SELECT last_archived_wal AS last FROM pg_stat_archiver`);
        return last !== null && last >= w;
      }, 60_000);
      // Round 1: the moment before, by time. Round 2, only when round 1 names tasks it cannot
      // reach (changed between the target and the mistake): just before the mistake's own
      // transaction (recovery_target_xid, exclusive), as the runbook says.
      const rounds: PitrRound[] = [];
      const targets = [{ time: recoveryTarget }, { beforeXid: mistake.xid }] as const;
      for (const [i, target] of targets.entries()) {
        const started = Date.now();
        const cluster = await restorePointInTime(path.join(root, `restored-${i + 1}`), { baseBackupDir: path.join(root, 'base'), archiveDir: archive, target });
        restoredClusters.push(cluster);
        const restoreSeconds = (Date.now() - started) / 1000;
        const restoredUrl = new URL(world.config.DATABASE_URL);
        restoredUrl.port = String(cluster.port);
        const restored = createDatabase({ url: restoredUrl.toString(), max: 2, applicationName: 'vidorch-drill-restored' });
        try {
          const diff = await pitrDiff(world.db.db, restored.db);
          const plan = planPitrRepair(diff);
          const applied = await applyPitrRepair(world.db.db, plan, { actor: 'operator:drill', reason: 'pitr drill: bulk fail and key deletion', fence });
          const after = await pitrDiff(world.db.db, restored.db);
          rounds.push({
            target: 'time' in target ? `time ${target.time}` : `before xid ${target.beforeXid}`,
            restoreSeconds,
            diff,
            repair: { ...applied, skipped: plan.skipped.length },
            leftAfterRepair: after.tasks.off_record.length + after.deleted_api_keys.length,
          });
          log(
            `round ${i + 1}: restored to ${rounds[i]!.target} in ${restoreSeconds.toFixed(1)} s; ${diff.tasks.rewritten.length} rewritten, ${plan.skipped.length} out of reach, ${diff.deleted_api_keys.length} keys deleted; ${applied.tasks_repaired.length} tasks and ${applied.api_keys_restored.length} keys repaired`,
          );
          if (plan.skipped.length === 0) break;
        } finally {
          await restored.close();
        }
      }
      const keyAnswersAfterRepair = await keyCheck();
      const loadReport = await load.stop();
      const ids = loadReport.accepted.map((a) => a.id);
      const c = await awaitConvergence(world.db, ids.length, 3 * 60_000, {
        progress: (p) => log(`converging: ${p.settled}/${ids.length} ${JSON.stringify(p.byStatus)}`),
      });
      const inDb = await tasksStored(world.db, ids);
      const { n: archived } = await one<{ n: number }>(world.db.db, sql`SELECT archived_count::int AS n FROM pg_stat_archiver`);
      const { s: rpo } = await one<{ s: number }>(
        world.db.db,
        sql`SELECT extract(epoch FROM ${mistake.at}::timestamptz - ${recoveryTarget}::timestamptz)::float8 AS s`,
      );
      const jobs = [...(await providerJobsPerTask(world)).values()];
      return {
        accepted: ids.length,
        serverErrors: loadReport.serverErrors,
        load: loadReport.byPhase,
        recoveryTarget,
        mistakeAt: mistake.at,
        rpoSeconds: rpo,
        baseBackupSeconds,
        walSegmentsArchived: archived,
        mistake: { tasksRewritten: mistake.tasksRewritten, apiKeysDeleted: mistake.apiKeysDeleted },
        rounds,
        keyRefusedAfterMistake,
        keyAnswersAfterRepair,
        missing: ids.length - inDb,
        unconverged: Math.max(0, ids.length - c.settled),
        byStatus: c.byStatus,
        tasksWithDuplicateJobs: jobs.filter((n) => n > 1).length,
        ledgerImbalance: await ledgerImbalance(world.db),
        ...(await tenantLedgerCheck(world.db.db)),
      };
    } finally {
      await world.close();
    }
  } finally {
    for (const c of restoredClusters) await c.destroy();
    await primary.destroy();
    fs.rmSync(root, { recursive: true, force: true });
  }
}
