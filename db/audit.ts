// The operator audit trail (docs/design.md §9, ops_audit): one row per action that changed
// something for a reason somebody gave — an operator's command, a reconciler's repair, a review.
// Written in the transaction of the change it records, so the row exists exactly when the change
// does. API keys and secrets never go into `detail`: ids and fingerprints only.
import { randomUUID } from 'node:crypto';
import type { DbOrTx } from './client';
import { opsAudit } from './schema';

export interface AuditEntry {
  readonly actor: string;
  readonly action: string;
  readonly targetType: string;
  readonly targetId: string;
  readonly reason: string;
  readonly detail: Record<string, unknown>;
}

/** Writes one ops_audit row; returns its id. */
export async function recordAudit(tx: DbOrTx, entry: AuditEntry): Promise<string> {
  const auditId = randomUUID();
  await tx.insert(opsAudit).values({
    audit_id: auditId,
    actor: entry.actor,
    action: entry.action,
    target_type: entry.targetType,
    target_id: entry.targetId,
    reason: entry.reason,
    detail: entry.detail,
  });
  return auditId;
}
