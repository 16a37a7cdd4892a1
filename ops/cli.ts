// The operator CLI: `npm run ops -- <command>`. Readable output by default, --json for scripts.
import os from 'node:os';
import { Command, InvalidArgumentError } from 'commander';
import { loadConfigOrExit } from '../config/env';
import { buildDatabase } from '../config/services';
import { toMicros } from '../domain/money';
import { createTenant, grantTenantCredits } from './tenants';

const config = loadConfigOrExit();
const fence = { scope: config.FENCE_SCOPE, region: config.REGION };
const actor = `operator:${process.env['USER'] ?? os.userInfo().username}`;

const credits = (value: string): string => {
  try {
    if (toMicros(value) < 0n) throw new Error();
  } catch {
    throw new InvalidArgumentError('a non-negative decimal amount, e.g. 1000 or 12.5');
  }
  return value;
};

async function withDb<T>(work: (db: ReturnType<typeof buildDatabase>) => Promise<T>): Promise<T> {
  const database = buildDatabase(config, 'vidorch-ops');
  try {
    return await work(database);
  } finally {
    await database.close();
  }
}

const program = new Command('ops').description('vidorch operator commands').showHelpAfterError();
const tenant = program.command('tenant').description('tenants, API keys and credits');

tenant
  .command('create')
  .description('create a tenant, issue an API key (shown once) and grant opening credits')
  .requiredOption('--name <name>', 'unique tenant name')
  .option('--credits <amount>', 'opening credit grant', credits, '0')
  .option('--api-key <key>', 'use this API key instead of generating one')
  .option('--if-missing', 'succeed without changes when the tenant exists', false)
  .option('--json', 'print one JSON line', false)
  .action(async (o: { name: string; credits: string; apiKey?: string; ifMissing: boolean; json: boolean }) => {
    const result = await withDb((d) =>
      createTenant(d.db, { name: o.name, credits: o.credits, ifMissing: o.ifMissing, actor, fence, ...(o.apiKey ? { apiKey: o.apiKey } : {}) }),
    );
    if (o.json) {
      console.log(JSON.stringify(result));
    } else if (result.created) {
      console.log(`created tenant ${o.name} (${result.tenant_id}) with ${o.credits} credits`);
      console.log(`API key (shown once): ${result.api_key}`);
    } else {
      console.log(`tenant ${o.name} exists (${result.tenant_id}); nothing changed`);
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

try {
  await program.parseAsync(process.argv);
} catch (err) {
  console.error(`ops: ${(err as Error).message}`);
  process.exitCode = 1;
}
