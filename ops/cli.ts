// The operator CLI: `npm run ops -- <command>`. Readable output by default, --json for scripts.
// Every command that changes something is audited (ops_audit: who, what, when, why).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { temporalConnection } from '../config/connections';
import { loadConfigOrExit } from '../config/env';
import type { Client } from '@temporalio/client';
import { buildDatabase, buildFallbackStorage, buildProviders, buildStorage } from '../config/services';
import { acquireFence } from '../db/fence';
import { reconcileAssets, reconcileAssetsToEnd } from '../storage/asset-reconciler';
import { expireOutputs } from '../storage/output-lifecycle';
import { RECONCILERS } from '../reconcilers';
import { REVIEW_ACTIONS, REVIEW_CLASSES, type ReviewAction, type ReviewClass } from '../domain/review-class';
import type { TaskStatus } from '../domain/states';
import type { BatchPlan } from './batch';
import { applyCancelBatch, parseStatuses, planCancelBatch } from './cancel-batch';
import { applyReviewBatch, classifyReviews, planReviewBatch } from './review-batch';
import { printBatchResults, printClassified, printFindings, printPlan, printReconcilerStatus } from './print-reconcile';
import { dryRun, ensureSchedules, reconcilerStatus, triggerAndWait } from './reconcilers';
import { readFence } from '../db/fence';
import { recentFailovers, recordFirstWrite, setMode } from '../db/modes';
import { requeueDeadLetters, spoolDirFor, spoolStatus } from '../api/spool';
import { modeForbids } from '../domain/modes';
import { toMicros } from '../domain/money';
import { SYSTEM_MODES, type SystemMode } from '../domain/states';
import { createLogger, exitOnUnhandledErrors } from '../observability/logger';
import { lazyClient } from '../temporal/connection';
import { createGenerationFacade, type GenerationFacade } from '../temporal/facade';
import { runFailover } from './failover';
import { parseDuration, table } from './format';
import { inspectTask } from './inspect';
import { escalateTask } from './task-escalate';
import { listKeys, revokeKey, rotateKey } from './keys';
import {
  printApply,
  printFailover,
  printFailoverRecord,
  printFence,
  printInspection,
  printModeTable,
  printProviderQueue,
  printProviderStatus,
  printReconcileReport,
  printReviews,
  printSpoolStatus,
} from './print';
import { changeProviderControl, providerStatus, type ProviderControlChange } from './providers';
import { DEFAULT_RECONCILE, reconcileApply, reconcileReport, type ReconcileOptions } from './reconcile';
import { listReviews, resolveReview, settledAmountOf } from './review';
import { auditOps, createTenant, grantTenantCredits, setTenantOutputRetention } from './tenants';
import { redeliverWebhook, resealWebhookSecrets, tenantWebhooks, webhookDeliveries } from './webhooks';
import { createSecretBox } from '../db/webhook-secrets';
import { WEBHOOK_DELIVERY_STATES, type WebhookDeliveryState } from '../db/schema';
import { providerQueueReport, setTenantLimit } from './capacity';
import { pitrDiff } from './pitr';
import { printPitrDiff, printPitrPlan } from './pitr-print';
import { applyPitrRepair, planPitrRepair, refusalsOf } from './pitr-repair';
import { createDatabase } from '../db/client';

const config = loadConfigOrExit();
// Its answer is on stdout; what went wrong beyond a command's own error goes to stderr, as JSON.
const cliLogger = createLogger({ name: 'ops', level: config.LOG_LEVEL, pretty: false, stderr: true });
exitOnUnhandledErrors(cliLogger);
const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
const actor = `operator:${config.OPS_OPERATOR ?? os.userInfo().username}`;

