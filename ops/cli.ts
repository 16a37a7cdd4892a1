// The operator CLI: `npm run ops -- <command>`. Readable output by default, --json for scripts.
// Every command that changes something is audited (ops_audit: who, what, when, why). Each group
// of commands lives in ops/commands/; what they share (configuration, parsers, connections) is
// ops/commands/context.ts.
import { Command } from 'commander';
import { actor, config, print, withClient, withDb } from './commands/context';
import { registerPitrCommands } from './commands/pitr';
import { registerProviderCommands } from './commands/providers';
import { registerReconcileCommands } from './commands/reconcile';
import { registerSystemCommands } from './commands/system';
import { registerTaskCommands } from './commands/tasks';
import { registerTenantCommands } from './commands/tenants';
import { registerWebhookCommands } from './commands/webhooks';
import { registerDeployCommands } from './deploy';
import { registerCatalogCommands } from './catalog-cli';
import { costRates, registerUsageCommand } from './usage';

const program = new Command('ops').description('vidorch operator commands').showHelpAfterError().enablePositionalOptions();
for (const register of [
  registerTenantCommands,
  registerSystemCommands,
  registerProviderCommands,
  registerReconcileCommands,
  registerTaskCommands,
  registerWebhookCommands,
  registerPitrCommands,
  (p: Command) => registerDeployCommands(p, { withClient, namespace: config.TEMPORAL_NAMESPACE, deploymentName: config.WORKER_DEPLOYMENT_NAME, actor, print }),
  (p: Command) =>
    registerCatalogCommands(p, {
      withDb,
      actor,
      sources: {
        replicate: { baseUrl: config.PROVIDER_REPLICATE_BASE_URL, apiToken: config.PROVIDER_REPLICATE_API_TOKEN },
        falOpenApiUrl: config.PROVIDER_FAL_OPENAPI_URL,
        timeoutMs: config.PROVIDER_HTTP_TIMEOUT_MS,
      },
    }),
  (p: Command) => registerUsageCommand(p, { withDb, print, rates: costRates(config.PROVIDER_COST_CREDITS) }),
]) {
  register(program);
}

try {
  await program.parseAsync(process.argv);
} catch (err) {
  console.error(`ops: ${(err as Error).message}`);
  process.exitCode = 1;
}
