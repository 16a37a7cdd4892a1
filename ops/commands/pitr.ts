// ops pitr …: compare the live database with a restored copy and repair it (docs/runbooks/pitr.md).
import { Command, InvalidArgumentError } from 'commander';
import { buildDatabase } from '../../config/services';
import { pitrDiff } from '../pitr';
import { printPitrDiff, printPitrPlan } from '../pitr-print';
import { applyPitrRepair, planPitrRepair, refusalsOf } from '../pitr-repair';
import { createDatabase } from '../../db/client';
import { fence, actor, print, withDb } from './context';

export function registerPitrCommands(program: Command): void {
  const pitr = program.command('pitr').description('compare the live database with a point-in-time restored copy, and repair the live one from it');

  /** The restored copy's connection (its URL may carry a password: never printed). */
  async function withRestored<T>(
    url: string,
    work: (live: ReturnType<typeof buildDatabase>, restored: ReturnType<typeof buildDatabase>) => Promise<T>,
  ): Promise<T> {
    const restored = createDatabase({ url, max: 2, applicationName: 'vidorch-ops-pitr' });
    try {
      return await withDb((live) => work(live, restored));
    } finally {
      await restored.close();
    }
  }

  pitr
    .command('diff')
    .description('what differs: tasks by status, tasks rewritten outside the CAS, ledger totals per tenant, deleted API keys (reads only)')
    .requiredOption('--restored <url>', 'the restored copy (an isolated cluster, promoted at its recovery target)')
    .option('--json', 'print one JSON line', false)
    .action(async (o: { restored: string; json: boolean }) => {
      const diff = await withRestored(o.restored, (live, restored) => pitrDiff(live.db, restored.db));
      print(o.json, diff, () => printPitrDiff(diff));
    });

  pitr
    .command('repair')
    .description('restore the rewritten tasks (CAS under the fence, a task_transition row each) and re-insert deleted API keys, audited')
    .requiredOption('--restored <url>', 'the restored copy')
    .requiredOption('--reason <text>', 'why (audited), e.g. the incident')
    .option('--apply', 'write the repair (default: a dry run that only prints it)', false)
    .option('--dry-run', 'print what would be written (the default)', false)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { restored: string; reason: string; apply: boolean; dryRun: boolean; json: boolean }) => {
      if (o.apply && o.dryRun) throw new InvalidArgumentError('--apply and --dry-run: choose one');
      const out = await withRestored(o.restored, async (live, restored) => {
        const plan = planPitrRepair(await pitrDiff(live.db, restored.db));
        if (o.apply) return { plan, applied: await applyPitrRepair(live.db, plan, { actor, reason: o.reason, fence }), would_refuse: [] };
        return { plan, applied: null, would_refuse: await refusalsOf(live.db, plan) };
      });
      print(o.json, out, () => printPitrPlan(out.plan, out.applied, out.would_refuse));
    });
}