const credits = (value: string): string => {
  try {
    if (toMicros(value) < 0n) throw new Error();
  } catch {
    throw new InvalidArgumentError('a non-negative decimal amount, e.g. 1000 or 12.5');
  }
  return value;
};
const duration = (value: string): number => {
  try {
    return parseDuration(value);
  } catch (err) {
    throw new InvalidArgumentError((err as Error).message);
  }
};
const systemMode = (value: string): SystemMode => {
  const m = value.toUpperCase().replace(/-/g, '_');
  if (!(SYSTEM_MODES as readonly string[]).includes(m)) throw new InvalidArgumentError(`one of ${SYSTEM_MODES.join(', ')}`);
  return m as SystemMode;
};
/** The providers this deployment's workers can call, with their adapters' in-flight limits. */
const adapterLimits = Object.fromEntries(Object.entries(buildProviders(config)).map(([name, a]) => [name, a.capabilities.maxConcurrency ?? null]));
const providerName = (value: string): string => {
  if (!(value in adapterLimits)) throw new InvalidArgumentError(`one of ${Object.keys(adapterLimits).join(', ')}`);
  return value;
};
const inFlightLimit = (value: string): number | null => {
  if (value === 'none') return null;
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError("a number of jobs (0 or more), or none for the adapter's limit");
  return Number(value);
};
const print = (json: boolean, data: unknown, text: () => string) => console.log(json ? JSON.stringify(data) : text());

async function withDb<T>(work: (db: ReturnType<typeof buildDatabase>) => Promise<T>): Promise<T> {
  const database = buildDatabase(config, 'vidorch-ops');
  try {
    return await work(database);
  } finally {
    await database.close();
  }
}

async function withClient<T>(work: (client: Client) => Promise<T>): Promise<T> {
  const temporal = lazyClient({ connection: temporalConnection(config), namespace: config.TEMPORAL_NAMESPACE });
  try {
    return await work(await temporal.get());
  } finally {
    await temporal.close();
  }
}

async function withTemporal<T>(work: (facade: GenerationFacade) => Promise<T>): Promise<T> {
  const temporal = lazyClient({ connection: temporalConnection(config), namespace: config.TEMPORAL_NAMESPACE });
  try {
    return await work(createGenerationFacade(temporal.get, config.TEMPORAL_TASK_QUEUE, { taskPriority: config.TEMPORAL_TASK_PRIORITY }));
  } finally {
    await temporal.close();
  }
}

const program = new Command('ops').description('vidorch operator commands').showHelpAfterError().enablePositionalOptions();

// ---------------------------------------------------------------------------------------------
// tenants

const tenant = program.command('tenant').description('tenants, API keys and credits');

const weight = (value: string): number => {
  if (!/^[1-9]\d*$/.test(value)) throw new InvalidArgumentError('a whole number, 1 or more');
  return Number(value);
};

tenant
  .command('limit')
  .description("cap a tenant's jobs in flight at one provider (--provider) or over all of them, and set its fair-share weight in the slot queue")
  .requiredOption('--name <name>', 'tenant name')
  .argument('<n|none>', 'jobs in flight at once (0 stops its new submits), or none for no cap', inFlightLimit)
  .option('--provider <provider>', 'the provider (default: over every provider)', providerName)
  .option('--weight <w>', "the tenant's share of a busy provider relative to others (default 1)", weight)
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(async (n: number | null, o: { name: string; provider?: string; weight?: number; reason: string; json: boolean }) => {
    const defaults = {
      perProvider: config.TENANT_MAX_IN_FLIGHT_PER_PROVIDER ?? null,
      total: config.TENANT_MAX_IN_FLIGHT ?? null,
      weight: config.TENANT_SLOT_WEIGHT,
    };
    const result = await withDb((d) =>
      setTenantLimit(d.db, { name: o.name, provider: o.provider ?? '*', maxInFlight: n, weight: o.weight ?? null, actor, reason: o.reason }, defaults),
    );
    const show = (c: { max_in_flight: number | null; weight: number | null }) => `cap ${c.max_in_flight ?? 'none'}, weight ${c.weight ?? 'default'}`;
    print(
      o.json,
      result,
      () => `${o.name} at ${result.provider === '*' ? 'every provider' : result.provider}: ${show(result.from)} → ${show(result.to)}; audit ${result.auditId}`,
    );
  });

