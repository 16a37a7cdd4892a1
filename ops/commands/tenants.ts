// ops tenant … and ops key …: tenants, their caps, credits and output retention, and their API keys.
import fs from 'node:fs';
import { Command, InvalidArgumentError, Option } from 'commander';
import { listKeys, revokeKey, rotateKey } from '../keys';
import { createTenant, grantTenantCredits, setTenantOutputRetention } from '../tenants';
import { setTenantLimit } from '../capacity';
import { registerBudgetCommands } from '../budgets';
import { config, fence, actor, credits, duration, providerName, inFlightLimit, print, withDb } from './context';

export function registerTenantCommands(program: Command): void {
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
        () =>
          `${o.name} at ${result.provider === '*' ? 'every provider' : result.provider}: ${show(result.from)} → ${show(result.to)}; audit ${result.auditId}`,
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
        throw new Error(
          'keys on the command line are visible to other users (ps, shell history); use --api-key-file <path>, or --api-key-file - to read stdin',
        );
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
            (k) =>
              `  ${k.key_id}  ${k.key_prefix}…  created ${k.created_at.toISOString()}  ${k.revoked_at ? `revoked ${k.revoked_at.toISOString()}` : 'active'}`,
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

  // Spend budgets of a tenant and of one of its keys (docs/billing.md "Budgets").
  registerBudgetCommands(tenant, key, { withDb: (work) => withDb((d) => work(d.db)), actor, fence });
}
