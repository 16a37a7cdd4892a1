// Fact gauges (backlogs, counts by state, the ledger check) computed once per interval, in one
// place, on a connection of their own: never on the pool that serves requests or activities,
// and never at scrape time. A scrape reads the last snapshot (docs/performance.md "Metrics
// without load"). Every query is bounded by an index or a time window; the ledger check looks
// only at tasks whose ledger changed since the previous pass (and the ones it found out of
// balance, until they balance).
import { sql } from 'drizzle-orm';
import { createDatabase, type DatabaseHost, type Db } from '../db/client';
import { waitingSummary } from '../db/slot-queue';
import { OUTPUT_HOST_REFUSED_EVENT } from '../domain/errors';
import { CONTENT_MODERATED } from '../domain/moderation';
import type { Logger } from './logger';

export interface FactSnapshot {
  readonly tasksByStatus: Readonly<Record<string, number>>;
  readonly outboxBacklog: number;
  readonly outboxOldestAgeSeconds: number;
  readonly inboxUnprocessed: number;
  /** Live objects in the fallback bucket, waiting for the asset reconciler to copy them back (docs/decisions/0029). */
  readonly assetsInFallback: number;
  readonly callbackLag: readonly { provider: string; p50: number; p95: number }[];
  readonly pollFallback: readonly { provider: string; ratio: number }[];
  /** Closed tasks whose reserve differs from settle + release, among those checked (must be 0). */
  readonly ledgerImbalance: number;
  /**
   * Tasks waiting in OUTPUT_AT_RISK because their output's host is not on the provider's
   * allow-list (activities/rescue-output.ts), per provider: an operator can allow it until the URL expires.
   */
  readonly outputHostRefused: readonly { provider: string; tasks: number }[];
  /** Tasks waiting unsent for the reset of their model's daily allowance, per provider (docs/decisions/0070). */
  readonly capWaiting: readonly { provider: string; tasks: number }[];
  /** Tasks a provider's content moderation ended in the last hour, per provider (docs/decisions/0070). */
  readonly moderated: readonly { provider: string; tasks: number }[];
  /** Attempts waiting for a provider slot, per provider and tenant, with the oldest wait (db/slot-queue.ts). */
  readonly slotWaiting: readonly { provider: string; tenantId: string; waiting: number; oldestSeconds: number }[];
  /** Extra facts of the process (the worker's jobs in flight per provider). */
  readonly inFlight: Readonly<Record<string, number>> | null;
  /** When this pass ended (ms since the epoch) and how long it took. */
  readonly sampledAt: number;
  readonly durationMs: number;
}

export interface FactSampler {
  /** The last pass's facts; null before the first pass ends. */
  latest(): FactSnapshot | null;
  /** Runs a pass now (tests; the loop runs them on its own). */
  refresh(): Promise<FactSnapshot>;
  stop(): Promise<void>;
}

export interface FactSamplerOptions {
  readonly databaseUrl: string;
  /** DATABASE_FAILOVER_HOSTS (docs/decisions/0030). */
  readonly failoverHosts?: readonly DatabaseHost[];
  readonly intervalMs: number;
  readonly logger: Logger;
  readonly applicationName: string;
  /** The first ledger pass looks this far back (later passes: since the previous one). */
  readonly ledgerLookbackMs?: number;
  readonly inFlight?: (db: Db) => Promise<Record<string, number>>;
}

/** Rows written by transactions that committed late still fall inside the next window. */
const LEDGER_OVERLAP_MS = 60_000;
const STATEMENT_TIMEOUT_MS = 10_000;

export function startFactSampler(opts: FactSamplerOptions): FactSampler {
  const database = createDatabase({
    url: opts.databaseUrl,
    max: 1,
    applicationName: opts.applicationName,
    statementTimeoutMs: STATEMENT_TIMEOUT_MS,
    failoverHosts: opts.failoverHosts,
  });
  const ledger = ledgerCheck(opts.ledgerLookbackMs ?? 3_600_000);
  let last: FactSnapshot | null = null;
  let running: Promise<FactSnapshot> | null = null;

  async function pass(): Promise<FactSnapshot> {
    const started = Date.now();
    const db = database.db;
    const snapshot: FactSnapshot = {
      ...(await basicFacts(db)),
      ledgerImbalance: await ledger(db),
      inFlight: opts.inFlight ? await opts.inFlight(db) : null,
      sampledAt: Date.now(),
      durationMs: Date.now() - started,
    };
    last = snapshot;
    return snapshot;
  }
  const refresh = () => (running ??= pass().finally(() => (running = null)));

  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  const loop = () => {
    if (stopped) return;
    refresh()
      .catch((err: unknown) => opts.logger.warn({ err: (err as Error).message }, 'fact gauges: pass failed; keeping the previous values'))
      .finally(() => {
        if (!stopped) timer = setTimeout(loop, opts.intervalMs);
      });
  };
  loop();
  return {
    latest: () => last,
    refresh,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running?.catch(() => undefined);
      await database.close();
    },
  };
}

async function rows<T>(db: Db, query: ReturnType<typeof sql>): Promise<T[]> {
  return (await db.execute(query)).rows as T[];
}