/** An API key from a file, or from stdin with "-": never from argv, where `ps` and shell history see it. */
function readApiKey(file: string): string {
  const text = fs.readFileSync(file === '-' ? 0 : file, 'utf8').trim();
  if (!/^\S{24,512}$/.test(text)) throw new Error('the API key file must hold one key: 24 to 512 characters, no spaces');
  return text;
}
// Refused in the action, not by commander, whose message would echo the key.
const keyOnArgv = new Option('--api-key <key>').hideHelp();

tenant
  .command('create')
  .description('create a tenant, issue an API key (shown once) and grant opening credits')
  .requiredOption('--name <name>', 'unique tenant name')
  .option('--credits <amount>', 'opening credit grant', credits, '0')
  .option('--api-key-file <path>', 'use the API key in this file (- reads stdin) instead of generating one')
  .addOption(keyOnArgv)
  .option('--if-missing', 'succeed without changes when the tenant exists (a given key is attached to it, audited)', false)
  .option('--json', 'print one JSON line', false)
  .action(async (o: { name: string; credits: string; apiKey?: string; apiKeyFile?: string; ifMissing: boolean; json: boolean }) => {
    if (o.apiKey !== undefined) {
      throw new Error('keys on the command line are visible to other users (ps, shell history); use --api-key-file <path>, or --api-key-file - to read stdin');
    }
    const apiKey = o.apiKeyFile ? readApiKey(o.apiKeyFile) : undefined;
    const result = await withDb((d) =>
      createTenant(d.db, { name: o.name, credits: o.credits, ifMissing: o.ifMissing, actor, fence, ...(apiKey ? { apiKey } : {}) }),
    );
    // A key is printed only when this run generated it; a given key stays where it came from.
    const shown = { tenant_id: result.tenant_id, created: result.created, key_id: result.key_id, api_key: result.key_generated ? result.api_key : null };
    if (o.json) {
      console.log(JSON.stringify(shown));
    } else if (result.created) {
      console.log(`created tenant ${o.name} (${result.tenant_id}) with ${o.credits} credits; key ${result.key_id}`);
      if (shown.api_key) console.log(`API key (shown once): ${shown.api_key}`);
    } else {
      console.log(`tenant ${o.name} exists (${result.tenant_id}); ${result.key_id ? `it holds the given key ${result.key_id}` : 'nothing changed'}`);
    }
  });

tenant
  .command('grant')
  .description('grant credits to a tenant (a ledger entry)')
  .requiredOption('--name <name>', 'tenant name')
  .requiredOption('--credits <amount>', 'amount to grant', credits)
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { name: string; credits: string; reason: string; json: boolean }) => {
    const result = await withDb((d) => grantTenantCredits(d.db, { ...o, actor, fence }));
    console.log(o.json ? JSON.stringify(result) : `granted ${result.granted} credits to ${o.name} (${result.tenant_id})`);
  });

tenant
  .command('output-retention')
  .description("how long the tenant's outputs are kept after the task ends (ops expire-outputs deletes them after)")
  .requiredOption('--name <name>', 'tenant name')
  .requiredOption('--days <n|default>', 'days (0 keeps forever), or default for OUTPUT_RETENTION_DAYS', (v) => {
    if (v === 'default') return null;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('a whole number of days ≥ 0, or default');
    return n;
  })
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { name: string; days: number | null; reason: string; json: boolean }) => {
    const result = await withDb((d) => setTenantOutputRetention(d.db, { ...o, actor, fence }));
    console.log(
      o.json ? JSON.stringify(result) : `${o.name}: outputs kept ${result.output_retention_days ?? `${config.OUTPUT_RETENTION_DAYS} (default)`} days`,
    );
  });

// ---------------------------------------------------------------------------------------------
// API keys

const key = program.command('key').description("a tenant's API keys (ids and prefixes only; a key is shown once, when issued)");

