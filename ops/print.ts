// Readable renderings of the ops reports (the CLI prints these unless --json).
import type { ProviderQueueReport } from './capacity';
import type { SpoolStatus } from '../storage/spool-files';
import type { FenceState } from '../db/fence';
import type { FailoverRecord } from '../db/modes';
import { MODE_POLICIES, type ModePolicy } from '../domain/modes';
import { SYSTEM_MODES } from '../domain/states';
import type { FailoverResult } from './failover';
import { formatSeconds, keyValues, table } from './format';
import type { TaskInspection } from './inspect';
import type { ProviderStatus } from './providers';
import type { ApplyResult, ReconcileReport, RecoverySet } from './reconcile';
import type { ReviewItem } from './review';

const yes = (b: boolean) => (b ? 'yes' : 'no');
const submits = (p: ModePolicy) => (!p.submit ? 'no' : p.providers === 'healthy' ? 'healthy providers only' : 'yes');

export function printFence(s: FenceState): string {
  const p = MODE_POLICIES[s.mode];
  return [
    keyValues([
      ['scope', s.scope],
      ['active region', s.activeRegion],
      ['write epoch', s.epoch],
      ['mode', s.mode],
      ['changed at', s.updatedAt],
    ]),
    '',
    `  in ${s.mode}:`,
    keyValues(
      [
        ['create tasks', yes(p.create)],
        ['read tasks', yes(p.read)],
        ['cancel tasks', yes(p.cancel)],
        ['callbacks go to', p.callback],
        ['workflow fact writes', yes(p.factWrites)],
        ['new provider submits', submits(p)],
        ['webhook deliveries', p.notify ? 'sent' : 'paused (kept)'],
        ['live events (SSE)', p.liveEvents ? 'live' : 'clients told to poll'],
      ],
      '    ',
    ),
  ].join('\n');
}

export function printModeTable(): string {
  const rows = SYSTEM_MODES.map((m) => {
    const p = MODE_POLICIES[m];
    return {
      mode: m,
      create: yes(p.create),
      read: yes(p.read),
      cancel: yes(p.cancel),
      callback: p.callback,
      facts: yes(p.factWrites),
      submit: submits(p),
      webhooks: p.notify ? 'send' : 'pause',
      live: p.liveEvents ? 'live' : 'poll',
    };
  });
  return table(rows, ['mode', 'create', 'read', 'cancel', 'callback', 'facts', 'submit', 'webhooks', 'live']);
}

export function printFailoverRecord(r: FailoverRecord, rtoSeconds?: number | null): string {
  const rto =
    rtoSeconds !== undefined ? rtoSeconds : r.first_successful_write_time ? (r.first_successful_write_time.getTime() - r.started_at.getTime()) / 1000 : null;
  return keyValues([
    ['incident id', r.incident_id],
    ['operator', r.operator],
    ['old region → new region', `${r.old_region} → ${r.new_region}`],
    ['old epoch → new epoch', `${r.old_epoch} → ${r.new_epoch}`],
    ['replication position', r.replication_position],
    ['accepted RPO', formatSeconds(r.accepted_rpo_seconds)],
    ['started at', r.started_at],
    ['traffic switch time', r.traffic_switch_time],
    ['first successful write', r.first_successful_write_time ?? 'none yet'],
    ['RTO (command → first write)', rto === null ? 'not measured yet' : formatSeconds(rto)],
    ['reconciliation result', r.reconciliation_result ?? 'pending'],
  ]);
}

const setLine = (name: string, s: RecoverySet, note = '') =>
  [name, s.count, s.count ? formatSeconds(s.oldestAgeSeconds) : '-', s.taskIds.slice(0, 3).join(' ') + (s.count > 3 ? ' …' : ''), note] as const;

export function printReconcileReport(r: ReconcileReport): string {
  const rows = [
    setLine('unpublished outbox', r.unpublishedOutbox, 'apply starts the workflows'),
    setLine('unprocessed inbox', r.unprocessedInbox, r.unprocessedInbox.unmatched ? `${r.unprocessedInbox.unmatched} match no task` : ''),
    setLine('SUBMIT_UNKNOWN attempts', r.submitUnknown, 'reconciled by the workflow, never resubmitted'),
    setLine(`long RUNNING (> ${formatSeconds(r.longRunning.thresholdSeconds)})`, r.longRunning, 'apply wakes them to poll'),
    setLine('outputs about to expire', r.outputsAtRisk, 'apply wakes the rescue'),
    setLine(`open tasks idle > ${formatSeconds(r.staleOpen.thresholdSeconds)}`, r.staleOpen, 'apply makes sure a workflow runs'),
    setLine('MANUAL_REVIEW', r.manualReview, '`ops review list`'),
  ].map(([set, count, oldest, tasks, note]) => ({ set, count, oldest, tasks, note }));
  return [
    table(rows, ['set', 'count', 'oldest', 'tasks', 'note']),
    '',
    keyValues([
      [
        'credits reserved, not settled',
        `${r.openReservations.count} open tasks, ${r.openReservations.amount} credits (oldest ${formatSeconds(r.openReservations.oldestAgeSeconds)})`,
      ],
      [
        'terminal tasks with an open reservation',
        `${r.billingAnomalies.terminalUnsettled}${r.billingAnomalies.terminalUnsettled ? ' ← billing anomaly: investigate, never auto-fixed' : ''}`,
      ],
      [
        'account reserved − open reservations',
        `${r.billingAnomalies.accountReservedDrift}${Number(r.billingAnomalies.accountReservedDrift) !== 0 ? ' ← drift: investigate' : ''}`,
      ],
    ]),
  ].join('\n');
}

