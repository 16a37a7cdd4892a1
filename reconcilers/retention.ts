// Data lifecycle of the working rows (docs/runbooks/reconcilers.md "Retention"): processed inbox
// rows of finished tasks after RETENTION_INBOX_DAYS (longer than any provider redelivers, so a
// redelivery still dedupes), published outbox rows after RETENTION_OUTBOX_HOURS, reconciler runs
// that changed nothing, tenant webhook deliveries that ended RETENTION_WEBHOOK_DAYS ago (their
// attempts with them, then events left without a delivery, and idle target back-offs), quotes a
// day past their expiry, and this
// host's old spool dead letters. Deleted in bounded batches, each
// its own short transaction under the fence. The record (transitions, ledger, audit, failovers)
// is never deleted: migration 0008 refuses it. Nothing a task that is still running reads is
// touched: an inbox row of an open task is evidence of its job (db/job-evidence.ts) and stays
// until the task is finished and the window has passed.
import fs from 'node:fs/promises';
import path from 'node:path';
import { sql, type SQL } from 'drizzle-orm';
import { FenceRejectedError, acquireFence, inFence } from '../db/fence';
import type { Reconciler, ReconcileDeps, ReconcileFinding } from './types';

/**
 * Deletes the rows `select` picks, `batch` at a time, until none are left or `limit` are gone.
 * `children` (a table and its column referring to `key`) lose their rows of each batch in the
 * same statement, first: a webhook delivery's attempts.
 */
async function deleteInBatches(
  deps: ReconcileDeps,
  table: string,
  key: string,
  select: SQL,
  limit: number,
  children?: { table: string; key: string },
): Promise<number> {
  const { token } = await acquireFence(deps.db, deps.fence.scope, deps.fence.region);
  let deleted = 0;
  while (deleted < limit) {
    const n = Math.min(deps.settings.retention.batch, limit - deleted);
    const picked = sql`${select} LIMIT ${n} FOR UPDATE SKIP LOCKED`;
    const { rowCount } = await inFence(deps.db, token, (tx) =>
      tx.execute(
        children
          ? sql`WITH picked AS (${picked}),
                  gone AS (DELETE FROM ${sql.identifier(children.table)} WHERE ${sql.identifier(children.key)} IN (SELECT * FROM picked))
                DELETE FROM ${sql.identifier(table)} WHERE ${sql.identifier(key)} IN (SELECT * FROM picked)`
          : sql`DELETE FROM ${sql.identifier(table)} WHERE ${sql.identifier(key)} IN (${picked})`,
      ),
    );
    deleted += rowCount ?? 0;
    if (!rowCount || rowCount < n) break;
  }
  return deleted;
}

const count = async (deps: ReconcileDeps, select: SQL): Promise<number> => {
  const { rows } = await deps.db.execute(sql`SELECT count(*)::int AS n FROM (${select}) s`);
  return (rows[0] as { n: number }).n;
};

