// The operator's repair after a logical mistake, from a point-in-time restored copy
// (docs/runbooks/pitr.md). It writes only what the diff proves was written outside the
// compare-and-set, as the CAS would have written it (docs/design.md §3): each rewritten task
// gets its restored state back with status_version + 1 under the region fence, and a new
// task_transition row records the repair (the record is append-only: nothing is edited, the
// correction is a new fact). A deleted API key is inserted again as it was (same id and hash,
// so the tenant's key works again). One ops_audit row says who, why and what. Running it twice
// changes nothing the second time: a repaired task's version has moved past the restored one.
import type { Db, Tx } from '../db/client';
import { recordAudit } from '../db/audit';
import { acquireFence, inFence } from '../db/fence';
import { ledgerKey } from '../db/ledger';
import { compareMoney } from '../domain/money';
import { isTerminal, type TaskStatus } from '../domain/states';
import { sql } from 'drizzle-orm';
import type { DeletedApiKey, PitrDiff, RewrittenTask, TaskState } from './pitr';
import { type FenceScope } from './tenants';

export interface PitrRepairPlan {
  /** Rewritten tasks whose restored status is what the live database's own record says they were at that version. */
  readonly tasks: RewrittenTask[];
  /** Rewritten tasks the repair leaves to the operator, and why. */
  readonly skipped: { task_id: string; why: string }[];
  readonly api_keys: DeletedApiKey[];
  readonly restored_through: string | null;
}

export function planPitrRepair(diff: PitrDiff): PitrRepairPlan {
  const tasks: RewrittenTask[] = [];
  const skipped: { task_id: string; why: string }[] = [];
  for (const t of diff.tasks.rewritten) {
    // The live task_transition row at this version is the tie-breaker: it was written with the
    // legitimate change, so it must name the status the restored copy has.
    const wanted = t.restored.status;
    if (wanted !== undefined && wanted !== null && t.recorded_status !== wanted) {
      skipped.push({
        task_id: t.task_id,
        why: `the record at version ${t.status_version} says ${t.recorded_status ?? 'nothing'}, the restored copy ${wanted}`,
      });
    } else tasks.push(t);
  }
  const rewritten = new Set(diff.tasks.rewritten.map((t) => t.task_id));
  for (const t of diff.tasks.off_record) {
    if (!rewritten.has(t.task_id)) {
      skipped.push({
        task_id: t.task_id,
        why: `${t.status} at version ${t.status_version}, its record says ${t.recorded_status ?? 'nothing'}; it changed after the restore point: restore a copy nearer the mistake`,
      });
    }
  }
  return { tasks, skipped, api_keys: diff.deleted_api_keys, restored_through: diff.restored_through };
}

export interface PitrRepairResult {
  readonly audit_id: string;
  readonly tasks_repaired: string[];
  /** The task changed (its version moved) between the diff and the repair: left alone. */
  readonly tasks_changed_meanwhile: string[];
  /**
   * Left alone because its ledger does not carry the restored state's settlement: its
   * reservation was closed after the mistake (the billing reconciler closes a terminal task's
   * open reservation), so the restored state would be live with nothing left to settle, or
   * terminal with another charge than its SETTLE row. A person decides (docs/runbooks/pitr.md).
   */
  readonly tasks_refused: { task_id: string; why: string }[];
  readonly api_keys_restored: string[];
}

/**
 * Why the task may not get its restored state back, or null: once its reservation is closed
 * (SETTLE and RELEASE written) the restored state must be terminal with the charge the SETTLE
 * row carries. A live task would settle again later (refused by db/ledger.ts, since the rows
 * exist) and a different charge would leave the task disagreeing with its ledger. Locks the row.
 */
async function settlementRefusal(tx: Tx | Db, t: RewrittenTask, lock = true): Promise<string | null> {
  const { rows } = await tx.execute(sql`
    SELECT t.status, t.settled_amount::text,
           (SELECT amount::text FROM credit_ledger WHERE business_key = ${ledgerKey(t.task_id, 'settle')}) AS settle
    FROM generation_task t WHERE t.task_id = ${t.task_id}::uuid ${lock ? sql`FOR UPDATE` : sql``}`);
  const row = rows[0] as { status: string; settled_amount: string | null; settle: string | null } | undefined;
  if (!row || row.settle === null) return null;
  const status = (t.restored.status ?? row.status) as TaskStatus;
  const charge = t.restored.settled_amount !== undefined ? t.restored.settled_amount : row.settled_amount;
  if (isTerminal(status) && charge !== null && compareMoney(charge, row.settle) === 0) return null;
  return isTerminal(status)
    ? `its ledger settled ${row.settle}, the restored ${status} records ${charge ?? 'no charge'}: correct the charge by hand (an operator grant)`
    : `its reservation was closed (SETTLE ${row.settle}) after the mistake; the restored ${status} would have nothing left to settle: decide by hand`;
}

