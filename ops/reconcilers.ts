// `ops reconcile status|run|schedules`: the scheduled reconcilers (docs/runbooks/reconcilers.md).
// status: each one's last report and its Schedule's state; run: trigger its Schedule (as the
// Temporal UI does) and wait for the run it records, or a dry run in this process; schedules:
// create or update them (npm run dev does, the worker does at start).
import type { Client } from '@temporalio/client';
import { and, desc, eq, gt } from 'drizzle-orm';
import type { Config } from '../config/env';
import { buildReconcileDeps } from '../config/services';
import type { Database } from '../db/client';
import { reconcileRun, type ReconcileRunRow } from '../db/schema';
import type { Logger } from '../observability/logger';
import { RECONCILERS, reconcilerNamed } from '../reconcilers';
import { latestRuns, runReconciler } from '../reconcilers/run';
import { describeSchedules, ensureReconcileSchedules, scheduleIdFor, triggerReconciler, type ScheduleState } from '../reconcilers/schedules';
import { reconcileIntervalMs } from '../reconcilers/settings';
import type { ObjectStorage } from '../storage/s3';
import type { GenerationFacade } from '../temporal/facade';
import { recordAudit } from '../db/audit';

export interface ReconcilerStatus {
  readonly name: string;
  readonly schedule: ScheduleState;
  readonly last: ReconcileRunRow | null;
}

export async function reconcilerStatus(db: Database, client: () => Promise<Client>, config: Config): Promise<ReconcilerStatus[]> {
  const names = RECONCILERS.map((r) => r.name);
  const queue = config.TEMPORAL_TASK_QUEUE;
  // The last runs are in Postgres: shown even while Temporal cannot be reached.
  const unreachable = (err: unknown): ScheduleState[] =>
    names.map((name) => ({
      name,
      scheduleId: scheduleIdFor(queue, name),
      paused: false,
      note: `Temporal unreachable: ${(err as Error).message}`,
      intervalMs: null,
      nextRunAt: null,
      running: 0,
    }));
  const [runs, schedules] = await Promise.all([
    latestRuns(db.db),
    client()
      .then((c) => describeSchedules(c, queue, names))
      .catch(unreachable),
  ]);
  return names.map((name, i) => ({ name, schedule: schedules[i]!, last: runs.find((r) => r.reconciler === name) ?? null }));
}

export function ensureSchedules(client: Client, config: Config): Promise<string[]> {
  return ensureReconcileSchedules(
    client,
    config.TEMPORAL_TASK_QUEUE,
    RECONCILERS.map((r) => ({ name: r.name, intervalMs: reconcileIntervalMs(config, r.name) })),
  );
}

/** Triggers the reconciler's Schedule (audited) and waits up to `waitMs` for the run it records. */
export async function triggerAndWait(
  db: Database,
  client: Client,
  config: Config,
  args: { name: string; actor: string; reason: string; waitMs: number },
): Promise<ReconcileRunRow | null> {
  reconcilerNamed(args.name);
  const since = new Date();
  await triggerReconciler(client, config.TEMPORAL_TASK_QUEUE, args.name);
  await recordAudit(db.db, {
    actor: args.actor,
    action: 'reconcile.trigger',
    targetType: 'schedule',
    targetId: scheduleIdFor(config.TEMPORAL_TASK_QUEUE, args.name),
    reason: args.reason,
    detail: { reconciler: args.name },
  });
  const deadline = Date.now() + args.waitMs;
  while (Date.now() < deadline) {
    const [run] = await db.db
      .select()
      .from(reconcileRun)
      .where(and(eq(reconcileRun.reconciler, args.name), eq(reconcileRun.dry_run, false), gt(reconcileRun.started_at, since)))
      .orderBy(desc(reconcileRun.started_at))
      .limit(1);
    if (run) return run;
    await new Promise((r) => setTimeout(r, 500));
  }
  return null;
}

/** A dry run in this process: what the reconciler would do, recorded as a dry run; changes nothing. */
export async function dryRun(
  db: Database,
  config: Config,
  parts: { facade: GenerationFacade; storage: ObjectStorage; logger: Logger; name: string; actor: string; limit: number },
) {
  const deps = buildReconcileDeps(config, { db, storage: parts.storage, facade: parts.facade, logger: parts.logger });
  return runReconciler(deps, reconcilerNamed(parts.name), { dryRun: true, limit: parts.limit, actor: parts.actor });
}