export const retentionReconciler: Reconciler = {
  name: 'retention',
  async run(deps, opts) {
    const r = deps.settings.retention;
    const webhookCutoff = sql`now() - make_interval(days => ${r.webhookDays})`;
    const sets: { kind: string; table: string; key: string; select: SQL; children?: { table: string; key: string } }[] = [
      {
        kind: 'inbox-expired',
        table: 'callback_inbox',
        key: 'inbox_id',
        // EXISTS, not a join: FOR UPDATE then locks only the inbox rows, never a task row.
        select: sql`SELECT i.inbox_id FROM callback_inbox i
                    WHERE i.processed_at < now() - make_interval(days => ${r.inboxDays})
                      AND EXISTS (SELECT 1 FROM generation_task t WHERE t.task_id = i.task_id AND t.terminal_at IS NOT NULL)`,
      },
      {
        kind: 'outbox-expired',
        table: 'outbox_event',
        key: 'event_id',
        select: sql`SELECT event_id FROM outbox_event WHERE published_at < now() - make_interval(hours => ${r.outboxHours})`,
      },
      {
        kind: 'reconcile-run-expired',
        table: 'reconcile_run',
        key: 'run_id',
        select: sql`SELECT run_id FROM reconcile_run WHERE changed = 0 AND started_at < now() - make_interval(days => ${r.reconcileRunDays})`,
      },
      {
        // A delivery that ended (a pending one is still owed) and whose last attempt, or its
        // creation, is past the window: a failed one was redeliverable until then. Its attempts go
        // in the same statement (they refer to it).
        kind: 'webhook-delivery-expired',
        table: 'webhook_delivery',
        key: 'delivery_id',
        children: { table: 'webhook_attempt', key: 'delivery_id' },
        select: sql`SELECT d.delivery_id FROM webhook_delivery d
                    WHERE d.state <> 'pending' AND d.created_at < ${webhookCutoff}
                      AND NOT EXISTS (SELECT 1 FROM webhook_attempt a WHERE a.delivery_id = d.delivery_id AND a.started_at >= ${webhookCutoff})`,
      },
      {
        // An event whose deliveries are all gone (or that had none: no endpoint subscribed).
        kind: 'webhook-event-expired',
        table: 'webhook_event',
        key: 'event_id',
        select: sql`SELECT e.event_id FROM webhook_event e
                    WHERE e.created_at < ${webhookCutoff}
                      AND NOT EXISTS (SELECT 1 FROM webhook_delivery d WHERE d.event_id = e.event_id)`,
      },
      {
        // A quote (POST /v1/quotes) a day past its expiry: a create citing it was refused as
        // expired meanwhile, and now as unknown.
        kind: 'quote-expired',
        table: 'task_quote',
        key: 'quote_id',
        select: sql`SELECT quote_id FROM task_quote WHERE expires_at < now() - interval '1 day'`,
      },
      {
        // A target's back-off (a receiver that timed out) untouched for the window: it ended long ago.
        kind: 'webhook-target-expired',
        table: 'webhook_target',
        key: 'target_key',
        select: sql`SELECT target_key FROM webhook_target WHERE updated_at < ${webhookCutoff} AND blocked_until < now()`,
      },
    ];
    const findings: ReconcileFinding[] = [];
    let examined = 0;
    let changed = 0;
    for (const s of sets) {
      if (opts.dryRun) {
        const n = await count(deps, sql`${s.select} LIMIT ${opts.limit}`);
        examined += n;
        if (n > 0) findings.push({ kind: s.kind, detail: `${n} ${s.table} row(s) past their window would be deleted` });
        continue;
      }
      try {
        const n = await deleteInBatches(deps, s.table, s.key, s.select, opts.limit, s.children);
        examined += n;
        changed += n;
        if (n > 0) findings.push({ kind: s.kind, detail: `${n} ${s.table} row(s) past their window deleted` });
      } catch (err) {
        if (!(err instanceof FenceRejectedError)) throw err;
        findings.push({ kind: 'standby', detail: 'this region does not hold the fence: nothing deleted' });
        break;
      }
    }
    const dead = await expiredDeadLetters(deps.settings.spoolDir, r.spoolDeadLetterDays);
    examined += dead.length;
    for (const file of dead) {
      if (!opts.dryRun) {
        await fs.rm(file, { force: true });
        changed += 1;
      }
      findings.push({ kind: 'spool-dead-letter-expired', key: file, detail: opts.dryRun ? 'would be deleted' : 'deleted' });
    }
    return { examined, findings, changed };
  },
};

/** Dead-letter files of the spool (api/spool.ts: dead-*.ndjson) not written to for `days`. */
async function expiredDeadLetters(dir: string, days: number): Promise<string[]> {
  const names = await fs.readdir(dir).catch(() => [] as string[]);
  const cutoff = Date.now() - days * 86_400_000;
  const out: string[] = [];
  for (const name of names) {
    if (!name.startsWith('dead-') || !name.endsWith('.ndjson')) continue;
    const file = path.join(dir, name);
    const st = await fs.stat(file).catch(() => null);
    if (st && st.mtimeMs < cutoff) out.push(file);
  }
  return out;
}
