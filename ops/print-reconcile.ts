// Readable output of the reconciler commands (ops/reconcilers.ts) and the bulk review (ops/review-batch.ts).
import { ACTIONS_FOR, REVIEW_CLASSES } from '../domain/review-class';
import type { ReconcileReport } from '../reconcilers/types';
import type { BatchPlan, BatchResult } from './batch';
import type { ClassifiedReview } from './review-batch';
import type { ReconcilerStatus } from './reconcilers';
import { table } from './format';

export function printReconcilerStatus(list: readonly ReconcilerStatus[]): string {
  return table(
    list.map((s) => ({
      reconciler: s.name,
      schedule:
        s.schedule.note === 'no Schedule'
          ? 'missing'
          : s.schedule.note?.startsWith('Temporal unreachable')
            ? 'unknown (Temporal unreachable)'
            : s.schedule.paused
              ? 'PAUSED'
              : 'active',
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

export function printClassified(items: readonly ClassifiedReview[]): string {
  const counts = REVIEW_CLASSES.map((c) => ({ class: c, tasks: String(items.filter((i) => i.class === c).length), actions: ACTIONS_FOR[c].join(', ') }));
  return [
    'MANUAL_REVIEW by cause',
    table(counts, ['class', 'tasks', 'actions']),
    '',
    table(
      items.map((i) => ({
        task: i.taskId,
        class: i.class,
        provider: i.provider,
        attempt: i.attemptState ?? '-',
        job: i.providerJobId ?? '-',
        since: i.since.toISOString(),
        reason: i.reason?.slice(0, 70) ?? '',
      })),
      ['task', 'class', 'provider', 'attempt', 'job', 'since', 'reason'],
    ),
  ].join('\n');
}

export function printPlan(plan: BatchPlan, file: string, next: string): string {
  return [
    `dry run ${plan.fingerprint}: ${plan.items.length} task(s) for ${JSON.stringify(plan.selector)}`,
    table(
      plan.items.map((i) => ({ task: i.taskId, evidence: i.fingerprint, summary: i.summary })),
      ['task', 'evidence', 'summary'],
    ),
    '',
    `batch file: ${file}`,
    `apply with: ${next}`,
  ].join('\n');
}

export function printBatchResults(r: { batchId: string; auditId: string; results: readonly BatchResult[] }): string {
  const n = (o: BatchResult['outcome']) => r.results.filter((x) => x.outcome === o).length;
  return [
    `batch ${r.batchId} (audit ${r.auditId}): ${n('done')} done, ${n('refused')} refused, ${n('error')} failed`,
    table(
      r.results.map((x) => ({ task: x.taskId, outcome: x.outcome, at: x.at.slice(11, 23), detail: x.detail })),
      ['task', 'outcome', 'at', 'detail'],
    ),
  ].join('\n');
}