key
  .command('list')
  .description("the tenant's keys: id, prefix, created, revoked")
  .requiredOption('--tenant <name>', 'tenant name')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { tenant: string; json: boolean }) => {
    const result = await withDb((d) => listKeys(d.db, o.tenant));
    print(o.json, result, () =>
      [
        `keys of ${o.tenant} (${result.tenant_id})`,
        ...result.keys.map(
          (k) => `  ${k.key_id}  ${k.key_prefix}…  created ${k.created_at.toISOString()}  ${k.revoked_at ? `revoked ${k.revoked_at.toISOString()}` : 'active'}`,
        ),
      ].join('\n'),
    );
  });

key
  .command('rotate')
  .description('issue a new key (shown once) and revoke the old one, at once or after a grace period')
  .requiredOption('--tenant <name>', 'tenant name')
  .requiredOption('--key-id <id>', 'the key to replace (ops key list)')
  .option('--grace <duration>', 'the old key keeps working this long, e.g. 0, 10m, 24h', duration, 0)
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { tenant: string; keyId: string; grace: number; reason: string; json: boolean }) => {
    const r = await withDb((d) => rotateKey(d.db, { tenant: o.tenant, keyId: o.keyId, graceSeconds: o.grace, reason: o.reason, actor, fence }));
    print(
      o.json,
      r,
      () => `key ${r.key_id} issued; ${r.old_key_id} revoked at ${r.old_revoked_at.toISOString()}; audit ${r.audit_id}\nAPI key (shown once): ${r.api_key}`,
    );
  });

key
  .command('revoke')
  .description('revoke a key now: requests with it answer 401')
  .requiredOption('--tenant <name>', 'tenant name')
  .requiredOption('--key-id <id>', 'the key to revoke (ops key list)')
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { tenant: string; keyId: string; reason: string; json: boolean }) => {
    const r = await withDb((d) => revokeKey(d.db, { tenant: o.tenant, keyId: o.keyId, reason: o.reason, actor, fence }));
    print(o.json, r, () => `key ${r.key_id} revoked at ${r.revoked_at.toISOString()}; audit ${r.audit_id}`);
  });

// ---------------------------------------------------------------------------------------------
// mode and fence

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

// ---------------------------------------------------------------------------------------------
// provider controls (docs/runbooks/providers.md)

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

// ---------------------------------------------------------------------------------------------
// reconcile, inspect, review

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
    print(o.json, run, () => `${printFindings({ ...run, findings: run.findings }, `${name} (run ${run.run_id})`)}${run.error ? `\nerror: ${run.error}` : ''}`);
  });

reconcile
  .command('schedules')
  .description('create the reconciler Schedules, or update their interval (an operator pause is kept); npm run dev and the worker do this')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { json: boolean }) => {
    const ids = await withClient((client) => ensureSchedules(client, config));
    print(o.json, { schedules: ids }, () => `reconciler Schedules in place: ${ids.join(', ')}`);
  });

// ---------------------------------------------------------------------------------------------
// stored outputs: the asset reconciler and output retention (docs/decisions/0029)

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

const task = program.command('task').description('one task, or a filtered batch of them');

task
  .command('inspect')
  .description('facts, transitions, ledger, inbox, Temporal status and a UI link')
  .argument('<task-id>')
  .option('--json', 'print one JSON line', false)
  .action(async (taskId: string, o: { json: boolean }) => {
    const inspection = await withDb((d) =>
      withTemporal((facade) => inspectTask(d.db, facade, taskId, { baseUrl: config.TEMPORAL_UI_URL, namespace: config.TEMPORAL_NAMESPACE })),
    );
    if (!inspection) throw new Error(`no task ${taskId}`);
    print(o.json, inspection, () => printInspection(inspection));
  });

