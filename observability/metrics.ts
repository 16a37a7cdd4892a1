// Prometheus metrics, served on the operator listener (observability/ops-listener.ts). Counters
// are incremented where things happen; gauges that describe facts (backlogs, counts by state)
// mirror the fact sampler's last pass (observability/facts.ts), so a scrape never queries.
import type pg from 'pg';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { FactSnapshot } from './facts';

export interface Metrics {
  readonly registry: Registry;
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly httpDuration: Histogram<'method' | 'route'>;
  readonly tasksCreated: Counter<'outcome'>;
  readonly budgetThresholds: Counter<'scope' | 'threshold'>;
  readonly callbacksReceived: Counter<'provider' | 'outcome'>;
  readonly outboxPublished: Counter<'path' | 'outcome'>;
}

export function createMetrics(opts: {
  service: string;
  /** The fact sampler's last snapshot (observability/facts.ts). */
  facts?: () => FactSnapshot | null;
  /** The process's request pool, reported as vidorch_db_pool_clients. */
  pool?: Pick<pg.Pool, 'totalCount' | 'idleCount' | 'waitingCount'>;
}): Metrics {
  const registry = new Registry();
  registry.setDefaultLabels({ service: opts.service });
  collectDefaultMetrics({ register: registry });
  const metrics: Metrics = {
    registry,
    httpRequests: new Counter({
      name: 'vidorch_http_requests_total',
      help: 'HTTP requests by route and status',
      labelNames: ['method', 'route', 'status'],
      registers: [registry],
    }),
    httpDuration: new Histogram({
      name: 'vidorch_http_request_duration_seconds',
      help: 'HTTP request duration',
      labelNames: ['method', 'route'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
    tasksCreated: new Counter({
      name: 'vidorch_tasks_created_total',
      help: 'Task creations that reached the create handler, by outcome (created, replayed, invalid, conflict, insufficient_credits, over_budget, unavailable: the 503s of a mode, the region, the outbox backlog or the database, rejected, error)',
      labelNames: ['outcome'],
      registers: [registry],
    }),
    budgetThresholds: new Counter({
      name: 'vidorch_budget_thresholds_total',
      help: 'Spend budget thresholds crossed (each once per budget and period; the tenant is sent tenant.budget_threshold), by scope (tenant, key) and threshold percent',
      labelNames: ['scope', 'threshold'],
      registers: [registry],
    }),
    callbacksReceived: new Counter({
      name: 'vidorch_callbacks_received_total',
      help: 'Provider callbacks by outcome (stored, duplicate, bad_signature, unknown_token)',
      labelNames: ['provider', 'outcome'],
      registers: [registry],
    }),
    outboxPublished: new Counter({
      name: 'vidorch_outbox_published_total',
      help: 'Outbox rows published to Temporal by path (fast_path, relay) and outcome',
      labelNames: ['path', 'outcome'],
      registers: [registry],
    }),
  };
  if (opts.facts) registerFactGauges(registry, opts.facts);
  if (opts.pool) registerPoolGauge(registry, opts.pool);
  return metrics;
}

function registerFactGauges(registry: Registry, facts: () => FactSnapshot | null): void {
  // Each gauge mirrors the sampler's last pass (observability/facts.ts); a scrape runs no query.
  const gauge = (name: string, help: string, labelNames: string[], fill: (g: Gauge, f: FactSnapshot) => void) =>
    new Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      collect() {
        const f = facts();
        this.reset();
        if (f) fill(this, f);
      },
    });
  gauge('vidorch_tasks_by_status', 'Tasks by status (non-terminal, plus terminal ones of the last hour)', ['status'], (g, f) => {
    for (const [status, n] of Object.entries(f.tasksByStatus)) g.set({ status }, n);
  });
  gauge(
    'vidorch_slot_waiting',
    'Attempts waiting for a provider slot (slot_wait, not yet granted), per provider and tenant',
    ['provider', 'tenant'],
    (g, f) => {
      for (const r of f.slotWaiting) g.set({ provider: r.provider, tenant: r.tenantId }, r.waiting);
    },
  );
  gauge('vidorch_slot_oldest_wait_seconds', "Seconds the longest-waiting attempt has waited for a provider's slot, per provider", ['provider'], (g, f) => {
    const oldest = new Map<string, number>();
    for (const r of f.slotWaiting) oldest.set(r.provider, Math.max(oldest.get(r.provider) ?? 0, r.oldestSeconds));
    for (const [provider, s] of oldest) g.set({ provider }, s);
  });
  gauge(
    'vidorch_output_host_refused_tasks',
    "Tasks waiting in OUTPUT_AT_RISK because their output's host is not on the provider's allow-list (PROVIDER_<P>_OUTPUT_HOSTS), per provider: allow the host before the URL expires (docs/runbooks/providers.md)",
    ['provider'],
    (g, f) => {
      for (const r of f.outputHostRefused) g.set({ provider: r.provider }, r.tasks);
    },
  );
  gauge(
    'vidorch_tasks_waiting_daily_cap',
    "Tasks waiting unsent for the reset of their model's daily allowance at the provider (a Runway 429 on create), per provider (ops provider caps)",
    ['provider'],
    (g, f) => {
      for (const r of f.capWaiting) g.set({ provider: r.provider }, r.tasks);
    },
  );
  gauge(
    'vidorch_tasks_moderated',
    "Tasks a provider's content moderation ended (CONTENT_MODERATED) in the last hour, per provider; per tenant: ops moderation",
    ['provider'],
    (g, f) => {
      for (const r of f.moderated) g.set({ provider: r.provider }, r.tasks);
    },
  );
  gauge('vidorch_outbox_backlog', 'Unpublished outbox rows', [], (g, f) => g.set(f.outboxBacklog));
  gauge('vidorch_outbox_oldest_age_seconds', 'Age of the oldest unpublished outbox row', [], (g, f) => g.set(f.outboxOldestAgeSeconds));
  gauge('vidorch_inbox_unprocessed', 'Callback inbox rows not yet applied', [], (g, f) => g.set(f.inboxUnprocessed));
  gauge('vidorch_assets_in_fallback', 'Stored objects (videos, thumbnails) in the fallback bucket, not yet copied back by the asset reconciler', [], (g, f) =>
    g.set(f.assetsInFallback),
  );
  gauge(
    'vidorch_callback_lag_seconds',
    "Seconds from a provider event (the provider's own updated-at) to our receipt of its callback, per provider, over callbacks of the last 5 minutes (quantiles)",
    ['provider', 'quantile'],
    (g, f) => {
      for (const r of f.callbackLag) {
        g.set({ provider: r.provider, quantile: '0.5' }, r.p50);
        g.set({ provider: r.provider, quantile: '0.95' }, r.p95);
      }
    },
  );
  gauge(
    'vidorch_poll_fallback_ratio',
    'Per provider, the share of attempts whose terminal job state (recorded in the last 15 minutes) a poll or reconciliation lookup recorded before any callback',
    ['provider'],
    (g, f) => {
      for (const r of f.pollFallback) g.set({ provider: r.provider }, r.ratio);
    },
  );
  gauge(
    'vidorch_ledger_imbalance',
    'Closed tasks whose reserve differs from settle + release, among those whose ledger changed since the sampler started (must be 0; `ops reconcile` checks the whole ledger)',
    [],
    (g, f) => g.set(f.ledgerImbalance),
  );
  gauge('vidorch_facts_sampled_age_seconds', 'Age of the fact gauges: seconds since their last pass ended', [], (g, f) =>
    g.set((Date.now() - f.sampledAt) / 1000),
  );
  gauge('vidorch_facts_pass_duration_seconds', 'How long the last pass over the fact gauges took', [], (g, f) => g.set(f.durationMs / 1000));
}

/** The request pool's clients (pg.Pool): a waiting count above 0 means requests queue for a connection. */
function registerPoolGauge(registry: Registry, pool: Pick<pg.Pool, 'totalCount' | 'idleCount' | 'waitingCount'>): void {
  new Gauge({
    name: 'vidorch_db_pool_clients',
    help: "This process's request pool: connections open (total), idle, and callers waiting for one",
    labelNames: ['state'],
    registers: [registry],
    collect() {
      this.set({ state: 'total' }, pool.totalCount);
      this.set({ state: 'idle' }, pool.idleCount);
      this.set({ state: 'waiting' }, pool.waitingCount);
    },
  });
}

/** What registerResilienceGauges reads per provider (activities/provider-guard.ts ProviderGuard.snapshots). */
export interface ResilienceView {
  readonly breaker: { readonly state: string; readonly failureRate: number; readonly forced: string | null };
  readonly retriesAvailable: number;
  readonly bulkhead: { readonly limit: number; readonly effectiveLimit: number } | null;
  /** Refusals since the process started, keyed "guard/reason". */
  readonly refusals: Readonly<Record<string, number>>;
  /** Provider calls since the process started, by the breaker's verdict. */
  readonly calls: Readonly<Record<string, number>>;
}

/**
 * The submit claims' durations (activities/submit-attempt.ts), lock waits included: the slot
 * queue's cost as a worker sees it (docs/providers.md "The slot queue"). Returns the observer.
 */
export function registerClaimHistogram(registry: Registry): (seconds: number) => void {
  const h = new Histogram({
    name: 'vidorch_submit_claim_seconds',
    help: "Submit claim transactions (the provider's control row lock and the slot queue included), seconds",
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  });
  return (seconds) => h.observe(seconds);
}

/**
 * Per-provider breaker, retry-budget and bulkhead metrics, read from the process's guards at
 * scrape time; with `inFlight`, also the jobs in flight per provider from the attempt facts.
 */
export function registerResilienceGauges(
  registry: Registry,
  snapshots: () => Record<string, ResilienceView>,
  inFlight?: () => Promise<Record<string, number>>,
): void {
  new Counter({
    name: 'vidorch_provider_refusals_total',
    help: 'Submit claims refused or sent to wait by this process, per provider: guard (breaker, bulkhead, retry_budget, pace, send_by, daily_cap) and reason (open, forced-open, probes-busy, recovering, strict; full, ramp; spent; pace: wait, a claim that may not create yet by the create pace; send_by: lapsed, a claim that reached its call past its send-by moment and sent nothing; daily_cap: waiting, a claim that waits for the reset of the daily allowance of its model, refused, a create the provider refused for it)',
    labelNames: ['provider', 'guard', 'reason'],
    registers: [registry],
    collect() {
      // The guards keep the running totals; mirror them (they only grow).
      this.reset();
      for (const [provider, s] of Object.entries(snapshots())) {
        for (const [key, n] of Object.entries(s.refusals)) {
          const [guard = key, reason = ''] = key.split('/');
          this.inc({ provider, guard, reason }, n);
        }
      }
    },
  });
  new Counter({
    name: 'vidorch_provider_calls_total',
    help: "Provider submit calls made by this process, per provider and the breaker's verdict (success: accepted or our own 4xx; failure: 429, 5xx, unknown)",
    labelNames: ['provider', 'verdict'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [provider, s] of Object.entries(snapshots())) {
        for (const [verdict, n] of Object.entries(s.calls)) this.inc({ provider, verdict }, n);
      }
    },
  });
  new Gauge({
    name: 'vidorch_bulkhead_limit',
    help: "A provider's bulkhead limit as last read at a claim (configured) and the ceiling now (effective: lower while ramping up after a rebuild)",
    labelNames: ['provider', 'kind'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [provider, s] of Object.entries(snapshots())) {
        if (!s.bulkhead) continue;
        this.set({ provider, kind: 'configured' }, s.bulkhead.limit);
        this.set({ provider, kind: 'effective' }, s.bulkhead.effectiveLimit);
      }
    },
  });
  if (inFlight) {
    new Gauge({
      name: 'vidorch_bulkhead_in_flight',
      help: 'Jobs in flight per provider according to the attempt facts (SUBMITTING, SUBMITTED, RUNNING, SUBMIT_UNKNOWN): what the bulkhead counts',
      labelNames: ['provider'],
      registers: [registry],
      async collect() {
        this.reset();
        for (const [provider, n] of Object.entries(await inFlight())) this.set({ provider }, n);
      },
    });
  }
  const states = ['closed', 'half-open', 'open'];
  new Gauge({
    name: 'vidorch_breaker_state',
    help: 'Circuit breaker state per provider (1 for the current state); forced says whether an operator forced it',
    labelNames: ['provider', 'state', 'forced'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [provider, s] of Object.entries(snapshots())) {
        for (const state of states) this.set({ provider, state, forced: s.breaker.forced ?? 'no' }, s.breaker.state === state ? 1 : 0);
      }
    },
  });
  new Gauge({
    name: 'vidorch_breaker_failure_rate',
    help: 'Failure share of provider submits in the breaker window',
    labelNames: ['provider'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [provider, s] of Object.entries(snapshots())) this.set({ provider }, s.breaker.failureRate);
    },
  });
  new Gauge({
    name: 'vidorch_retry_budget_available',
    help: 'Retry attempts the provider budget allows now',
    labelNames: ['provider'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [provider, s] of Object.entries(snapshots())) this.set({ provider }, s.retriesAvailable);
    },
  });
}