export function printApply(a: ApplyResult): string {
  return keyValues([
    ['outbox rows published', a.outboxPublished],
    ['workflows started (none was running)', a.workflowsStarted],
    ['workflows woken', a.workflowsWoken],
    [
      'closed workflows with open facts',
      a.closedWorkflows.length ? `${a.closedWorkflows.length}: ${a.closedWorkflows.slice(0, 5).join(' ')} — reset them in the Temporal UI` : 0,
    ],
    [
      'errors',
      a.errors.length
        ? a.errors
            .slice(0, 5)
            .map((e) => `${e.taskId}: ${e.error}`)
            .join('; ')
        : 0,
    ],
  ]);
}

/** `withSteps` false when the steps were already printed as they happened. */
export function printFailover(r: FailoverResult, withSteps = true): string {
  return [
    ...(withSteps
      ? [
          'runbook',
          table(
            r.steps.map((s) => ({ at: s.at.slice(11, 23), step: s.step, detail: s.detail ?? '' })),
            ['at', 'step', 'detail'],
          ),
          '',
        ]
      : []),
    'failover record (docs/design.md §7)',
    printFailoverRecord(r.record, r.rtoSeconds),
    '',
    'reconciliation report',
    printReconcileReport(r.report),
    '',
    `Mode is RECONCILE_ONLY: no new tasks, no new provider jobs; accepted tasks converge under ${r.record.new_region}.`,
    'Before reopening: verify creates, provider submits, callbacks, output rescue and settlement in the new region',
    '(`ops fence status`, `ops reconcile --dry-run`, a canary task), then reopen gradually:',
    `  npm run ops -- mode set QUEUE_ONLY --reason "${r.record.incident_id}: accept, hold submits"`,
    `  npm run ops -- mode set NORMAL --reason "${r.record.incident_id}: reopened"`,
  ].join('\n');
}

export function printInspection(i: TaskInspection): string {
  const t = i.task;
  const out = [
    `task ${t.task_id}`,
    keyValues([
      ['status', `${t.status} (version ${t.status_version})`],
      ['tenant', t.tenant_id],
      ['provider / model', `${t.provider} / ${t.provider_model}`],
      ['region / epoch of last write', `${t.home_region} / ${t.write_epoch}`],
      ['created / updated / terminal', `${t.created_at.toISOString()} / ${t.updated_at.toISOString()} / ${t.terminal_at?.toISOString() ?? '-'}`],
      ['reserved / settled', `${t.reserved_amount} / ${t.settled_amount ?? '-'}`],
      ['cancel requested', t.cancel_requested_at ?? 'no'],
      ['failure', t.failure_code ? `${t.failure_code}: ${t.failure_message ?? ''}` : '-'],
    ]),
    '',
    'attempts',
    table(
      i.attempts.map((a) => ({
        no: a.attempt_no,
        attempt_id: a.attempt_id,
        state: a.submit_state,
        job: a.provider_job_id,
        provider_status: a.provider_status,
        next_poll: a.next_poll_at,
        error: a.last_error?.slice(0, 60) ?? null,
      })),
      ['no', 'attempt_id', 'state', 'job', 'provider_status', 'next_poll', 'error'],
    ),
    '',
    'transitions',
    table(
      i.transitions.map((x) => ({
        v: x.to_version,
        at: x.created_at,
        from: x.from_status,
        to: x.to_status,
        by: x.actor,
        event: x.source_event,
        region: `${x.region}/${x.write_epoch}`,
      })),
      ['v', 'at', 'from', 'to', 'by', 'event', 'region'],
    ),
    '',
    'ledger',
    table(
      i.ledger.map((l) => ({ type: l.entry_type, amount: l.amount, key: l.business_key, at: l.created_at, region: `${l.region}/${l.write_epoch}` })),
      ['type', 'amount', 'key', 'at', 'region'],
    ),
    '',
    'inbox',
    table(
      i.inbox.map((r) => ({ received: r.received_at, source: r.source, event: r.event_type, processed: r.processed_at, error: r.process_error })),
      ['received', 'source', 'event', 'processed', 'error'],
    ),
  ];
  if (i.assets.length)
    out.push(
      '',
      'assets',
      table(
        i.assets.map((a) => ({ kind: a.kind, key: a.object_key, bytes: a.size_bytes, sha256: a.sha256.slice(0, 16) })),
        ['kind', 'key', 'bytes', 'sha256'],
      ),
    );
  out.push('', 'temporal');
  if (i.temporal.reachable) {
    out.push(
      keyValues([
        ['workflow id', i.temporal.workflowId],
        ['status', i.temporal.status ?? 'no workflow'],
        ['run id', i.temporal.runId],
        ['history events', i.temporal.historyLength],
        ['workflow sees', i.temporal.facts ? `${i.temporal.facts.status} v${i.temporal.facts.statusVersion}` : '-'],
      ]),
    );
  } else {
    out.push(
      keyValues([
        ['workflow id', i.temporal.workflowId],
        ['status', `unreachable: ${i.temporal.error}`],
      ]),
    );
  }
  out.push(keyValues([['UI', i.uiUrl]]));
  return out.join('\n');
}