task
  .command('cancel')
  .description('cancel the open tasks a filter selects, as one audited batch: a dry run first, then --apply --expect <its batch file>')
  .option('--tenant <name>', 'tenant name')
  .option('--provider <provider>', 'provider')
  .option('--status <list>', 'task states, comma separated (e.g. QUEUED,SUBMITTED)', parseStatuses)
  .option('--older-than <duration>', 'created at least this long ago', duration)
  .option('--apply', 'apply the dry run in --expect (default: dry run only)', false)
  .option('--expect <file>', 'the batch file the dry run wrote; tasks that changed since are refused')
  .option('--out <file>', 'dry run: write the batch file here (default: in the temp directory)')
  .option('--limit <n>', 'at most this many tasks', (v) => Number.parseInt(v, 10), 500)
  .option('--rate <n>', 'cancels per second per tenant and provider', Number.parseFloat, 5)
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(
    async (o: {
      tenant?: string;
      provider?: string;
      status?: TaskStatus[];
      olderThan?: number;
      apply: boolean;
      expect?: string;
      out?: string;
      limit: number;
      rate: number;
      reason: string;
      json: boolean;
    }) => {
      if (!o.apply) {
        const filter = {
          ...(o.tenant ? { tenant: o.tenant } : {}),
          ...(o.provider ? { provider: o.provider } : {}),
          ...(o.status ? { statuses: o.status } : {}),
          ...(o.olderThan !== undefined ? { olderThanSeconds: o.olderThan } : {}),
        };
        const plan = await withDb((d) => planCancelBatch(d.db, filter, o.limit));
        const file = batchFile(plan, o.out);
        fs.writeFileSync(file, JSON.stringify(plan, null, 2));
        print(o.json, { ...plan, file }, () => printPlan(plan, file, `npm run ops -- task cancel --apply --expect ${file} --reason '…'`));
        return;
      }
      if (!o.expect) throw new Error('--apply needs --expect <batch file> from the dry run');
      const plan = readPlan(o.expect);
      const operator = actor.replace(/^operator:/, '');
      const r = await withDb((d) =>
        withTemporal((facade) => applyCancelBatch(d.db, facade, plan, { operator, reason: o.reason, ratePerSecond: rate(o.rate), fence })),
      );
      print(o.json, r, () => printBatchResults(r));
    },
  );

task
  .command('escalate')
  .description(
    'park a task in MANUAL_REVIEW from any non-terminal state (audited) and wake its workflow, e.g. one whose step keeps failing; a terminal task is refused (exit 2)',
  )
  .argument('<task-id>')
  .requiredOption('--reason <text>', 'why (audited; the escalation reason `review list` shows)')
  .option('--json', 'print one JSON line', false)
  .action(async (taskId: string, o: { reason: string; json: boolean }) => {
    const r = await withDb((d) => withTemporal((facade) => escalateTask(d.db, facade, { taskId, actor, reason: o.reason, fence })));
    if (r.result === 'refused') {
      if (o.json) console.log(JSON.stringify(r));
      console.error(`ops: task ${taskId} is ${r.status}, a terminal state: refused (nothing to escalate)`);
      process.exitCode = 2;
      return;
    }
    print(o.json, r, () =>
      r.result === 'unchanged'
        ? `task ${taskId} is already in MANUAL_REVIEW; nothing changed`
        : `task ${taskId}: ${r.from} → MANUAL_REVIEW (audited as ${actor}, audit ${r.audit_id}); workflow ${r.woken ? 'woken' : 'not woken (none running, or Temporal did not answer): it re-reads the facts on its next step'}`,
    );
  });

const review = program.command('review').description('the MANUAL_REVIEW queue');

review
  .command('list')
  .description('tasks waiting for a person, oldest first')
  .option('--limit <n>', 'at most this many', (v) => Number.parseInt(v, 10), 100)
  .option('--json', 'print one JSON line', false)
  .action(async (o: { limit: number; json: boolean }) => {
    const items = await withDb((d) => listReviews(d.db, o.limit));
    print(o.json, items, () => `MANUAL_REVIEW (${items.length})\n${printReviews(items)}`);
  });

review
  .command('classify')
  .description('the parked tasks by cause (provider defect, unknown outcome, missing data, terminal elsewhere, code defect) and the actions each allows')
  .addOption(new Option('--class <class>', 'only this class').choices(REVIEW_CLASSES))
  .option('--limit <n>', 'at most this many', (v) => Number.parseInt(v, 10), 1000)
  .option('--json', 'print one JSON line', false)
  .action(async (o: { class?: ReviewClass; limit: number; json: boolean }) => {
    const items = (await withDb((d) => classifyReviews(d.db, { limit: o.limit }))).filter((r) => !o.class || r.class === o.class);
    print(o.json, items, () => printClassified(items));
  });

