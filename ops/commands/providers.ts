// ops provider …: per-provider switches, limits and queues (docs/runbooks/providers.md).
import { Command } from 'commander';
import { printProviderQueue, printProviderStatus } from '../print';
import { changeProviderControl, providerStatus, type ProviderControlChange } from '../providers';
import { providerQueueReport } from '../capacity';
import { capsReport, moderationReport, printCaps, printModeration } from '../provider-outcomes';
import { actor, duration, adapterLimits, providerName, inFlightLimit, print, withDb } from './context';

export function registerProviderCommands(program: Command): void {
  const provider = program
    .command('provider')
    .description("per-provider breaker switch and bulkhead limit (provider_control; every worker's next claim follows)");

  provider
    .command('status')
    .description('each provider: force switch, limit, jobs in flight and waiting (facts), recent rejections')
    .option('--window <duration>', 'count provider rejections this far back', duration, 15 * 60)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { window: number; json: boolean }) => {
      const rows = await withDb((d) => providerStatus(d.db, { adapterLimits, windowSeconds: o.window }));
      print(o.json, rows, () => `providers\n${printProviderStatus(rows)}`);
    });

  const showControl = (c: { force: string | null; max_in_flight: number | null }) => `switch ${c.force ?? 'automatic'}, limit ${c.max_in_flight ?? 'adapter'}`;

  async function changeControl(p: string, change: ProviderControlChange, o: { reason: string; json: boolean }) {
    const result = await withDb((d) => changeProviderControl(d.db, { provider: p, change, actor, reason: o.reason }));
    print(o.json, result, () => `${p}: ${showControl(result.from)} → ${showControl(result.to)}; audit ${result.auditId}`);
  }

  const switches: [string, string, 'open' | 'closed' | null][] = [
    ['force-open', 'stop new submits to the provider (jobs already there go on)', 'open'],
    ['force-close', 'keep submitting whatever the failure rate (the breaker records but never trips)', 'closed'],
    ['clear', 'back to automatic: the breaker decides', null],
  ];
  for (const [name, description, force] of switches) {
    provider
      .command(name)
      .description(description)
      .argument('<provider>', Object.keys(adapterLimits).join(' | '), providerName)
      .requiredOption('--reason <text>', 'why (audited)')
      .option('--json', 'print one JSON line', false)
      .action((p: string, o: { reason: string; json: boolean }) => changeControl(p, { kind: 'force', force }, o));
  }

  provider
    .command('limit')
    .description('set the bulkhead: at most n jobs in flight at the provider, across all workers')
    .argument('<provider>', Object.keys(adapterLimits).join(' | '), providerName)
    .argument('<n|none>', "jobs in flight (0 stops new submits), or none for the adapter's limit", inFlightLimit)
    .requiredOption('--reason <text>', 'why (audited)')
    .option('--json', 'print one JSON line', false)
    .action((p: string, n: number | null, o: { reason: string; json: boolean }) => changeControl(p, { kind: 'limit', maxInFlight: n }, o));

  provider
    .command('queue')
    .description("who waits for the provider's slots, in grant order: position, task, tenant, priority, wait and why (slot_wait facts)")
    .argument('<provider>', Object.keys(adapterLimits).join(' | '), providerName)
    .option('--json', 'print one JSON line', false)
    .action(async (p: string, o: { json: boolean }) => {
      const report = await withDb((d) => providerQueueReport(d.db, p));
      print(o.json, report, () => printProviderQueue(report));
    });

  provider
    .command('caps')
    .description("provider models whose daily allowance of creates is spent (Runway's 429 on create): until when, refusals, tasks waiting unsent")
    .option('--json', 'print one JSON line', false)
    .action(async (o: { json: boolean }) => {
      const report = await withDb((d) => capsReport(d.db));
      print(o.json, report, () => printCaps(report));
    });

  program
    .command('moderation')
    .description("tasks a provider's content moderation refused (CONTENT_MODERATED), per tenant and provider: who keeps sending refused prompts")
    .option('--since <duration>', 'how far back, e.g. 24h or 7d', duration, 7 * 86_400)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { since: number; json: boolean }) => {
      const report = await withDb((d) => moderationReport(d.db, new Date(Date.now() - o.since * 1_000)));
      print(o.json, report, () => printModeration(report));
    });
}