export function printReviews(items: ReviewItem[]): string {
  return table(
    items.map((r) => ({
      task: r.task_id,
      provider: r.provider,
      attempt: r.attempt_state,
      job: r.provider_job_id,
      waiting: formatSeconds(r.waiting_seconds),
      reason: r.reason?.slice(0, 70) ?? null,
    })),
    ['task', 'provider', 'attempt', 'job', 'waiting', 'reason'],
  );
}

export function printProviderStatus(rows: readonly ProviderStatus[]): string {
  const window = formatSeconds(rows[0]?.window_seconds ?? 0);
  const shown = rows.map((r) => ({
    provider: r.provider,
    switch: r.force === null ? 'automatic' : `forced ${r.force}`,
    limit: r.limit === null ? 'none' : `${r.limit} (${r.max_in_flight === null ? 'adapter' : 'operator'})`,
    'in flight': r.in_flight,
    unknown: r.unknown,
    waiting: r.waiting,
    'oldest waiting': r.oldest_waiting_seconds === null ? '-' : formatSeconds(r.oldest_waiting_seconds),
    [`rejected (${window})`]: r.rejected_recent,
    'changed by': r.updated_by,
    reason: r.reason,
  }));
  return [
    table(shown, ['provider', 'switch', 'limit', 'in flight', 'unknown', 'waiting', 'oldest waiting', `rejected (${window})`, 'changed by', 'reason']),
    '',
    '  in flight and waiting are attempt facts (waiting = PREPARED, e.g. refused by the breaker or the bulkhead);',
    "  breaker state and each worker's refusals are on its /metrics: vidorch_breaker_state, vidorch_provider_refusals_total.",
  ].join('\n');
}

export function printSpoolStatus(st: SpoolStatus): string {
  const lines = [
    `spool ${st.dir}`,
    `  waiting for replay   ${st.pending} callback(s) in ${st.files} file(s)`,
    `  dead letters         ${st.deadLetters}${st.deadLetters ? ' (fix the cause, then `ops spool requeue --reason …`)' : ''}`,
  ];
  for (const d of st.recentDeadLetters) lines.push(`    ${d.deadAt}  ${d.provider}  token ${d.token}  ${d.error}`);
  return lines.join('\n');
}

export function printProviderQueue(r: ProviderQueueReport): string {
  const shown = r.entries.map((e) => ({
    position: e.position === null ? 'granted' : String(e.position),
    task: e.taskId,
    tenant: e.tenantId,
    priority: e.priority,
    waited: formatSeconds(e.waited_seconds),
    // A grant dated ahead holds the slot until the task's moment in the provider's create pace.
    why:
      e.position === null
        ? e.granted_at && Date.parse(e.granted_at) > Date.now()
          ? `paced until ${e.granted_at}`
          : `granted ${e.granted_at ?? ''}`
        : (e.reason ?? 'provider_full'),
  }));
  return [
    `${r.provider}: ${r.in_flight} of ${r.limit ?? 'unlimited'} slots taken; ${r.waiting} waiting, ${r.granted} granted not yet used; policy ${r.policy}${r.policy === 'fair' ? ` (aging one level per ${formatSeconds(r.aging_seconds)})` : ''}`,
    shown.length ? table(shown, ['position', 'task', 'tenant', 'priority', 'waited', 'why']) : '  nobody waits',
  ].join('\n');
}