review
  .command('resolve')
  .description(
    'resolve one task through its workflow (validated against the facts, audited); or, with --class and --action, a whole class as one audited batch: a dry run first, then --apply --expect <its batch file>',
  )
  .argument('[task-id]')
  .addOption(new Option('--bind-job <job-id>', 'the provider job this attempt created').conflicts(['notSubmitted', 'fail', 'class']))
  .addOption(new Option('--not-submitted', 'the provider never received the attempt: a new attempt follows').conflicts(['fail', 'class']))
  .addOption(
    new Option('--fail', 'give up: the task fails and its credits are released (a reservation its ledger settled already keeps that charge)').conflicts([
      'class',
    ]),
  )
  .addOption(new Option('--class <class>', 'bulk: every parked task of this class (ops review classify)').choices(REVIEW_CLASSES))
  .addOption(new Option('--action <action>', 'bulk: what to do with each').choices(REVIEW_ACTIONS))
  .option('--apply', 'bulk: apply the dry run in --expect (default: dry run only)', false)
  .option('--expect <file>', 'bulk: the batch file the dry run wrote; tasks whose evidence changed since are refused')
  .option('--out <file>', 'bulk dry run: write the batch file here (default: in the temp directory)')
  .option('--limit <n>', 'bulk: at most this many tasks', (v) => Number.parseInt(v, 10), 500)
  .option('--rate <n>', 'bulk: resolutions per second per tenant and provider', Number.parseFloat, 2)
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(async (taskId: string | undefined, o: ResolveOpts) => {
    const operator = actor.replace(/^operator:/, '');
    if (o.class || o.action || o.apply || o.expect) return resolveBatch(operator, o);
    if (!taskId) throw new Error('name the task, or a class: --class <class> --action <action>');
    const args = o.bindJob
      ? { kind: 'bind-job' as const, providerJobId: o.bindJob, operator, reason: o.reason }
      : o.notSubmitted
        ? { kind: 'not-submitted' as const, operator, reason: o.reason }
        : o.fail
          ? { kind: 'fail' as const, operator, reason: o.reason }
          : null;
    if (!args) throw new Error('say how: --bind-job <job-id>, --not-submitted or --fail');
    await refuseWhilePaused();
    const facts = await withTemporal((facade) => resolveReview(facade, taskId, args));
    // A fail keeps a settlement the ledger had already (docs/billing.md): say what was charged, since a refund is then a grant.
    const charged = args.kind === 'fail' && facts.status === 'FAILED' ? await withDb((d) => settledAmountOf(d.db, taskId)) : null;
    const kept =
      charged !== null && Number(charged) > 0
        ? `; charged ${charged}, the settlement its ledger already had (a refund is an operator grant: docs/billing.md)`
        : '';
    print(
      o.json,
      { ...facts, ...(charged !== null ? { settled_amount: charged } : {}) },
      () => `task ${taskId} → ${facts.status} (${args.kind}, audited as operator:${operator})${kept}`,
    );
  });

// ---------------------------------------------------------------------------------------------
// tenant webhooks (docs/webhooks.md)

const deliveryState = (value: string): WebhookDeliveryState => {
  if (!(WEBHOOK_DELIVERY_STATES as readonly string[]).includes(value)) throw new InvalidArgumentError(`one of ${WEBHOOK_DELIVERY_STATES.join(', ')}`);
  return value as WebhookDeliveryState;
};
const limit = (value: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 1000) throw new InvalidArgumentError('a whole number from 1 to 1000');
  return n;
};

const webhook = program.command('webhook').description("a tenant's webhook endpoints and deliveries (secrets are never shown)");

