// ops webhook … and ops spool …: tenants' webhook endpoints and deliveries, and this host's callback spool.
import { Command, InvalidArgumentError } from 'commander';
import { requeueDeadLetters, spoolDirFor, spoolStatus } from '../../storage/spool-files';
import { table } from '../format';
import { printSpoolStatus } from '../print';
import { auditOps } from '../tenants';
import { redeliverWebhook, resealWebhookSecrets, tenantWebhooks, webhookDeliveries } from '../webhooks';
import { createSecretBox } from '../../db/webhook-secrets';
import { WEBHOOK_DELIVERY_STATES, type WebhookDeliveryState } from '../../db/schema';
import { config, fence, actor, print, withDb } from './context';

export function registerWebhookCommands(program: Command): void {
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
}
