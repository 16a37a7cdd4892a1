// Readable output of the reconciler commands (ops/reconcilers.ts) and the bulk review (ops/review-batch.ts).
import type { ReconcileReport } from '../reconcilers/types';
import type { ReconcilerStatus } from './reconcilers';
import { table } from './format';

export function printReconcilerStatus(list: readonly ReconcilerStatus[]): string {
  return table(
    list.map((s) => ({
      reconciler: s.name,
      schedule: s.schedule.note === 'no Schedule' ? 'missing' : s.schedule.paused ? 'PAUSED' : 'active',
      every: s.schedule.intervalMs === null ? '-' : `${Math.round(s.schedule.intervalMs / 1000)} s`,
      next: s.schedule.nextRunAt?.toISOString().slice(11, 19) ?? '-',
      'last run': s.last ? s.last.finished_at.toISOString() : 'never',
      ms: s.last ? String(s.last.finished_at.getTime() - s.last.started_at.getTime()) : '-',
      examined: s.last ? String(s.last.examined) : '-',
      findings: s.last ? String(s.last.findings_total) : '-',
      changed: s.last ? String(s.last.changed) : '-',
      error: s.last?.error ?? '',
    })),
    ['reconciler', 'schedule', 'every', 'next', 'last run', 'ms', 'examined', 'findings', 'changed', 'error'],
  );
}

export function printFindings(r: Pick<ReconcileReport, 'examined' | 'changed' | 'findings'>, title: string): string {
  const head = `${title}: examined ${r.examined}, changed ${r.changed}, ${r.findings.length} finding(s)`;
  if (r.findings.length === 0) return head;
  return `${head}\n${table(
    r.findings.slice(0, 50).map((f) => ({ kind: f.kind, task: f.taskId ?? f.key ?? '', detail: f.detail })),
    ['kind', 'task', 'detail'],
  )}`;
}