/** Route decisions of this process (activities/routing.ts): `via` fallback counts the static route's use. */
export function registerRoutingMetrics(
  registry: Registry,
  counts: () => ReadonlyArray<{ provider: string; via: string; reason: string; count: number }>,
): void {
  new Counter({
    name: 'vidorch_route_decisions_total',
    help: 'Provider route decisions by provider, path (scored | fallback | pinned | rejected) and reason',
    labelNames: ['provider', 'via', 'reason'],
    registers: [registry],
    collect() {
      this.reset();
      for (const c of counts()) this.inc({ provider: c.provider, via: c.via, reason: c.reason }, c.count);
    },
  });
}

/** The demand floor of poll intervals per provider, as this process last computed it (activities/poll-demand.ts). */
export function registerPollDemandGauge(registry: Registry, floors: () => ReadonlyMap<string, number>): void {
  new Gauge({
    name: 'vidorch_poll_demand_floor_seconds',
    help: "The shortest poll interval that keeps a provider's polls within its quota share, from the jobs waiting on it (0: demand below the quota)",
    labelNames: ['provider'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [provider, ms] of floors()) this.set({ provider }, ms / 1000);
    },
  });
}

/**
 * Wake signals after callbacks (temporal/wakes.ts): sent, and wakes folded into a signal already due;
 * and the tasks whose wake is in flight or waits for a place (WAKE_SIGNALS_MAX_IN_FLIGHT). A
 * queue that stays long means Temporal answers signals slower than callbacks arrive: workflows
 * then apply their callbacks at the next poll instead of at once.
 */