webhook
  .command('list')
  .description("the tenant's endpoints: URL, events, enabled, failing since, deliveries pending/delivered/failed; open needs-attention records")
  .requiredOption('--tenant <name>', 'tenant name')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { tenant: string; json: boolean }) => {
    const r = await withDb((d) => tenantWebhooks(d.db, o.tenant));
    print(o.json, r, () =>
      [
        `webhook endpoints of ${o.tenant} (${r.tenant_id})`,
        table(r.endpoints, ['id', 'url', 'events', 'enabled', 'failing_since', 'pending', 'delivered', 'failed', 'disabled_reason']),
        `  tasks' own webhook_url: ${r.task_urls.pending} pending, ${r.task_urls.delivered} delivered, ${r.task_urls.failed} failed`,
        ...(r.attention.length ? ['needs attention:', ...r.attention.map((a) => `  ${a.created_at.toISOString()}  ${a.kind}  ${a.subject_id}`)] : []),
      ].join('\n'),
    );
  });

webhook
  .command('deliveries')
  .description('the delivery log, newest first: state, attempts, the last answer (status, latency, error)')
  .requiredOption('--tenant <name>', 'tenant name')
  .option('--endpoint <id>', 'only this endpoint')
  .option('--task <id>', 'only this task')
  .option('--state <state>', `only ${WEBHOOK_DELIVERY_STATES.join(' | ')}`, deliveryState)
  .option('--limit <n>', 'at most this many', limit, 50)
  .option('--json', 'print one JSON line', false)
  .action(async (o: { tenant: string; endpoint?: string; task?: string; state?: WebhookDeliveryState; limit: number; json: boolean }) => {
    const rows = await withDb((d) =>
      webhookDeliveries(d.db, {
        tenantName: o.tenant,
        limit: o.limit,
        ...(o.endpoint ? { endpointId: o.endpoint } : {}),
        ...(o.task ? { taskId: o.task } : {}),
        ...(o.state ? { state: o.state } : {}),
      }),
    );
    print(o.json, rows, () =>
      table(rows, ['delivery_id', 'event_type', 'task_id', 'state', 'attempts', 'last_status', 'last_latency_ms', 'last_error', 'target']),
    );
  });

webhook
  .command('redeliver')
  .description('send a delivery again now (same event, same webhook-id), its retry schedule started over')
  .argument('<delivery-id>', 'from ops webhook deliveries')
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(async (deliveryId: string, o: { reason: string; json: boolean }) => {
    const r = await withDb((d) => redeliverWebhook(d.db, { deliveryId, reason: o.reason, actor, fence }));
    print(o.json, r, () => `delivery ${r.delivery_id} is due now; audit ${r.audit_id}`);
  });
interface ResolveOpts {
  bindJob?: string;
  notSubmitted?: boolean;
  fail?: boolean;
  class?: ReviewClass;
  action?: ReviewAction;
  apply: boolean;
  expect?: string;
  out?: string;
  limit: number;
  rate: number;
  reason: string;
  json: boolean;
}

// The Update would wait (its activity pauses) until the mode allows fact writes again.
async function refuseWhilePaused() {
  const state = await withDb((d) => readFence(d.db, fence.scope));
  const paused = state && modeForbids(state.mode, 'factWrites');
  if (paused) throw new Error(`${paused}; resolve after \`mode set\``);
}

const batchFile = (plan: BatchPlan, out?: string) => out ?? path.join(os.tmpdir(), `vidorch-${plan.kind}-${plan.fingerprint}.json`);
const readPlan = (file: string): BatchPlan => JSON.parse(fs.readFileSync(file, 'utf8')) as BatchPlan;
const rate = (n: number) => {
  if (!(n > 0 && n <= 100)) throw new Error('--rate is actions per second per tenant and provider, above 0 and at most 100');
  return n;
};

