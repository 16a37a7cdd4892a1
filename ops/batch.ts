// Bulk operator actions (docs/runbooks/review.md "Bulk"): a dry run makes a plan, one item per
// task with a fingerprint of the evidence the decision rests on; applying takes that plan back,
// re-reads each task, refuses any whose fingerprint changed (or that left the selection), paces
// the actions per tenant and provider, and records the whole batch as ONE ops_audit row
// (operator, batch id, per-task result). Each action itself goes through the normal path
// (a workflow Update, the cancel CAS), which audits and validates it as for a single task.
import { createHash, randomUUID } from 'node:crypto';
import type { Db } from '../db/client';
import { canonicalJson } from '../domain/canonical-json';
import { recordAudit } from '../db/audit';

export interface BatchItem {
  readonly taskId: string;
  readonly tenantId: string;
  readonly provider: string;
  /** sha256 of the evidence (batchFingerprint): equal on re-read means nothing the decision rests on changed. */
  readonly fingerprint: string;
  readonly summary: string;
}

export interface BatchPlan {
  readonly kind: 'review.resolve' | 'task.cancel';
  /** What was selected and what is to be done (class and action, or the cancel filter). */
  readonly selector: Record<string, unknown>;
  readonly items: BatchItem[];
  /** Over the selector and every item's fingerprint: names the dry run. */
  readonly fingerprint: string;
  readonly createdAt: string;
}

export interface BatchResult {
  readonly taskId: string;
  readonly outcome: 'done' | 'refused' | 'error';
  readonly detail: string;
  readonly at: string;
}

export const fingerprintOf = (evidence: unknown): string => createHash('sha256').update(canonicalJson(evidence)).digest('hex').slice(0, 16);

export function makePlan(kind: BatchPlan['kind'], selector: Record<string, unknown>, items: BatchItem[]): BatchPlan {
  return {
    kind,
    selector,
    items,
    fingerprint: fingerprintOf({ kind, selector, items: items.map((i) => [i.taskId, i.fingerprint]) }),
    createdAt: new Date().toISOString(),
  };
}

/** Checks a plan read back from its file: the fingerprint must still match its items (no hand edits). */
export function checkPlan(plan: BatchPlan, kind: BatchPlan['kind']): void {
  if (plan?.kind !== kind || !Array.isArray(plan.items)) throw new Error(`the batch file is not a ${kind} dry run`);
  const again = fingerprintOf({ kind: plan.kind, selector: plan.selector, items: plan.items.map((i) => [i.taskId, i.fingerprint]) });
  if (again !== plan.fingerprint) throw new Error('the batch file was changed after its dry run (fingerprint mismatch); run the dry run again');
}

export interface ApplyArgs {
  readonly actor: string;
  readonly reason: string;
  /** Actions per second per tenant and provider. */
  readonly ratePerSecond: number;
  /** The item as it is now, or null when the task left the selection. */
  reread(taskId: string): Promise<BatchItem | null>;
  /** Does it; returns what happened (the task's new status); throws when refused by the facts. */
  act(item: BatchItem): Promise<string>;
  readonly sleep?: (ms: number) => Promise<void>;
}

export async function applyPlan(db: Db, plan: BatchPlan, args: ApplyArgs): Promise<{ batchId: string; auditId: string; results: BatchResult[] }> {
  const batchId = randomUUID();
  const sleep = args.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const spacingMs = 1000 / args.ratePerSecond;
  const nextAt = new Map<string, number>();
  const results: BatchResult[] = [];
  for (const planned of plan.items) {
    const now = () => new Date().toISOString();
    const current = await args.reread(planned.taskId);
    if (!current) {
      results.push({ taskId: planned.taskId, outcome: 'refused', detail: 'no longer in the selection', at: now() });
      continue;
    }
    if (current.fingerprint !== planned.fingerprint) {
      results.push({
        taskId: planned.taskId,
        outcome: 'refused',
        detail: `evidence changed since the dry run (${planned.fingerprint} → ${current.fingerprint}): ${current.summary}`,
        at: now(),
      });
      continue;
    }
    const key = `${current.tenantId}/${current.provider}`;
    const wait = (nextAt.get(key) ?? 0) - Date.now();
    if (wait > 0) await sleep(wait);
    nextAt.set(key, Date.now() + spacingMs);
    const at = now();
    try {
      results.push({ taskId: planned.taskId, outcome: 'done', detail: await args.act(current), at });
    } catch (err) {
      results.push({ taskId: planned.taskId, outcome: 'error', detail: (err as Error).message.slice(0, 500), at });
    }
  }
  const auditId = await recordAudit(db, {
    actor: args.actor,
    action: `${plan.kind}.batch`,
    targetType: 'batch',
    targetId: batchId,
    reason: args.reason,
    detail: { selector: plan.selector, dry_run_fingerprint: plan.fingerprint, rate_per_second: args.ratePerSecond, results },
  });
  return { batchId, auditId, results };
}
