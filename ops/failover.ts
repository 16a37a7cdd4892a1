// `ops failover --to <region> --incident <id> --accepted-rpo <duration>`: the region switch of
// docs/runbooks/failover.md, in its order, as far as this system can drive it:
//   1. new tasks → RECONCILE_ONLY (no new cost from here on; accepted tasks keep converging)
//   2. record the replication position (pg_current_wal_lsn of the fact source)
//   3. (operator, outside this tool) isolate the old primary, revoke the old region's credentials
//   4. bump write_epoch and make <region> the active one — one transaction, with the failover
//      record (docs/design.md §7) and the audit row; every token of the old region is void from here on
//   5. workers of the new region start polling (their fence watchers), old ones stop
//   6. wait for the first successful write under the new epoch (the RTO's end)
//   7. reconciliation report over the recovery sets, recorded as a failover event row
//   8. the operator reopens gradually with `mode set` (printed, never automatic)
import type { Db } from '../db/client';
import { readFence } from '../db/fence';
import { currentWalPosition, recordFirstWrite, recordReconciliationResult, setMode, switchActiveRegion, type FailoverRecord } from '../db/modes';
import { DEFAULT_RECONCILE, reconcileReport, reportIsClean, type ReconcileOptions, type ReconcileReport } from './reconcile';

export interface FailoverArgs {
  readonly scope: string;
  readonly toRegion: string;
  readonly incidentId: string;
  readonly acceptedRpoSeconds: number;
  readonly operator: string;
  readonly reason: string;
  /** How long to wait for the first write under the new epoch (0: do not wait). */
  readonly awaitWriteMs: number;
  readonly reconcile?: ReconcileOptions;
  readonly log?: (line: string) => void;
}

export interface FailoverStep {
  readonly step: string;
  readonly at: string;
  readonly detail?: string;
}

export interface FailoverResult {
  readonly record: FailoverRecord;
  readonly steps: FailoverStep[];
  readonly report: ReconcileReport;
  /** Seconds from the command's start to the first write under the new epoch (null: none seen yet). */
  readonly rtoSeconds: number | null;
}

/** A short summary of a report, stored on the failover record as its reconciliation result. */
export function reconciliationSummary(r: ReconcileReport) {
  return {
    clean: reportIsClean(r),
    generated_at: r.generatedAt,
    unpublished_outbox: r.unpublishedOutbox.count,
    unprocessed_inbox: r.unprocessedInbox.count,
    submit_unknown: r.submitUnknown.count,
    long_running: r.longRunning.count,
    outputs_at_risk: r.outputsAtRisk.count,
    open_reservations: r.openReservations.count,
    manual_review: r.manualReview.count,
    terminal_unsettled: r.billingAnomalies.terminalUnsettled,
    account_reserved_drift: r.billingAnomalies.accountReservedDrift,
  };
}

export async function runFailover(db: Db, args: FailoverArgs): Promise<FailoverResult> {
  const log = args.log ?? (() => undefined);
  const startedAt = new Date();
  const steps: FailoverStep[] = [];
  const step = (name: string, detail?: string) => {
    const s = { step: name, at: new Date().toISOString(), ...(detail ? { detail } : {}) };
    steps.push(s);
    log(`${s.at}  ${name}${detail ? ` — ${detail}` : ''}`);
  };

  const before = await readFence(db, args.scope);
  if (!before) throw new Error(`no region fence for scope ${args.scope}`);
  if (before.activeRegion === args.toRegion) throw new Error(`${args.toRegion} is already the active region (epoch ${before.epoch})`);
  step('incident declared', `${args.incidentId}: ${before.activeRegion} → ${args.toRegion} by ${args.operator}`);

  if (before.mode !== 'RECONCILE_ONLY') {
    await setMode(db, {
      scope: args.scope,
      mode: 'RECONCILE_ONLY',
      actor: args.operator,
      reason: `failover ${args.incidentId}: stop new cost (${args.reason})`,
    });
  }
  step('admission → RECONCILE_ONLY', `was ${before.mode}`);

  const position = await currentWalPosition(db);
  step('replication position recorded', `pg_current_wal_lsn ${position}`);
  step(
    "isolate the old primary and revoke the old region's write credentials",
    'operator action outside this tool; the epoch bump below fences the application either way',
  );

  const record = await switchActiveRegion(db, {
    scope: args.scope,
    toRegion: args.toRegion,
    incidentId: args.incidentId,
    operator: args.operator,
    reason: args.reason,
    replicationPosition: position,
    acceptedRpoSeconds: args.acceptedRpoSeconds,
    startedAt,
  });
  step('write_epoch bumped, active region switched', `epoch ${record.old_epoch} → ${record.new_epoch}, ${record.old_region} → ${record.new_region}`);

  let latest: FailoverRecord = record;
  if (args.awaitWriteMs > 0) {
    const deadline = Date.now() + args.awaitWriteMs;
    while (!latest.first_successful_write_time && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
      latest = (await recordFirstWrite(db, record.failover_id)) ?? latest;
    }
  }
  step(
    'first successful write under the new epoch',
    latest.first_successful_write_time
      ? latest.first_successful_write_time.toISOString()
      : `none within ${Math.round(args.awaitWriteMs / 1000)} s (nothing in flight, or no worker of ${args.toRegion} running); \`ops fence status\` records it later`,
  );

  const report = await reconcileReport(db, args.reconcile ?? DEFAULT_RECONCILE);
  const summary = reconciliationSummary(report);
  await recordReconciliationResult(db, record.failover_id, summary);
  step('reconciliation report', summary.clean ? 'clean' : 'items to converge — see below; `ops reconcile --apply` wakes them');
  latest = { ...latest, reconciliation_result: summary };

  const rtoSeconds = latest.first_successful_write_time ? (latest.first_successful_write_time.getTime() - startedAt.getTime()) / 1000 : null;
  return { record: latest, steps, report, rtoSeconds };
}