async function resolveBatch(operator: string, o: ResolveOpts) {
  if (!o.apply) {
    if (!o.class || !o.action) throw new Error('a bulk resolution needs --class and --action');
    const plan = await withDb((d) => planReviewBatch(d.db, { cls: o.class!, action: o.action!, limit: o.limit }));
    const file = batchFile(plan, o.out);
    fs.writeFileSync(file, JSON.stringify(plan, null, 2));
    print(o.json, { ...plan, file }, () => printPlan(plan, file, `npm run ops -- review resolve --apply --expect ${file} --reason '…'`));
    return;
  }
  if (!o.expect) throw new Error('--apply needs --expect <batch file> from the dry run');
  const plan = readPlan(o.expect);
  if ((o.class && o.class !== plan.selector['class']) || (o.action && o.action !== plan.selector['action'])) {
    throw new Error(`the batch file is for --class ${String(plan.selector['class'])} --action ${String(plan.selector['action'])}`);
  }
  await refuseWhilePaused();
  const r = await withDb((d) => withTemporal((facade) => applyReviewBatch(d.db, facade, plan, { operator, reason: o.reason, ratePerSecond: rate(o.rate) })));
  print(o.json, r, () => printBatchResults(r));
}

webhook
  .command('reseal')
  .description(
    'after a WEBHOOK_SECRET_KEY rotation: seal every stored signing secret under the current key (the retired one listed in WEBHOOK_SECRET_KEY_PREVIOUS); then the retired key can go',
  )
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { reason: string; json: boolean }) => {
    const box = createSecretBox(config.WEBHOOK_SECRET_KEY, config.WEBHOOK_SECRET_KEY_PREVIOUS);
    const r = await withDb((d) => resealWebhookSecrets(d.db, box, { reason: o.reason, actor, fence }));
    const already = r.examined - r.resealed - r.raced - r.unreadable.length;
    print(o.json, r, () =>
      [
        `${r.examined} signing secrets in use: ${r.resealed} sealed again under the current key, ${already} already were; audit ${r.audit_id}`,
        ...(r.raced > 0 ? [`${r.raced} changed meanwhile (an endpoint rotated its secret): run it again`] : []),
        ...r.unreadable.map((u) => `secret ${u.secret_id} of endpoint ${u.endpoint_id} opens under no configured key`),
        r.unreadable.length > 0
          ? "keep WEBHOOK_SECRET_KEY_PREVIOUS: list the key they were sealed under, or rotate those endpoints' secrets"
          : r.raced > 0
            ? 'run it again before emptying WEBHOOK_SECRET_KEY_PREVIOUS'
            : 'none needs a retired key now: WEBHOOK_SECRET_KEY_PREVIOUS can be emptied (every process runs with the new key)',
      ].join('\n'),
    );
    if (r.unreadable.length > 0 || r.raced > 0) process.exitCode = 1;
  });

const spool = program.command('spool').description("this host's callback spool (callbacks acknowledged while the inbox could not be written)");
const spoolDir = spoolDirFor(config.CALLBACK_SPOOL_DIR, config.DATABASE_URL);

spool
  .command('status')
  .description('callbacks waiting for replay, and the dead letters (lines that could not be applied)')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { json: boolean }) => {
    const st = await spoolStatus(spoolDir);
    print(o.json, st, () => printSpoolStatus(st));
  });

spool
  .command('requeue')
  .description('put every dead letter back in the replay queue (after its cause is fixed; the inbox dedupes)')
  .requiredOption('--reason <text>', 'why (audited)')
  .option('--json', 'print one JSON line', false)
  .action(async (o: { reason: string; json: boolean }) => {
    const requeued = await requeueDeadLetters(spoolDir);
    await withDb((d) =>
      auditOps(d.db, fence, { actor, action: 'spool.requeue', targetType: 'spool', targetId: spoolDir, reason: o.reason, detail: { requeued } }),
    );
    print(o.json, { dir: spoolDir, requeued }, () => `requeued ${requeued} dead letter(s) from ${spoolDir}`);
  });

// ---------------------------------------------------------------------------------------------
// point-in-time recovery (docs/runbooks/pitr.md)

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

try {
  await program.parseAsync(process.argv);
} catch (err) {
  console.error(`ops: ${(err as Error).message}`);
  process.exitCode = 1;
}
