// ops reconcile …, ops assets and ops expire-outputs: recovery sets, the scheduled reconcilers and stored outputs.
import { Command, Option } from 'commander';
import { temporalConnection } from '../../config/connections';
import { buildDatabase, buildFallbackStorage, buildStorage } from '../../config/services';
import { acquireFence } from '../../db/fence';
import { reconcileAssets, reconcileAssetsToEnd } from '../../storage/asset-reconciler';
import { expireOutputs } from '../../storage/output-lifecycle';
import { RECONCILERS } from '../../reconcilers';
import { printFindings, printReconcilerStatus } from '../print-reconcile';
import { dryRun, ensureSchedules, reconcilerStatus, triggerAndWait } from '../reconcilers';
import { lazyClient } from '../../temporal/connection';
import { printApply, printReconcileReport } from '../print';
import { DEFAULT_RECONCILE, reconcileApply, reconcileReport, type ReconcileOptions } from '../reconcile';
import { config, cliLogger, fence, actor, duration, print, withDb, withClient, withTemporal } from './context';

export function registerReconcileCommands(program: Command): void {
  const reconcile = program
    .command('reconcile')
    // Its own --dry-run and the subcommands' (run --dry-run) are told apart by position.
    .enablePositionalOptions()
    .description(
      'recovery sets: unpublished outbox, unprocessed inbox, SUBMIT_UNKNOWN, long RUNNING, outputs at risk, unsettled credits; status|run|schedules: the scheduled reconcilers',
    )
    .addOption(new Option('--dry-run', 'report only (default)').conflicts('apply'))
    .addOption(new Option('--apply', 'start missing workflows and wake the tasks (never forces an outcome)'))
    .option('--reason <text>', 'why (audited; required with --apply)')
    .option('--long-running <duration>', 'SUBMITTED/RUNNING this long without change', duration, DEFAULT_RECONCILE.longRunningSeconds)
    .option('--stale <duration>', 'open tasks this long without change', duration, DEFAULT_RECONCILE.staleSeconds)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { apply?: boolean; reason?: string; longRunning: number; stale: number; json: boolean }) => {
      const options: ReconcileOptions = { ...DEFAULT_RECONCILE, longRunningSeconds: o.longRunning, staleSeconds: o.stale };
      if (!o.apply) {
        const report = await withDb((d) => reconcileReport(d.db, options));
        print(o.json, report, () => `reconciliation report (dry run)\n${printReconcileReport(report)}`);
        return;
      }
      if (!o.reason) throw new Error('--apply needs --reason (audited)');
      const reason = o.reason;
      const result = await withDb((d) => withTemporal((facade) => reconcileApply(d.db, facade, { actor, reason, options })));
      print(o.json, result, () => `before\n${printReconcileReport(result.before)}\n\napplied\n${printApply(result.applied)}`);
    });

  reconcile
    .command('status')
    .description("each scheduled reconciler: its Schedule (active, paused, interval, next run) and its last run's report")
    .option('--json', 'print one JSON line', false)
    .action(async (o: { json: boolean }) => {
      const temporal = lazyClient({ connection: temporalConnection(config), namespace: config.TEMPORAL_NAMESPACE });
      const list = await withDb((d) => reconcilerStatus(d, temporal.get, config)).finally(() => temporal.close());
      print(
        o.json,
        list,
        () =>
          `reconcilers\n${printReconcilerStatus(list)}${list
            .filter((s) => s.last && s.last.findings_total > 0)
            .map((s) => `\n\n${printFindings({ ...s.last!, findings: s.last!.findings }, `${s.name} (last run)`)}`)
            .join('')}`,
      );
    });

  reconcile
    .command('run')
    .description("trigger a reconciler's Schedule now and wait for its report; --dry-run: report what it would do, change nothing")
    .argument('<name>', RECONCILERS.map((r) => r.name).join(' | '))
    .option('--dry-run', 'run it here, changing nothing', false)
    .option('--limit <n>', 'at most this many rows or tasks (dry run)', (v) => Number.parseInt(v, 10), config.RECONCILE_BATCH_LIMIT)
    .option('--reason <text>', 'why (audited; required unless --dry-run)')
    .option('--wait <duration>', 'wait this long for the triggered run', duration, 120)
    .option('--json', 'print one JSON line', false)
    .action(async (name: string, o: { dryRun: boolean; limit: number; reason?: string; wait: number; json: boolean }) => {
      if (o.dryRun) {
        const r = await withDb((d) =>
          withTemporal((facade) => dryRun(d, config, { facade, storage: buildStorage(config), logger: cliLogger, name, actor, limit: o.limit })),
        );
        print(o.json, r, () => printFindings(r.report, `${name} (dry run)`));
        return;
      }
      if (!o.reason) throw new Error('run needs --reason (audited), or --dry-run');
      const reason = o.reason;
      const run = await withDb((d) => withClient((client) => triggerAndWait(d, client, config, { name, actor, reason, waitMs: o.wait * 1000 })));
      if (!run) throw new Error(`triggered; no run of ${name} recorded within ${o.wait} s (is a worker polling its reconcile queue? ops reconcile status)`);
      print(
        o.json,
        run,
        () => `${printFindings({ ...run, findings: run.findings }, `${name} (run ${run.run_id})`)}${run.error ? `\nerror: ${run.error}` : ''}`,
      );
    });

  reconcile
    .command('schedules')
    .description('create the reconciler Schedules, or update their interval (an operator pause is kept); npm run dev and the worker do this')
    .option('--json', 'print one JSON line', false)
    .action(async (o: { json: boolean }) => {
      const ids = await withClient((client) => ensureSchedules(client, config));
      print(o.json, { schedules: ids }, () => `reconciler Schedules in place: ${ids.join(', ')}`);
    });

  const storageDeps = (d: ReturnType<typeof buildDatabase>) => ({
    db: d.db,
    storage: buildStorage(config),
    fallbackStorage: buildFallbackStorage(config),
    token: async () => (await acquireFence(d.db, fence.scope, fence.region)).token,
  });
  const printStorageReport = (
    title: string,
    r: { examined: number; changed: number; findings: Array<{ kind: string; taskId?: string; key?: string; detail: string }> },
  ) =>
    [
      `${title}: examined ${r.examined}, changed ${r.changed}, ${r.findings.length} finding(s)`,
      ...r.findings.map((f) => `  ${f.kind.padEnd(18)} ${f.taskId ?? '-'}  ${f.key ?? ''}  ${f.detail}`),
    ].join('\n');

  program
    .command('assets')
    .description('asset rows vs objects in storage: copy fallback objects back, report missing, orphaned and checksum mismatches')
    .option('--apply', 'copy back and remove leftovers of deleted outputs (default: report only)', false)
    .option(
      '--limit <n>',
      'rows and objects examined per check and page (without --all: the first page of each; the scheduled `assets` reconciler pages through them all)',
      (v) => Number.parseInt(v, 10),
      500,
    )
    .option('--all', 'page on until every row and object has been looked at once (a progress line per page on stderr)', false)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { apply: boolean; limit: number; all: boolean; json: boolean }) => {
      const report = await withDb(async (d) => {
        const deps = storageDeps(d);
        if (!o.all) return reconcileAssets(deps, { dryRun: !o.apply, limit: o.limit });
        const all = await reconcileAssetsToEnd(deps, { dryRun: !o.apply, limit: o.limit }, (page, r) =>
          process.stderr.write(`assets: page ${page} done, ${r.examined} examined, ${r.changed} changed, ${r.findings.length} finding(s)\n`),
        );
        // A bucket that did not answer keeps its part where it was: stopped rather than asked again.
        if (all.stalled) process.stderr.write('assets: stopped, storage did not answer (see the unreachable findings); run again once it does\n');
        return all;
      });
      print(o.json, report, () => printStorageReport(`asset reconciler (${o.apply ? 'applied' : 'dry run'}${o.all ? ', every page' : ''})`, report));
    });

  program
    .command('expire-outputs')
    .description("delete the outputs of tasks past their tenant's output retention (OUTPUT_RETENTION_DAYS by default)")
    .option('--apply', 'delete them (default: list only)', false)
    .option('--limit <n>', 'outputs per run', (v) => Number.parseInt(v, 10), 500)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { apply: boolean; limit: number; json: boolean }) => {
      const report = await withDb((d) => {
        const deps = storageDeps(d);
        return expireOutputs(
          { db: d.db, stores: deps, token: deps.token, now: () => new Date(), defaultDays: config.OUTPUT_RETENTION_DAYS },
          { dryRun: !o.apply, limit: o.limit },
        );
      });
      print(o.json, report, () => printStorageReport(`output retention (${o.apply ? 'applied' : 'dry run'})`, report));
    });
}
