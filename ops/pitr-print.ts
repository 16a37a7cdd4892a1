// Readable output of `ops pitr diff` and `ops pitr repair` (docs/runbooks/pitr.md).
import type { PitrDiff } from './pitr';
import type { PitrRepairPlan, PitrRepairResult } from './pitr-repair';

const statusTable = (d: PitrDiff): string[] => {
  const names = [...new Set([...Object.keys(d.tasks_by_status.restored), ...Object.keys(d.tasks_by_status.live)])].sort();
  return names.map((s) => `  ${s.padEnd(20)} ${String(d.tasks_by_status.restored[s] ?? 0).padStart(8)} ${String(d.tasks_by_status.live[s] ?? 0).padStart(8)}`);
};

const ledgerTable = (d: PitrDiff): string[] => {
  const tenants = [...new Set([...Object.keys(d.ledger.restored), ...Object.keys(d.ledger.live)])].sort();
  return tenants.flatMap((t) => {
    const types = [...new Set([...Object.keys(d.ledger.restored[t] ?? {}), ...Object.keys(d.ledger.live[t] ?? {})])].sort();
    return types.map((e) => `  ${t} ${e.padEnd(8)} ${(d.ledger.restored[t]?.[e] ?? '0').padStart(16)} ${(d.ledger.live[t]?.[e] ?? '0').padStart(16)}`);
  });
};

export function printPitrDiff(d: PitrDiff): string {
  return [
    `restored copy replayed through ${d.restored_through ?? '(unknown)'}`,
    'tasks by status        restored     live',
    ...statusTable(d),
    `tasks compared ${d.tasks.compared}; created since the restore point ${d.tasks.only_live}; progressed since (kept) ${d.tasks.progressed}`,
    `rewritten outside the CAS (same version, other state): ${d.tasks.rewritten.length}`,
    ...d.tasks.rewritten
      .slice(0, 10)
      .map((t) => `  ${t.task_id} v${t.status_version}: ${JSON.stringify(t.live)} → ${JSON.stringify(t.restored)} (record: ${t.recorded_status ?? '-'})`),
    ...(d.tasks.rewritten.length > 10 ? [`  … and ${d.tasks.rewritten.length - 10} more (--json lists all)`] : []),
    `status not what their own record says (live, any version): ${d.tasks.off_record.length}${d.tasks.off_record.some((t) => !d.tasks.rewritten.some((r) => r.task_id === t.task_id)) ? ' — some changed after the restore point: restore nearer the mistake' : ''}`,
    `deleted since the restore point: ${d.tasks.only_restored.length}; version behind the restored copy: ${d.tasks.regressed.length}`,
    'ledger totals per tenant and entry type      restored             live',
    ...ledgerTable(d),
    `ledger rows of the restored copy missing live: ${d.ledger.missing_in_live} (must be 0: append-only); written since: ${d.ledger.only_live}`,
    `API keys deleted since the restore point: ${d.deleted_api_keys.length}`,
    ...d.deleted_api_keys.map((k) => `  ${k.key_id} tenant ${k.tenant_id} prefix ${k.key_prefix}${k.revoked_at ? ` (revoked ${k.revoked_at})` : ''}`),
  ].join('\n');
}

/** `wouldRefuse`: on a dry run, the plan's tasks the repair would refuse now (ops/pitr-repair.ts refusalsOf). */
export function printPitrPlan(p: PitrRepairPlan, applied: PitrRepairResult | null, wouldRefuse: readonly { task_id: string; why: string }[] = []): string {
  const lines = [
    `${applied ? 'repaired' : 'would repair'}: ${p.tasks.length} task(s) to their restored state (CAS, version + 1, a task_transition row each), ${p.api_keys.length} API key(s) re-inserted`,
    ...p.skipped.map((s) => `  left to the operator: ${s.task_id}: ${s.why}`),
  ];
  if (applied) {
    lines.push(
      `audit ${applied.audit_id}: ${applied.tasks_repaired.length} task(s) repaired, ${applied.tasks_changed_meanwhile.length} changed meanwhile (left alone), ${applied.tasks_refused.length} refused, ${applied.api_keys_restored.length} key(s) restored`,
      ...applied.tasks_refused.map((r) => `  refused: ${r.task_id}: ${r.why}`),
    );
  } else {
    if (wouldRefuse.length > 0) {
      lines.push(
        `${wouldRefuse.length} of them would be refused if applied now (left as they are; a person decides: docs/runbooks/pitr.md):`,
        ...wouldRefuse.map((r) => `  would refuse: ${r.task_id}: ${r.why}`),
      );
    }
    lines.push('dry run: nothing written (--apply to write)');
  }
  return lines.join('\n');
}