export function registerWakeMetrics(registry: Registry, stats: () => { sent: number; coalesced: number; inFlight: number; queued: number }): void {
  new Counter({
    name: 'vidorch_callback_wakes_total',
    help: 'Wake signals after callbacks: sent to Temporal, or coalesced into one already in flight for the same task',
    labelNames: ['result'],
    registers: [registry],
    collect() {
      this.reset();
      const s = stats();
      this.inc({ result: 'sent' }, s.sent);
      this.inc({ result: 'coalesced' }, s.coalesced);
    },
  });
  new Gauge({
    name: 'vidorch_callback_wakes_pending',
    help: 'Tasks whose wake signal is in flight to Temporal, or queued behind WAKE_SIGNALS_MAX_IN_FLIGHT others, now',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const s = stats();
      this.set({ state: 'in_flight' }, s.inFlight);
      this.set({ state: 'queued' }, s.queued);
    },
  });
}

/**
 * Tenant webhooks (workers/webhook-relay.ts): the notify backlog (deliveries kept for targets
 * that take them; it grows while DEGRADED_NOTIFY or a lower mode pauses deliveries), its oldest
 * age, whether the mode pauses them, and attempts by what followed them.
 */
export function registerNotifyMetrics(
  registry: Registry,
  backlog: () => { count: number; oldestSeconds: number; paused: boolean } | null,
): { attempts: Counter<'outcome'> } {
  new Gauge({
    name: 'vidorch_notify_backlog',
    help: 'Webhook deliveries waiting to be sent (pending, to enabled endpoints), as the relay last counted',
    registers: [registry],
    collect() {
      this.set(backlog()?.count ?? 0);
    },
  });
  new Gauge({
    name: 'vidorch_notify_backlog_oldest_seconds',
    help: 'Age of the oldest webhook delivery waiting to be sent',
    registers: [registry],
    collect() {
      this.set(backlog()?.oldestSeconds ?? 0);
    },
  });
  new Gauge({
    name: 'vidorch_notify_paused',
    help: '1 while the system mode holds webhook deliveries back (DEGRADED_NOTIFY and below), else 0',
    registers: [registry],
    collect() {
      this.set(backlog()?.paused ? 1 : 0);
    },
  });
  const attempts = new Counter({
    name: 'vidorch_webhook_attempts_total',
    help: "Webhook delivery attempts by what followed: delivered, retry (scheduled again), failed (schedule used up), unrecorded (sent, but recording it failed: sent again when its lease expires) or not_sent (the endpoint's signing secrets could not be read or opened: tried again when its lease expires)",
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  return { attempts };
}

/** Live event streams (api/event-streams.ts): open streams, the LISTEN connection, events sent by type. Returns the sent counter. */
export function registerEventMetrics(registry: Registry, state: () => { open: number; listening: boolean; connects: number }): Counter<'event'> {
  new Gauge({
    name: 'vidorch_event_streams_open',
    help: 'Open live event streams (SSE) on this API process',
    registers: [registry],
    collect() {
      this.set(state().open);
    },
  });
  new Gauge({
    name: 'vidorch_event_listener_up',
    help: '1 while the event LISTEN connection is up (0 before the first stream, or while reconnecting)',
    registers: [registry],
    collect() {
      this.set(state().listening ? 1 : 0);
    },
  });
  new Counter({
    name: 'vidorch_event_listener_connects_total',
    help: 'Times the event LISTEN connection was established (more than one: it was lost and re-established)',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(state().connects);
    },
  });
  return new Counter({ name: 'vidorch_events_sent_total', help: 'Live events sent, by SSE event type', labelNames: ['event'], registers: [registry] });
}

/** What the worker's reconciler activity reports after each run (reconcilers/run.ts). */
export interface ReconcileRunMetrics {
  readonly reconciler: string;
  readonly finishedAt: Date;
  readonly durationMs: number;
  readonly findings: number;
  readonly changed: number;
  readonly failed: boolean;
}

/**
 * The scheduled reconcilers' last run, as seen by this worker (a run goes to whichever worker
 * polls the reconcile queue: across workers take max by (reconciler) of the timestamp).
 * vidorch_reconcile_last_run_timestamp_seconds going stale means the Schedule is paused or failing.
 */
export function registerReconcileMetrics(registry: Registry): (run: ReconcileRunMetrics) => void {
  const gauge = (name: string, help: string) => new Gauge({ name, help, labelNames: ['reconciler'], registers: [registry] });
  const last = gauge('vidorch_reconcile_last_run_timestamp_seconds', 'When the reconciler last finished a run (unix seconds)');
  const duration = gauge('vidorch_reconcile_last_run_duration_seconds', "The reconciler's last run duration");
  const findings = gauge('vidorch_reconcile_last_run_findings', "Findings of the reconciler's last run");
  const changed = gauge('vidorch_reconcile_last_run_changed', "Facts changed or workflows started/woken by the reconciler's last run");
  const failed = gauge('vidorch_reconcile_last_run_failed', "1 when the reconciler's last run failed, else 0");
  const runs = new Counter({
    name: 'vidorch_reconcile_runs_total',
    help: 'Reconciler runs by outcome (ok, failed)',
    labelNames: ['reconciler', 'outcome'],
    registers: [registry],
  });
  return (run) => {
    const l = { reconciler: run.reconciler };
    last.set(l, run.finishedAt.getTime() / 1000);
    duration.set(l, run.durationMs / 1000);
    failed.set(l, run.failed ? 1 : 0);
    if (!run.failed) {
      findings.set(l, run.findings);
      changed.set(l, run.changed);
    }
    runs.inc({ ...l, outcome: run.failed ? 'failed' : 'ok' });
  };
}
