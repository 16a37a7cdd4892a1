// ops mode …, ops fence status and ops failover: the system mode and the region fence (docs/modes.md).
import { Command } from 'commander';
import { readFence } from '../../db/fence';
import { recentFailovers, recordFirstWrite, setMode } from '../../db/modes';
import { SYSTEM_MODES, type SystemMode } from '../../domain/states';
import { runFailover } from '../failover';
import { printFailover, printFailoverRecord, printFence, printModeTable } from '../print';
import { fence, actor, duration, systemMode, print, withDb } from './context';

export function registerSystemCommands(program: Command): void {
  const mode = program.command('mode').description('the system mode (docs/modes.md)');

  mode
    .command('get')
    .description('the current mode, region and epoch, and what the mode allows')
    .option('--json', 'print one JSON line', false)
    .action(async (o: { json: boolean }) => {
      const state = await withDb((d) => readFence(d.db, fence.scope));
      if (!state) throw new Error(`no region fence for scope ${fence.scope}; run migrations`);
      print(o.json, state, () => `${printFence(state)}\n\nall modes\n${printModeTable()}`);
    });

  mode
    .command('set')
    .description('set the mode; every process follows within 2 s')
    .argument('<mode>', SYSTEM_MODES.join(' | '), systemMode)
    .requiredOption('--reason <text>', 'why (audited)')
    .option('--json', 'print one JSON line', false)
    .action(async (m: SystemMode, o: { reason: string; json: boolean }) => {
      const change = await withDb((d) => setMode(d.db, { scope: fence.scope, mode: m, actor, reason: o.reason }));
      print(
        o.json,
        change,
        () => `mode ${change.from.mode} → ${change.to.mode} (region ${change.to.activeRegion}, epoch ${change.to.epoch}); audit ${change.auditId}`,
      );
    });

  program
    .command('fence')
    .description('the region write fence')
    .command('status')
    .description('active region, epoch, mode, recent failovers')
    .option('--json', 'print one JSON line', false)
    .action(async (o: { json: boolean }) => {
      const { state, failovers } = await withDb(async (d) => {
        const state = await readFence(d.db, fence.scope);
        if (!state) throw new Error(`no region fence for scope ${fence.scope}; run migrations`);
        const recent = await recentFailovers(d.db, fence.scope);
        // Fill in first writes that happened after the failover command returned.
        const failovers = await Promise.all(recent.map(async (f) => (await recordFirstWrite(d.db, f.failover_id)) ?? f));
        return { state, failovers };
      });
      print(o.json, { fence: state, this_region: fence.region, failovers }, () =>
        [
          printFence(state),
          '',
          `  this process's REGION is ${fence.region}: ${state.activeRegion === fence.region ? 'active' : 'NOT active (its workers stand by)'}`,
          '',
          `recent failovers (${failovers.length})`,
          ...failovers.map((f) => `${printFailoverRecord(f)}\n`),
        ].join('\n'),
      );
    });

  program
    .command('failover')
    .description('switch the active region (docs/runbooks/failover.md): RECONCILE_ONLY, epoch bump, new region, audit record, reconciliation report')
    .requiredOption('--to <region>', 'the region to make active')
    .requiredOption('--incident <id>', 'incident id (recorded)')
    .requiredOption('--accepted-rpo <duration>', 'data loss the incident commander accepted, e.g. 0, 30s, 5m', duration)
    .option('--reason <text>', 'why (audited)', 'region failover')
    .option('--await-write <duration>', 'wait this long for the first write under the new epoch', duration, 60)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { to: string; incident: string; acceptedRpo: number; reason: string; awaitWrite: number; json: boolean }) => {
      const result = await withDb((d) =>
        runFailover(d.db, {
          scope: fence.scope,
          toRegion: o.to,
          incidentId: o.incident,
          acceptedRpoSeconds: o.acceptedRpo,
          operator: actor,
          reason: o.reason,
          awaitWriteMs: o.awaitWrite * 1000,
          ...(o.json ? {} : { log: (line: string) => console.log(`failover: ${line}`) }),
        }),
      );
      print(o.json, result, () => `\n${printFailover(result, false)}`);
    });
}