/**
 * What a dry run shows beside the plan: the tasks the repair would refuse if applied now (their
 * reservation was closed since the mistake), read from the live database without a lock or a
 * write. An apply checks each again under its row lock, so the answer may differ if the task
 * moves meanwhile.
 */
export async function refusalsOf(live: Db, plan: PitrRepairPlan): Promise<{ task_id: string; why: string }[]> {
  const refused: { task_id: string; why: string }[] = [];
  for (const t of plan.tasks) {
    const why = await settlementRefusal(live, t, false);
    if (why) refused.push({ task_id: t.task_id, why });
  }
  return refused;
}

/** Applies a plan to the live database under the fence, audited. */
export async function applyPitrRepair(live: Db, plan: PitrRepairPlan, args: { actor: string; reason: string; fence: FenceScope }): Promise<PitrRepairResult> {
  const { token } = await acquireFence(live, args.fence.scope, args.fence.region);
  const auditId = await inFence(live, token, (tx) =>
    recordAudit(tx, {
      actor: args.actor,
      action: 'pitr.repair',
      targetType: 'database',
      targetId: 'generation_task,api_key',
      reason: args.reason,
      detail: {
        restored_through: plan.restored_through,
        tasks: plan.tasks.map((t) => t.task_id),
        skipped: plan.skipped,
        api_keys: plan.api_keys.map((k) => ({ key_id: k.key_id, key_hash: k.key_hash, tenant_id: k.tenant_id })),
      },
    }),
  );
  const repaired: string[] = [];
  const changed: string[] = [];
  const refused: { task_id: string; why: string }[] = [];
  for (const t of plan.tasks) {
    const done = await inFence(live, token, async (tx) => {
      const why = await settlementRefusal(tx, t);
      if (why) return why;
      const columns = Object.entries(t.restored) as [keyof TaskState, string | null][];
      const set = sql.join(
        columns.map(([c, v]) => sql`${sql.identifier(c)} = ${v}`),
        sql`, `,
      );
      const { rows } = await tx.execute(sql`
        UPDATE generation_task SET ${set}, status_version = status_version + 1, home_region = ${token.region}, write_epoch = ${token.epoch}, updated_at = now()
        WHERE task_id = ${t.task_id}::uuid AND status_version = ${t.status_version} AND status = ${t.live.status ?? t.restored.status ?? ''}
          AND write_epoch <= ${token.epoch}
        RETURNING status`);
      if (rows.length === 0) return false;
      const status = (rows[0] as { status: string }).status;
      await tx.execute(sql`
        INSERT INTO task_transition (task_id, from_status, to_status, from_version, to_version, source_event, actor, detail, region, write_epoch)
        VALUES (${t.task_id}::uuid, ${t.live.status ?? status}, ${status}, ${t.status_version}, ${t.status_version + 1}, 'ops.pitr-repair', ${args.actor},
                ${JSON.stringify({ audit_id: auditId, restored: t.restored, damaged: t.live })}::jsonb, ${token.region}, ${token.epoch})`);
      return true;
    });
    if (typeof done === 'string') refused.push({ task_id: t.task_id, why: done });
    else (done ? repaired : changed).push(t.task_id);
  }
  const restoredKeys: string[] = [];
  for (const k of plan.api_keys) {
    const inserted = await inFence(live, token, async (tx) => {
      const { rows } = await tx.execute(sql`
        INSERT INTO api_key (key_id, tenant_id, key_hash, key_prefix, created_at, revoked_at)
        VALUES (${k.key_id}::uuid, ${k.tenant_id}::uuid, ${k.key_hash}, ${k.key_prefix}, ${k.created_at}::timestamptz, ${k.revoked_at}::timestamptz)
        ON CONFLICT DO NOTHING RETURNING key_id`);
      return rows.length === 1;
    });
    if (inserted) restoredKeys.push(k.key_id);
  }
  return { audit_id: auditId, tasks_repaired: repaired, tasks_changed_meanwhile: changed, tasks_refused: refused, api_keys_restored: restoredKeys };
}