async function basicFacts(db: Db) {
  const byStatus = await rows<{ status: string; n: number }>(
    db,
    sql`
    SELECT status, count(*)::int AS n FROM generation_task WHERE terminal_at IS NULL GROUP BY status
    UNION ALL
    SELECT status, count(*)::int AS n FROM generation_task WHERE terminal_at > now() - interval '1 hour' GROUP BY status`,
  );
  const tasksByStatus: Record<string, number> = {};
  for (const r of byStatus) tasksByStatus[r.status] = (tasksByStatus[r.status] ?? 0) + r.n;
  const [outbox] = await rows<{ n: number; age: number | null }>(
    db,
    sql`
    SELECT count(*)::int AS n, extract(epoch FROM now() - min(created_at))::float AS age FROM outbox_event WHERE published_at IS NULL`,
  );
  const [inbox] = await rows<{ n: number }>(db, sql`SELECT count(*)::int AS n FROM callback_inbox WHERE processed_at IS NULL`);
  // The partial index idx_asset_fallback covers exactly these rows.
  const [fallback] = await rows<{ n: number }>(db, sql`SELECT count(*)::int AS n FROM asset WHERE location = 'fallback' AND deleted_at IS NULL`);
  // docs/providers.md "Callback lag and poll fallback" defines both.
  const callbackLag = await rows<{ provider: string; p50: number; p95: number }>(
    db,
    sql`
    SELECT provider,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY lag) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY lag) AS p95
    FROM (SELECT provider, extract(epoch FROM received_at - provider_updated_at)::float AS lag FROM callback_inbox
          WHERE source = 'callback' AND received_at > now() - interval '5 minutes' AND provider_updated_at IS NOT NULL) x
    GROUP BY provider`,
  );
  const pollFallback = await rows<{ provider: string; ratio: number }>(
    db,
    sql`
    SELECT provider, avg(CASE WHEN source = 'callback' THEN 0 ELSE 1 END)::float AS ratio FROM (
      SELECT DISTINCT ON (attempt_id) provider, source FROM callback_inbox
      WHERE event_type IN ('succeeded', 'failed', 'canceled', 'aborted') AND attempt_id IS NOT NULL
        AND received_at > now() - interval '15 minutes'
      ORDER BY attempt_id, received_at) first_seen
    GROUP BY provider`,
  );
  // The latest transition of each OUTPUT_AT_RISK task (task_transition_task_version serves it).
  const outputHostRefused = await rows<{ provider: string; tasks: number }>(
    db,
    sql`
    SELECT t.provider, count(*)::int AS tasks FROM generation_task t
    CROSS JOIN LATERAL (SELECT source_event FROM task_transition tr WHERE tr.task_id = t.task_id ORDER BY tr.to_version DESC LIMIT 1) last
    WHERE t.terminal_at IS NULL AND t.status = 'OUTPUT_AT_RISK' AND last.source_event = ${OUTPUT_HOST_REFUSED_EVENT}
    GROUP BY t.provider`,
  );
  const capWaiting = await rows<{ provider: string; tasks: number }>(
    db,
    sql`
    SELECT a.provider, count(*)::int AS tasks FROM generation_task t JOIN task_attempt a ON a.attempt_id = t.active_attempt_id
    WHERE t.terminal_at IS NULL AND t.status = 'SUBMITTING' AND a.submit_state = 'PREPARED' AND a.capped_until IS NOT NULL
    GROUP BY a.provider`,
  );
  const moderated = await rows<{ provider: string; tasks: number }>(
    db,
    sql`
    SELECT coalesce(provider, '') AS provider, count(*)::int AS tasks FROM generation_task
    WHERE terminal_at > now() - interval '1 hour' AND failure_code = ${CONTENT_MODERATED}
    GROUP BY 1`,
  );
  const now = Date.now();
  const slotWaiting = (await waitingSummary(db)).map((r) => ({
    provider: r.provider,
    tenantId: r.tenantId,
    waiting: r.waiting,
    oldestSeconds: Math.max(0, (now - r.oldestSince.getTime()) / 1000),
  }));
  return {
    tasksByStatus,
    slotWaiting,
    outboxBacklog: outbox?.n ?? 0,
    outboxOldestAgeSeconds: outbox?.age ?? 0,
    inboxUnprocessed: inbox?.n ?? 0,
    assetsInFallback: fallback?.n ?? 0,
    callbackLag,
    pollFallback,
    outputHostRefused,
    capWaiting,
    moderated,
  };
}

/**
 * The ledger check, incremental: each pass re-checks the tasks with a ledger row newer than the
 * previous pass (minus an overlap) and those found out of balance before; the first pass looks
 * back `lookbackMs`. The whole ledger is `ops reconcile`'s job, not a gauge's.
 */
function ledgerCheck(lookbackMs: number) {
  let since: Date | null = null;
  let unbalanced: string[] = [];
  return async (db: Db): Promise<number> => {
    const from = since ? new Date(since.getTime() - LEDGER_OVERLAP_MS) : sql`now() - make_interval(secs => ${lookbackMs / 1000})`;
    const [clock] = await rows<{ now: Date }>(db, sql`SELECT now() AS now`);
    const found = await rows<{ task_id: string }>(
      db,
      sql`
      WITH checked AS (
        SELECT DISTINCT task_id FROM credit_ledger WHERE created_at > ${from} AND task_id IS NOT NULL
        UNION SELECT unnest(${`{${unbalanced.join(',')}}`}::uuid[]))
      SELECT l.task_id FROM credit_ledger l JOIN checked USING (task_id)
      GROUP BY l.task_id
      HAVING count(*) FILTER (WHERE l.entry_type IN ('SETTLE', 'RELEASE')) > 0
         AND sum(CASE WHEN l.entry_type = 'RESERVE' THEN l.amount ELSE 0 END)
          <> sum(CASE WHEN l.entry_type IN ('SETTLE', 'RELEASE') THEN l.amount ELSE 0 END)`,
    );
    since = clock ? new Date(clock.now) : since;
    unbalanced = found.map((r) => r.task_id);
    return unbalanced.length;
  };
}
