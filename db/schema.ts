// The fact source. Table and column names follow the source design's data model so that its SQL reads
// straight onto this schema; additions are marked. Money is NUMERIC(18,6) and travels as a
// decimal string (drizzle's default for numeric), never as a float.
import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  check,
  customType,
  index,
  integer,
  jsonb,
  numeric,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';
import type { ProviderProgress } from '../domain/progress';
import type { MediaInfo } from '../domain/media-info';
import { PROVIDER_COST_SOURCES, type ProviderCostSource, type ProviderCostUnit } from '../domain/provider-cost';
import type { ReconcileCursor, ReconcileFinding } from '../domain/reconcile-report';
import { ATTEMPT_STATES, LEDGER_ENTRY_TYPES, SYSTEM_MODES, TASK_STATES, type AttemptState, type TaskStatus } from '../domain/states';
import type { TaskRequest } from '../domain/task-request';

const money = (name: string) => numeric(name, { precision: 18, scale: 6 });
const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });
/** Postgres's 64-bit transaction id (pg_current_xact_id()); read as its decimal text. */
const xid8 = customType<{ data: string; driverData: string }>({ dataType: () => 'xid8' });
const inList = (values: readonly string[]) => sql.raw(values.map((v) => `'${v}'`).join(', '));
/**
 * A task's own webhook_url's origin (scheme and authority), as the webhook trigger keys its
 * target (`task-url:<tenant>:<origin>`, migration 0014) and the open-task index reads it.
 */
export const TASK_URL_ORIGIN_PATTERN = '^[A-Za-z]+://[^/?#]+';

/** Addition: tenants and their hashed API keys. */
export const tenant = pgTable('tenant', {
  tenant_id: uuid('tenant_id').primaryKey(),
  name: text('name').notNull().unique(),
  /** Days a task's output objects are kept after it succeeds (null: config OUTPUT_RETENTION_DAYS). storage/output-expiry.ts. */
  output_retention_days: integer('output_retention_days'),
  created_at: ts('created_at').notNull().defaultNow(),
});

export const apiKey = pgTable(
  'api_key',
  {
    key_id: uuid('key_id').primaryKey(),
    tenant_id: uuid('tenant_id')
      .notNull()
      .references(() => tenant.tenant_id),
    /** sha256 of the whole key, hex. The key itself is shown once and never stored. */
    key_hash: text('key_hash').notNull().unique(),
    /** First characters of the key, to recognise it in listings. */
    key_prefix: text('key_prefix').notNull(),
    created_at: ts('created_at').notNull().defaultNow(),
    revoked_at: ts('revoked_at'),
  },
  (t) => [index('idx_api_key_tenant').on(t.tenant_id)],
);

/** docs/design.md §4. One row per resource scope; every fact write checks region and epoch here. */
export const regionWriteFence = pgTable(
  'region_write_fence',
  {
    resource_scope: text('resource_scope').primaryKey(),
    active_region: text('active_region').notNull(),
    write_epoch: bigint('write_epoch', { mode: 'number' }).notNull(),
    mode: text('mode').notNull(),
    updated_at: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [check('region_write_fence_mode_check', sql`${t.mode} IN (${inList(SYSTEM_MODES)})`)],
);

/** docs/design.md §4, plus the request, its hash, routing and settlement columns. */
export const generationTask = pgTable(
  'generation_task',
  {
    task_id: uuid('task_id').primaryKey(),
    tenant_id: uuid('tenant_id')
      .notNull()
      .references(() => tenant.tenant_id),
    project_id: uuid('project_id').notNull(),
    home_region: text('home_region').notNull(),
    write_epoch: bigint('write_epoch', { mode: 'number' }).notNull(),
    status: text('status').$type<TaskStatus>().notNull(),
    status_version: bigint('status_version', { mode: 'number' }).notNull().default(0),
    active_attempt_id: uuid('active_attempt_id'),
    idempotency_key: text('idempotency_key').notNull(),
    reserved_amount: money('reserved_amount').notNull(),
    created_at: ts('created_at').notNull().defaultNow(),
    updated_at: ts('updated_at').notNull().defaultNow(),
    terminal_at: ts('terminal_at'),
    // Additions.
    /** sha256 of the canonical request body; same key + other hash → 422. */
    request_hash: text('request_hash').notNull(),
    request: jsonb('request').$type<TaskRequest>().notNull(),
    provider: text('provider').notNull(),
    provider_model: text('provider_model').notNull(),
    priority: integer('priority').notNull().default(0),
    settled_amount: money('settled_amount'),
    failure_code: text('failure_code'),
    failure_message: text('failure_message'),
    cancel_requested_at: ts('cancel_requested_at'),
    /**
     * The one deadline, set at the API edge: no provider call starts after it (nor one that could
     * not finish by it), and a task not accepted by a provider by then fails with its credits
     * released. A job that exists runs on: it is paid for. docs/timeouts.md.
     */
    deadline_at: ts('deadline_at'),
    /** Media-step failures that were not the media's fault, counted toward the step's bound (docs/design.md §5 "Bounds"). */
    media_failures: integer('media_failures').notNull().default(0),
    /** Addition (usage and budgets per key, docs/decisions/0071, 0075): the API key that created the task; null for tasks created before it was kept. */
    api_key_id: uuid('api_key_id'),
  },
  (t) => [
    uniqueIndex('generation_task_tenant_idempotency_key').on(t.tenant_id, t.idempotency_key),
    index('idx_task_non_terminal_updated')
      .on(t.status, t.updated_at)
      .where(sql`${t.terminal_at} IS NULL`),
    index('idx_task_tenant_created').on(t.tenant_id, t.created_at, t.task_id),
    /** A key's tasks of a period (its budget's spend, db/budgets.ts). */
    index('idx_task_api_key_created')
      .on(t.api_key_id, t.created_at)
      .where(sql`${t.api_key_id} IS NOT NULL`),
    /**
     * The task-URL origins of a tenant's open tasks (the cap on them, db/webhooks.ts
     * taskUrlOriginsInUse); the expression is the one the webhook trigger keys targets by.
     */
    index('idx_task_open_webhook_origin')
      .on(t.tenant_id, sql`substring((${t.request} ->> 'webhook_url') from '${sql.raw(TASK_URL_ORIGIN_PATTERN)}')`)
      .where(sql`${t.terminal_at} IS NULL AND (${t.request} ->> 'webhook_url') IS NOT NULL`),
    /** Terminal tasks of the last hour (the fact gauges, observability/facts.ts). */
    index('idx_task_terminal_at')
      .on(t.terminal_at)
      .where(sql`${t.terminal_at} IS NOT NULL`),
    check('generation_task_status_check', sql`${t.status} IN (${inList(TASK_STATES)})`),
    check('generation_task_reserved_nonneg', sql`${t.reserved_amount} >= 0`),
  ],
);
export type TaskRow = typeof generationTask.$inferSelect;

/** docs/design.md §4. attempt_id is the provider idempotency key and the correlation token. */
export const taskAttempt = pgTable(
  'task_attempt',
  {
    attempt_id: uuid('attempt_id').primaryKey(),
    task_id: uuid('task_id')
      .notNull()
      .references(() => generationTask.task_id),
    attempt_no: integer('attempt_no').notNull(),
    provider: text('provider').notNull(),
    provider_model: text('provider_model').notNull(),
    provider_idempotency_key: text('provider_idempotency_key'),
    provider_job_id: text('provider_job_id'),
    submit_state: text('submit_state').$type<AttemptState>().notNull(),
    submit_started_at: ts('submit_started_at'),
    submit_finished_at: ts('submit_finished_at'),
    unknown_since: ts('unknown_since'),
    next_poll_at: ts('next_poll_at'),
    last_polled_at: ts('last_polled_at'),
    output_deadline_at: ts('output_deadline_at'),
    created_at: ts('created_at').notNull().defaultNow(),
    // Additions.
    /** The provider's own status word as last applied (e.g. Replicate "processing"). */
    provider_status: text('provider_status'),
    /** Provider timestamp of the last applied event; older events are ignored. */
    provider_updated_at: ts('provider_updated_at'),
    /** The provider's temporary output URL, kept until rescued. */
    output_url: text('output_url'),
    last_error: text('last_error'),
    /** Billable seconds the provider reported (e.g. Replicate metrics.predict_time). */
    provider_metrics: jsonb('provider_metrics'),
    /** Consecutive failed reads (status, cancel) of the attempt's job; 0 after any good read (activities/provider-reads.ts). */
    read_failures: integer('read_failures').notNull().default(0),
    status_version: bigint('status_version', { mode: 'number' }).notNull().default(0),
    /** The provider's latest progress of the job (domain/progress.ts), shown and streamed (docs/events.md). */
    progress: jsonb('progress').$type<ProviderProgress>(),
    /** When `progress` was last written. */
    progress_at: ts('progress_at'),
    /**
     * Addition (create pacing, docs/decisions/0057): the provider answered this attempt's create
     * with a throttle (HTTP 429, retryable). Such an attempt does not count against
     * MAX_SUBMIT_ATTEMPTS, only against MAX_THROTTLED_SUBMITS.
     */
    throttled: boolean('throttled').notNull().default(false),
    /**
     * Unused since docs/decisions/0069 (the create pace holds no places). Kept so that the previous
     * release, which reads and writes it, runs against this schema; a later release drops it.
     */
    paced_until: ts('paced_until'),
    /**
     * Stamped by the claim (PREPARED → SUBMITTING): the create may leave only before this moment,
     * and nothing may conclude the attempt sent nothing until after it (docs/decisions/0063).
     */
    send_by: ts('send_by'),
    /**
     * Addition (re-sent creates, docs/decisions/0064): how often this attempt's create was sent
     * again, same key, after its outcome became unknown, at a provider that refuses a duplicate
     * key (capabilities.resendable); bounded by UNKNOWN_RESEND_LIMIT. Each is counted before it leaves.
     */
    resends: integer('resends').notNull().default(0),
    /** When the last re-send was counted (they come no more often than the poll's pace). */
    resent_at: ts('resent_at'),
    /**
     * When the provider refused a re-send because a job with this attempt's key exists: evidence of
     * a job (db/job-evidence.ts), though it is not readable yet.
     */
    key_taken_at: ts('key_taken_at'),
    /**
     * Addition (the provider's daily cap, docs/decisions/0070): when this attempt first found its
     * provider's create allowance spent (a Runway 429 on create) and waited for the reset, unsent.
     */
    capped_since: ts('capped_since'),
    /** The reset it waits for (provider_create_cap.capped_until when it last looked); kept after it sends. */
    capped_until: ts('capped_until'),
    /**
     * Addition (docs/decisions/0071): what the provider job cost us, written once, in the
     * transaction that applies the job's end (domain/provider-cost.ts): the amount in `provider_cost_unit`
     * (null when unknown) and whether the provider reported it or it was computed from a published price.
     */
    provider_cost: money('provider_cost'),
    provider_cost_unit: text('provider_cost_unit').$type<ProviderCostUnit>(),
    provider_cost_source: text('provider_cost_source').$type<ProviderCostSource>(),
    provider_cost_at: ts('provider_cost_at'),
  },
  (t) => [
    uniqueIndex('task_attempt_task_attempt_no').on(t.task_id, t.attempt_no),
    uniqueIndex('task_attempt_provider_idempotency_key').on(t.provider, t.provider_idempotency_key),
    uniqueIndex('task_attempt_provider_job_id').on(t.provider, t.provider_job_id),
    index('idx_attempt_poll_due')
      .on(t.next_poll_at)
      .where(sql`${t.submit_state} IN ('SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN')`),
    check('task_attempt_submit_state_check', sql`${t.submit_state} IN (${inList(ATTEMPT_STATES)})`),
    check('task_attempt_provider_cost_source_check', sql`${t.provider_cost_source} IS NULL OR ${t.provider_cost_source} IN (${inList(PROVIDER_COST_SOURCES)})`),
    check('task_attempt_provider_cost_nonneg', sql`${t.provider_cost} IS NULL OR ${t.provider_cost} >= 0`),
    // The bulkhead counts a provider's jobs in flight from these facts.
    index('idx_attempt_provider_in_flight')
      .on(t.provider)
      .where(sql`${t.submit_state} IN ('SUBMITTING', 'SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN')`),
    // A claim that waits for the create pace counts the provider's unsent attempts before it (db/provider-control.ts).
    index('idx_attempt_provider_unsent')
      .on(t.provider, t.created_at)
      .where(sql`${t.submit_state} = 'PREPARED'`),
  ],
);
export type AttemptRow = typeof taskAttempt.$inferSelect;

/** docs/design.md §4. */
export const outboxEvent = pgTable(
  'outbox_event',
  {
    event_id: uuid('event_id').primaryKey(),
    aggregate_type: text('aggregate_type').notNull(),
    aggregate_id: uuid('aggregate_id').notNull(),
    event_type: text('event_type').notNull(),
    payload: jsonb('payload').notNull(),
    schema_version: integer('schema_version').notNull(),
    home_region: text('home_region').notNull(),
    write_epoch: bigint('write_epoch', { mode: 'number' }).notNull(),
    created_at: ts('created_at').notNull().defaultNow(),
    published_at: ts('published_at'),
    publish_attempts: integer('publish_attempts').notNull().default(0),
    next_retry_at: ts('next_retry_at'),
    // Addition.
    last_error: text('last_error'),
    /** A relay's lease on the row while it starts the workflow outside any transaction (workers/outbox-relay.ts). */
    claimed_until: ts('claimed_until'),
  },
  (t) => [
    index('idx_outbox_unpublished')
      .on(t.next_retry_at, t.created_at)
      .where(sql`${t.published_at} IS NULL`),
  ],
);
export type OutboxEventRow = typeof outboxEvent.$inferSelect;

/** docs/design.md §4, plus the task/attempt the event was matched to and where it came from. */
export const callbackInbox = pgTable(
  'callback_inbox',
  {
    inbox_id: uuid('inbox_id').primaryKey(),
    provider: text('provider').notNull(),
    provider_job_id: text('provider_job_id').notNull(),
    provider_event_id: text('provider_event_id'),
    dedupe_key: text('dedupe_key').notNull(),
    event_type: text('event_type').notNull(),
    payload: jsonb('payload').notNull(),
    signature_valid: boolean('signature_valid').notNull(),
    received_region: text('received_region').notNull(),
    received_at: ts('received_at').notNull().defaultNow(),
    processed_at: ts('processed_at'),
    process_error: text('process_error'),
    // Additions.
    attempt_id: uuid('attempt_id'),
    task_id: uuid('task_id'),
    /** 'callback' or 'poll': both share this one path and one dedupe. */
    source: text('source').notNull(),
    provider_updated_at: ts('provider_updated_at'),
  },
  (t) => [
    uniqueIndex('callback_inbox_provider_dedupe_key').on(t.provider, t.dedupe_key),
    index('idx_callback_unprocessed')
      .on(t.received_at)
      .where(sql`${t.processed_at} IS NULL`),
    index('idx_callback_task_unprocessed')
      .on(t.task_id, t.received_at)
      .where(sql`${t.processed_at} IS NULL`),
    // Callback health per provider (poll pacing, activities/callback-health.ts) and the
    // callback-lag gauge read the latest callbacks of one provider.
    index('idx_callback_provider_received')
      .on(t.provider, t.received_at)
      .where(sql`${t.source} = 'callback'`),
    // Evidence of a job for one attempt (db/job-evidence.ts): any row its token reached.
    index('idx_callback_attempt').on(t.attempt_id),
  ],
);

/** Addition: a tenant's credits. available = balance - reserved. */
export const creditAccount = pgTable(
  'credit_account',
  {
    tenant_id: uuid('tenant_id')
      .primaryKey()
      .references(() => tenant.tenant_id),
    balance: money('balance').notNull().default('0'),
    reserved: money('reserved').notNull().default('0'),
    version: bigint('version', { mode: 'number' }).notNull().default(0),
    updated_at: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [
    check('credit_account_reserved_nonneg', sql`${t.reserved} >= 0`),
    check('credit_account_reserved_within_balance', sql`${t.reserved} <= ${t.balance}`),
  ],
);

/** Addition: every credit movement, one row per business key (e.g. task:<id>:reserve). */
export const creditLedger = pgTable(
  'credit_ledger',
  {
    entry_id: uuid('entry_id').primaryKey(),
    tenant_id: uuid('tenant_id')
      .notNull()
      .references(() => tenant.tenant_id),
    task_id: uuid('task_id'),
    business_key: text('business_key').notNull().unique(),
    entry_type: text('entry_type').notNull(),
    amount: money('amount').notNull(),
    region: text('region').notNull(),
    write_epoch: bigint('write_epoch', { mode: 'number' }).notNull(),
    note: text('note'),
    created_at: ts('created_at').notNull().defaultNow(),
  },
  (t) => [
    index('idx_ledger_task').on(t.task_id),
    index('idx_ledger_tenant_created').on(t.tenant_id, t.created_at),
    /** Ledger rows since the fact sampler's previous pass (its incremental balance check). */
    index('idx_ledger_created').on(t.created_at),
    check('credit_ledger_amount_nonneg', sql`${t.amount} >= 0`),
    check('credit_ledger_entry_type_check', sql`${t.entry_type} IN (${inList(LEDGER_ENTRY_TYPES)})`),
  ],
);

/** Addition: every task state change, one row per new version. */
export const taskTransition = pgTable(
  'task_transition',
  {
    transition_id: bigserial('transition_id', { mode: 'number' }).primaryKey(),
    task_id: uuid('task_id')
      .notNull()
      .references(() => generationTask.task_id),
    /**
     * The task's tenant, filled by the trigger `task_transition_tenant` from the task row (no
     * writer names it): the tenant stream reads its own rows through the index below
     * (docs/decisions/0020-event-stream-resume.md).
     */
    tenant_id: uuid('tenant_id').notNull(),
    from_status: text('from_status').$type<TaskStatus>(),
    to_status: text('to_status').$type<TaskStatus>().notNull(),
    from_version: bigint('from_version', { mode: 'number' }),
    to_version: bigint('to_version', { mode: 'number' }).notNull(),
    source_event: text('source_event').notNull(),
    actor: text('actor').notNull(),
    attempt_id: uuid('attempt_id'),
    detail: jsonb('detail'),
    region: text('region').notNull(),
    write_epoch: bigint('write_epoch', { mode: 'number' }).notNull(),
    created_at: ts('created_at').notNull().defaultNow(),
    /**
     * The writing transaction's id. With transition_id it orders the tenant-wide event stream in
     * an order no later commit can insert into (docs/decisions/0020-event-stream-resume.md).
     */
    xact_id: xid8('xact_id')
      .notNull()
      .default(sql`pg_current_xact_id()`),
  },
  (t) => [
    uniqueIndex('task_transition_task_version').on(t.task_id, t.to_version),
    /**
     * The tenant stream's read: one tenant's rows in stream order, from a cursor (db/task-events.ts);
     * it replaced the stream's order across all tenants, which nothing else reads.
     */
    index('idx_task_transition_tenant_xact').on(t.tenant_id, t.xact_id, t.transition_id),
  ],
);
export type TaskTransitionRow = typeof taskTransition.$inferSelect;

/** Addition: objects we stored (video, thumbnail). */
export const asset = pgTable(
  'asset',
  {
    asset_id: uuid('asset_id').primaryKey(),
    tenant_id: uuid('tenant_id').notNull(),
    task_id: uuid('task_id')
      .notNull()
      .references(() => generationTask.task_id),
    attempt_id: uuid('attempt_id').notNull(),
    kind: text('kind').notNull(),
    bucket: text('bucket').notNull(),
    region: text('region').notNull(),
    object_key: text('object_key').notNull(),
    sha256: text('sha256').notNull(),
    size_bytes: bigint('size_bytes', { mode: 'number' }).notNull(),
    content_type: text('content_type').notNull(),
    media_info: jsonb('media_info').$type<MediaInfo>(),
    /** Which S3 endpoint holds the object (docs/decisions/0029): the fallback until the asset reconciler copies it back. */
    location: text('location').$type<StorageLocation>().notNull().default('primary'),
    /** The provider URL the bytes came from, without its query (signatures stay out of the database). */
    source_url: text('source_url'),
    /** When the rescue finished downloading, and how long the download took. */
    downloaded_at: ts('downloaded_at'),
    download_ms: integer('download_ms'),
    /** The objects were removed (DELETE /v1/tasks/:id/output or output retention); the row stays as the record. */
    deleted_at: ts('deleted_at'),
    created_at: ts('created_at').notNull().defaultNow(),
  },
  (t) => [
    uniqueIndex('asset_bucket_object_key').on(t.bucket, t.object_key),
    uniqueIndex('asset_task_kind').on(t.task_id, t.kind),
    check('asset_kind_check', sql`${t.kind} IN ('video', 'thumbnail')`),
    check('asset_location_check', sql`${t.location} IN ('primary', 'fallback')`),
    index('idx_asset_fallback')
      .on(t.created_at)
      .where(sql`${t.location} = 'fallback' AND ${t.deleted_at} IS NULL`),
  ],
);

export type StorageLocation = 'primary' | 'fallback';

/**
 * A rescue's resumable download (docs/decisions/0028): the multipart upload it writes and the
 * parts already stored, so a retry continues with a Range request from `bytes_stored`.
 * Removed when the object is published.
 */
export const outputDownload = pgTable('output_download', {
  attempt_id: uuid('attempt_id').primaryKey(),
  task_id: uuid('task_id')
    .notNull()
    .references(() => generationTask.task_id),
  location: text('location').$type<StorageLocation>().notNull(),
  partial_key: text('partial_key').notNull(),
  upload_id: text('upload_id').notNull(),
  parts: jsonb('parts').$type<Array<{ n: number; etag: string; size: number }>>().notNull(),
  bytes_stored: bigint('bytes_stored', { mode: 'number' }).notNull(),
  total_bytes: bigint('total_bytes', { mode: 'number' }),
  /** The source's ETag (or Last-Modified), sent as If-Range so a changed source restarts the download. */
  source_validator: text('source_validator'),
  updated_at: ts('updated_at').notNull().defaultNow(),
});

/** Addition: every operator action (CLI, workflow Update): who, what, when, why. */
export const opsAudit = pgTable(
  'ops_audit',
  {
    audit_id: uuid('audit_id').primaryKey(),
    actor: text('actor').notNull(),
    action: text('action').notNull(),
    target_type: text('target_type').notNull(),
    target_id: text('target_id').notNull(),
    reason: text('reason').notNull(),
    detail: jsonb('detail'),
    created_at: ts('created_at').notNull().defaultNow(),
  },
  (t) => [index('idx_ops_audit_target').on(t.target_type, t.target_id, t.created_at)],
);

/**
 * Addition: one row per region failover, with the fields docs/design.md §7 requires. Written by
 * `ops failover` in the same transaction that bumps the epoch and switches the active region.
 * Append-only like the ledger (docs/decisions/0017-append-only-record.md): the facts learnt
 * later (the first successful write, the reconciliation result) are region_failover_event rows.
 */
export const regionFailover = pgTable(
  'region_failover',
  {
    failover_id: uuid('failover_id').primaryKey(),
    resource_scope: text('resource_scope').notNull(),
    incident_id: text('incident_id').notNull(),
    operator: text('operator').notNull(),
    reason: text('reason').notNull(),
    old_region: text('old_region').notNull(),
    new_region: text('new_region').notNull(),
    old_epoch: bigint('old_epoch', { mode: 'number' }).notNull(),
    new_epoch: bigint('new_epoch', { mode: 'number' }).notNull(),
    /** pg_current_wal_lsn() of the fact source when writes were stopped. */
    replication_position: text('replication_position').notNull(),
    accepted_rpo_seconds: integer('accepted_rpo_seconds').notNull(),
    /** When the runbook began (the operator ran the command). */
    started_at: ts('started_at').notNull(),
    /** When the new region became the active one (the epoch bump committed). */
    traffic_switch_time: ts('traffic_switch_time').notNull(),
  },
  (t) => [uniqueIndex('region_failover_scope_epoch').on(t.resource_scope, t.new_epoch), index('idx_region_failover_incident').on(t.incident_id)],
);

/**
 * Addition: a fact about a failover learnt after its switch, at most one of each kind per
 * failover (the business key): `first_write` carries the first fact written under the new
 * epoch, `reconciliation` the summary of the reconciliation report. Append-only.
 */
export const regionFailoverEvent = pgTable(
  'region_failover_event',
  {
    failover_id: uuid('failover_id')
      .notNull()
      .references(() => regionFailover.failover_id),
    kind: text('kind').$type<FailoverEventKind>().notNull(),
    first_successful_write_time: ts('first_successful_write_time'),
    reconciliation_result: jsonb('reconciliation_result'),
    recorded_at: ts('recorded_at').notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.failover_id, t.kind] }),
    check(
      'region_failover_event_kind_check',
      sql`(${t.kind} = 'first_write' AND ${t.first_successful_write_time} IS NOT NULL AND ${t.reconciliation_result} IS NULL)
        OR (${t.kind} = 'reconciliation' AND ${t.reconciliation_result} IS NOT NULL AND ${t.first_successful_write_time} IS NULL)`,
    ),
  ],
);
export type FailoverEventKind = 'first_write' | 'reconciliation';

/**
 * Addition: per-provider operator controls. `breaker_force` overrides the circuit breaker
 * ('open' stops new submits, 'closed' ignores failures); `max_in_flight` caps the jobs we have
 * at the provider (the bulkhead; default: the adapter's maxConcurrency). The row is also the
 * lock that serialises bulkhead admissions for its provider.
 */
export const providerControl = pgTable(
  'provider_control',
  {
    provider: text('provider').primaryKey(),
    breaker_force: text('breaker_force').$type<'open' | 'closed'>(),
    max_in_flight: integer('max_in_flight'),
    /**
     * Addition (the slot queue, docs/providers.md): the ceiling, fair/FIFO policy and aging step the
     * last claim used, so a transaction that frees a slot elsewhere (a task finishing) grants it
     * under the same rules. Written by claims only when they change.
     */
    queue_limit: integer('queue_limit'),
    queue_policy: text('queue_policy').$type<'fair' | 'fifo'>(),
    queue_aging_ms: integer('queue_aging_ms'),
    /**
     * Addition (create pacing, docs/decisions/0069): the theoretical arrival time of the provider's
     * next create (GCRA, domain/create-pace.ts): every claim that calls the provider moves it one
     * interval on, under this row's lock. Null: no create paced yet.
     */
    create_tat: ts('create_tat'),
    /**
     * Unused since docs/decisions/0069. Kept so that the previous release, which reads and writes
     * it, runs against this schema; a later release drops it.
     */
    create_sent_tat: ts('create_sent_tat'),
    reason: text('reason'),
    updated_by: text('updated_by'),
    updated_at: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [
    check('provider_control_breaker_force_check', sql`${t.breaker_force} IS NULL OR ${t.breaker_force} IN ('open', 'closed')`),
    check('provider_control_max_in_flight_check', sql`${t.max_in_flight} IS NULL OR ${t.max_in_flight} >= 0`),
  ],
);
export type ProviderControlRow = typeof providerControl.$inferSelect;

/**
 * Addition (docs/decisions/0070): a provider model whose account allowance of creates is spent
 * for now (Runway: a 429 on create is the tier's daily generation cap, per model). Until
 * `capped_until` no claim of that model calls the provider: each waits, unsent. Past it one claim
 * (the probe) moves it on by the probe's lease and calls; an accepted create deletes the row, a
 * refused one sets the next reset.
 */
export const providerCreateCap = pgTable(
  'provider_create_cap',
  {
    provider: text('provider').notNull(),
    provider_model: text('provider_model').notNull(),
    capped_until: ts('capped_until').notNull(),
    /** The first refusal of this spell. */
    capped_at: ts('capped_at').notNull(),
    /** Refused creates in this spell (the first and every probe's). */
    refusals: integer('refusals').notNull().default(1),
    last_error: text('last_error'),
  },
  (t) => [primaryKey({ columns: [t.provider, t.provider_model] })],
);
export type ProviderCreateCapRow = typeof providerCreateCap.$inferSelect;

/**
 * Addition: one row per reconciler run (reconcilers/run.ts): what it examined, what it found and
 * how much it changed. The audit of the scheduled reconcilers and the source of `ops reconcile`'s
 * last reports. Runs that changed nothing are pruned by retention after RETENTION_RECONCILE_RUN_DAYS;
 * runs that changed something are kept.
 */
export const reconcileRun = pgTable(
  'reconcile_run',
  {
    run_id: uuid('run_id').primaryKey(),
    reconciler: text('reconciler').notNull(),
    /** 'schedule' (its Temporal Schedule), or operator:<name> for a dry run from the CLI. */
    actor: text('actor').notNull(),
    dry_run: boolean('dry_run').notNull(),
    started_at: ts('started_at').notNull(),
    finished_at: ts('finished_at').notNull(),
    examined: integer('examined').notNull(),
    changed: integer('changed').notNull(),
    findings: jsonb('findings').$type<ReconcileFinding[]>().notNull(),
    /** Findings beyond the stored ones (at most 200 are kept per run). */
    findings_total: integer('findings_total').notNull(),
    error: text('error'),
    /**
     * Addition (paging): where a reconciler that pages (assets) stopped; the next run goes on from
     * the latest run's cursor, null after a full pass (the next starts over).
     */
    cursor: jsonb('cursor').$type<ReconcileCursor>(),
  },
  (t) => [index('idx_reconcile_run_latest').on(t.reconciler, t.started_at)],
);
export type ReconcileRunRow = typeof reconcileRun.$inferSelect;

/**
 * Addition (the slot queue, docs/providers.md "The slot queue"): an attempt waiting for one of its
 * provider's slots, or granted one it has not used yet. A grant counts as a taken slot until the
 * attempt's claim deletes the row in the transaction that moves it to SUBMITTING, so a grant
 * survives worker crashes and workflow resets and is never a second slot.
 */
export const slotWait = pgTable(
  'slot_wait',
  {
    attempt_id: uuid('attempt_id')
      .primaryKey()
      .references(() => taskAttempt.attempt_id),
    task_id: uuid('task_id')
      .notNull()
      .references(() => generationTask.task_id),
    provider: text('provider').notNull(),
    tenant_id: uuid('tenant_id').notNull(),
    priority: integer('priority').notNull(),
    since: ts('since').notNull().defaultNow(),
    /** The tenant's fair-share weight and caps when the row was written (ops tenant limit updates them). */
    weight: integer('weight').notNull().default(1),
    tenant_provider_cap: integer('tenant_provider_cap'),
    tenant_total_cap: integer('tenant_total_cap'),
    granted_at: ts('granted_at'),
    /** Why it waited at its last look (domain/slot-queue.ts WaitReason). */
    reason: text('reason'),
  },
  (t) => [
    index('idx_slot_wait_provider').on(t.provider, t.granted_at),
    /** The waiting lines a grant pass reads (db/slot-queue.ts candidates): a skip scan over (tenant, priority), then the oldest of each. */
    index('idx_slot_wait_lines')
      .on(t.provider, t.tenant_id, t.priority, t.since, t.attempt_id)
      .where(sql`${t.granted_at} IS NULL`),
    index('idx_slot_wait_task').on(t.task_id),
    check('slot_wait_priority_check', sql`${t.priority} BETWEEN 0 AND 9`),
    check('slot_wait_weight_check', sql`${t.weight} >= 1`),
  ],
);

/**
 * Addition: a tenant's in-flight caps and fair-share weight, per provider or for every provider
 * (`provider = '*'`). Set with `ops tenant limit` (audited); absent rows fall back to config.
 */
export const tenantCapacity = pgTable(
  'tenant_capacity',
  {
    tenant_id: uuid('tenant_id')
      .notNull()
      .references(() => tenant.tenant_id),
    provider: text('provider').notNull(),
    max_in_flight: integer('max_in_flight'),
    weight: integer('weight'),
    reason: text('reason'),
    updated_by: text('updated_by'),
    updated_at: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenant_id, t.provider] }),
    check('tenant_capacity_max_in_flight_check', sql`${t.max_in_flight} IS NULL OR ${t.max_in_flight} >= 0`),
    check('tenant_capacity_weight_check', sql`${t.weight} IS NULL OR ${t.weight} >= 1`),
  ],
);
export type SlotWaitRow = typeof slotWait.$inferSelect;
export type TenantCapacityRow = typeof tenantCapacity.$inferSelect;

// ---- Tenant webhooks (docs/webhooks.md, docs/decisions/0018) ----

/** The events a tenant can subscribe to; the order is the documentation's. */
export const WEBHOOK_EVENT_TYPES = [
  'task.succeeded',
  'task.failed',
  'task.cancelled',
  'task.needs_attention',
  'task.output_at_risk',
  'task.thumbnail_ready',
  'tenant.budget_threshold',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];
export const WEBHOOK_DELIVERY_STATES = ['pending', 'succeeded', 'failed', 'cancelled'] as const;
export type WebhookDeliveryState = (typeof WEBHOOK_DELIVERY_STATES)[number];

/** Addition: a tenant's webhook endpoint. Deleted endpoints keep their row (the delivery log refers to them). */
export const webhookEndpoint = pgTable(
  'webhook_endpoint',
  {
    endpoint_id: uuid('endpoint_id').primaryKey(),
    tenant_id: uuid('tenant_id')
      .notNull()
      .references(() => tenant.tenant_id),
    url: text('url').notNull(),
    description: text('description'),
    /** Subscribed event types; null = every type. */
    events: text('events').array().$type<WebhookEventType[]>(),
    enabled: boolean('enabled').notNull().default(true),
    created_at: ts('created_at').notNull().defaultNow(),
    updated_at: ts('updated_at').notNull().defaultNow(),
    deleted_at: ts('deleted_at'),
    /** The first failed attempt since the last success; cleared by a success. */
    failing_since: ts('failing_since'),
    disabled_at: ts('disabled_at'),
    disabled_reason: text('disabled_reason'),
  },
  (t) => [
    index('idx_webhook_endpoint_tenant')
      .on(t.tenant_id, t.created_at)
      .where(sql`${t.deleted_at} IS NULL`),
  ],
);

/**
 * Addition: an endpoint's signing secrets, sealed (AES-256-GCM under WEBHOOK_SECRET_KEY). Every
 * row whose expires_at is null or in the future signs; rotate-secret adds one and gives the
 * others an expiry (the overlap).
 */
export const webhookEndpointSecret = pgTable(
  'webhook_endpoint_secret',
  {
    secret_id: uuid('secret_id').primaryKey(),
    endpoint_id: uuid('endpoint_id')
      .notNull()
      .references(() => webhookEndpoint.endpoint_id),
    sealed: text('sealed').notNull(),
    created_at: ts('created_at').notNull().defaultNow(),
    expires_at: ts('expires_at'),
  },
  (t) => [index('idx_webhook_secret_endpoint').on(t.endpoint_id)],
);

/**
 * Addition: one row per task transition that tenants hear about, written by the trigger
 * `task_transition_webhook_event` in the transaction of the transition itself (no event without
 * its transition, no transition without its event), and one `task.thumbnail_ready` per task,
 * written by the trigger `asset_thumbnail_webhook_event` with its thumbnail's row (migration
 * 0016). `data` is the payload's data, frozen then.
 */
export const webhookEvent = pgTable(
  'webhook_event',
  {
    event_id: uuid('event_id').primaryKey(),
    tenant_id: uuid('tenant_id').notNull(),
    /** Null for a tenant's own event (tenant.budget_threshold, db/budgets.ts), which has no task. */
    task_id: uuid('task_id').references(() => generationTask.task_id),
    event_type: text('event_type').$type<WebhookEventType>().notNull(),
    status: text('status'),
    status_version: bigint('status_version', { mode: 'number' }),
    data: jsonb('data').$type<Record<string, unknown>>().notNull(),
    created_at: ts('created_at').notNull().defaultNow(),
  },
  (t) => [
    // One event per type and version: task.thumbnail_ready comes at the version of its task.succeeded.
    uniqueIndex('webhook_event_task_version').on(t.task_id, t.status_version, t.event_type),
    check('webhook_event_type_check', sql`${t.event_type} IN (${inList(WEBHOOK_EVENT_TYPES)})`),
  ],
);

/**
 * Addition: one event to one target (an endpoint, or the task's own webhook_url), fanned out by
 * the same trigger. The relay claims due rows (workers/webhook-relay.ts); `target_key` is what
 * the per-endpoint concurrency cap counts by.
 */
export const webhookDelivery = pgTable(
  'webhook_delivery',
  {
    delivery_id: uuid('delivery_id').primaryKey(),
    event_id: uuid('event_id')
      .notNull()
      .references(() => webhookEvent.event_id),
    tenant_id: uuid('tenant_id').notNull(),
    /** Null for a task's own webhook_url. */
    endpoint_id: uuid('endpoint_id').references(() => webhookEndpoint.endpoint_id),
    /** The task's webhook_url (endpoint deliveries go to the endpoint's current URL). */
    url: text('url'),
    /** 'endpoint:<id>' or 'task-url:<tenant id>:<origin>' (the per-target cap counts by it). */
    target_key: text('target_key').notNull(),
    state: text('state').$type<WebhookDeliveryState>().notNull().default('pending'),
    /** Attempts made (the next attempt's number is this + 1). */
    attempt_count: integer('attempt_count').notNull().default(0),
    /** Position in the retry schedule; a manual redeliver starts it again. */
    schedule_step: integer('schedule_step').notNull().default(0),
    next_attempt_at: ts('next_attempt_at').notNull().defaultNow(),
    /** A relay is sending it until then (a crashed relay's claim expires). */
    lease_until: ts('lease_until'),
    last_error: text('last_error'),
    created_at: ts('created_at').notNull().defaultNow(),
    delivered_at: ts('delivered_at'),
  },
  (t) => [
    index('idx_webhook_delivery_due')
      .on(t.next_attempt_at)
      .where(sql`${t.state} = 'pending'`),
    /**
     * The relay's claim (db/webhooks.ts claimDueDeliveries): the tenants with pending deliveries
     * (a skip scan on the first column), each tenant's targets (on the second), and a target's
     * oldest due deliveries, each found in a few index probes however large the backlog.
     */
    index('idx_webhook_delivery_tenant_target_due')
      .on(t.tenant_id, t.target_key, t.next_attempt_at)
      .where(sql`${t.state} = 'pending'`),
    /** What a tenant has in flight (its leases): the per-tenant and per-target caps count these rows only. */
    index('idx_webhook_delivery_tenant_leased')
      .on(t.tenant_id, t.lease_until)
      .where(sql`${t.state} = 'pending' AND ${t.lease_until} IS NOT NULL`),
    index('idx_webhook_delivery_endpoint').on(t.endpoint_id, t.created_at),
    index('idx_webhook_delivery_event').on(t.event_id),
    check('webhook_delivery_state_check', sql`${t.state} IN (${inList(WEBHOOK_DELIVERY_STATES)})`),
  ],
);

/**
 * Addition (issue #49): a delivery target whose attempts time out backs off as a whole: after
 * a timed-out attempt the relay claims nothing for it until `blocked_until` (doubling with each
 * timeout in a row), so a receiver that accepts and never answers does not get its slots
 * refilled at once. A row exists only for targets that have timed out; an answered attempt
 * clears it.
 */
export const webhookTarget = pgTable('webhook_target', {
  /** A webhook_delivery.target_key. */
  target_key: text('target_key').primaryKey(),
  tenant_id: uuid('tenant_id').notNull(),
  /** Attempts in a row that timed out. */
  timeouts: integer('timeouts').notNull().default(0),
  blocked_until: ts('blocked_until').notNull(),
  updated_at: ts('updated_at').notNull().defaultNow(),
});

/** Addition: every delivery attempt: what was answered, how long it took, what went wrong. */
export const webhookAttempt = pgTable(
  'webhook_attempt',
  {
    attempt_id: bigserial('attempt_id', { mode: 'number' }).primaryKey(),
    delivery_id: uuid('delivery_id')
      .notNull()
      .references(() => webhookDelivery.delivery_id),
    attempt_no: integer('attempt_no').notNull(),
    url: text('url').notNull(),
    started_at: ts('started_at').notNull(),
    latency_ms: integer('latency_ms').notNull(),
    succeeded: boolean('succeeded').notNull(),
    response_status: integer('response_status'),
    /** The first bytes of the receiver's answer (WEBHOOK_RESPONSE_MAX_BYTES read, 512 kept). */
    response_excerpt: text('response_excerpt'),
    error: text('error'),
  },
  (t) => [uniqueIndex('webhook_attempt_delivery_no').on(t.delivery_id, t.attempt_no)],
);

/** Addition: something a tenant must act on (an endpoint disabled after days of failure). */
export const tenantAttention = pgTable(
  'tenant_attention',
  {
    attention_id: uuid('attention_id').primaryKey(),
    tenant_id: uuid('tenant_id')
      .notNull()
      .references(() => tenant.tenant_id),
    kind: text('kind').notNull(),
    subject_id: text('subject_id').notNull(),
    detail: jsonb('detail').$type<Record<string, unknown>>(),
    created_at: ts('created_at').notNull().defaultNow(),
    resolved_at: ts('resolved_at'),
  },
  (t) => [
    index('idx_tenant_attention_open')
      .on(t.tenant_id, t.created_at)
      .where(sql`${t.resolved_at} IS NULL`),
  ],
);

/** One change of a catalog input the schema diff names (domain/schema-diff.ts). */
export interface CatalogSchemaChange {
  readonly path: string;
  readonly kind: string;
  readonly detail: string;
}

/**
 * Addition (docs/decisions/0072): each provider model's published input schema as `ops catalog
 * sync --apply` recorded it, append-only: the latest row per (provider, model) is the stored copy
 * the next sync compares against, and what changed and who applied it.
 */
export const catalogSchemaRevision = pgTable(
  'catalog_schema_revision',
  {
    revision_id: uuid('revision_id').primaryKey(),
    provider: text('provider').notNull(),
    model: text('model').notNull(),
    /** The provider's own revision (Replicate's version id); null where it names none (fal). */
    provider_version: text('provider_version'),
    /** sha256 of the schema's canonical JSON. */
    digest: text('digest').notNull(),
    input_schema: jsonb('input_schema').$type<Record<string, unknown>>().notNull(),
    source_url: text('source_url').notNull(),
    changes: jsonb('changes').$type<readonly CatalogSchemaChange[]>().notNull(),
    /** What the catalog sends no longer fits (the route was held). */
    breaking: boolean('breaking').notNull(),
    recorded_by: text('recorded_by').notNull(),
    recorded_at: ts('recorded_at').notNull().defaultNow(),
  },
  (t) => [index('idx_catalog_schema_revision_model').on(t.provider, t.model, t.recorded_at)],
);

/**
 * Addition (docs/decisions/0072): a catalog route held off after its model's published schema
 * changed in a way that breaks what the catalog sends. While a row exists, admission and the
 * router do not choose the route; `ops catalog enable` deletes it (audited).
 */
export const catalogRouteHold = pgTable(
  'catalog_route_hold',
  {
    provider: text('provider').notNull(),
    model: text('model').notNull(),
    revision_id: uuid('revision_id')
      .notNull()
      .references(() => catalogSchemaRevision.revision_id),
    reason: text('reason').notNull(),
    held_by: text('held_by').notNull(),
    held_at: ts('held_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.provider, t.model] })],
);
/**
 * Addition (issue #52): a POST /v1/tasks/batch under its own Idempotency-Key. The items' results
 * are task_batch_item rows, written in the same transaction as the chunk of tasks they answer
 * (docs/decisions/0076-task-batches.md).
 */
export const taskBatch = pgTable(
  'task_batch',
  {
    batch_id: uuid('batch_id').primaryKey(),
    tenant_id: uuid('tenant_id')
      .notNull()
      .references(() => tenant.tenant_id),
    idempotency_key: text('idempotency_key').notNull(),
    /** sha256 of the canonical request body; same key + other hash → 422. */
    request_hash: text('request_hash').notNull(),
    item_count: integer('item_count').notNull(),
    created_at: ts('created_at').notNull().defaultNow(),
  },
  (t) => [uniqueIndex('task_batch_tenant_idempotency_key').on(t.tenant_id, t.idempotency_key)],
);

/** Addition (issue #52): the final result of one item of a batch (a task accepted, or the problem that refused it). */
export const taskBatchItem = pgTable(
  'task_batch_item',
  {
    batch_id: uuid('batch_id')
      .notNull()
      .references(() => taskBatch.batch_id),
    item_no: integer('item_no').notNull(),
    result: jsonb('result').$type<Record<string, unknown>>().notNull(),
  },
  (t) => [primaryKey({ columns: [t.batch_id, t.item_no] })],
);

/** Addition (issue #52): a browser token revoked before its expiry (docs/decisions/0077-browser-tokens.md). */
export const browserTokenRevocation = pgTable('browser_token_revocation', {
  token_id: uuid('token_id').primaryKey(),
  tenant_id: uuid('tenant_id')
    .notNull()
    .references(() => tenant.tenant_id),
  revoked_at: ts('revoked_at').notNull().defaultNow(),
  /** The token's own expiry: past it the row may be deleted. */
  expires_at: ts('expires_at').notNull(),
});

/**
 * Addition (issue #52): a price answered by `POST /v1/quotes`, which a create may cite
 * (`quote_id`) until `expires_at`: the create then reserves at most `amount`. Only the quote is
 * written; `request_hash` is the quoted body's (api/tasks.service.ts requestHash without
 * `quote_id`), so a create citing it must order the same thing.
 */
export const taskQuote = pgTable(
  'task_quote',
  {
    quote_id: uuid('quote_id').primaryKey(),
    tenant_id: uuid('tenant_id')
      .notNull()
      .references(() => tenant.tenant_id),
    request_hash: text('request_hash').notNull(),
    model: text('model').notNull(),
    amount: money('amount').notNull(),
    created_at: ts('created_at').notNull().defaultNow(),
    expires_at: ts('expires_at').notNull(),
  },
  (t) => [index('idx_task_quote_expires').on(t.expires_at), check('task_quote_amount_nonneg', sql`${t.amount} >= 0`)],
);
export type TaskQuoteRow = typeof taskQuote.$inferSelect;

export const BUDGET_PERIODS = ['day', 'week', 'month'] as const;
export type BudgetPeriod = (typeof BUDGET_PERIODS)[number];

/**
 * Addition (issue #52): a spend limit per calendar period (UTC) of a tenant (key_id null) or of
 * one of its API keys, set by `ops tenant budget` / `ops key budget` (audited). `limit_amount`
 * null: lifted. A create locks the rows that apply to it (db/budgets.ts holdBudgets).
 */
export const spendBudget = pgTable(
  'spend_budget',
  {
    budget_id: uuid('budget_id').primaryKey(),
    tenant_id: uuid('tenant_id')
      .notNull()
      .references(() => tenant.tenant_id),
    key_id: uuid('key_id').references(() => apiKey.key_id),
    limit_amount: money('limit_amount'),
    period: text('period').$type<BudgetPeriod>().notNull().default('month'),
    /** Percentages of the limit whose crossing emits tenant.budget_threshold, once per period each. */
    thresholds: integer('thresholds').array().$type<number[]>().notNull(),
    reason: text('reason'),
    updated_by: text('updated_by'),
    created_at: ts('created_at').notNull().defaultNow(),
    updated_at: ts('updated_at').notNull().defaultNow(),
  },
  (t) => [
    uniqueIndex('spend_budget_tenant')
      .on(t.tenant_id)
      .where(sql`${t.key_id} IS NULL`),
    uniqueIndex('spend_budget_key')
      .on(t.key_id)
      .where(sql`${t.key_id} IS NOT NULL`),
    check('spend_budget_period_check', sql`${t.period} IN (${inList(BUDGET_PERIODS)})`),
    check('spend_budget_limit_nonneg', sql`${t.limit_amount} IS NULL OR ${t.limit_amount} >= 0`),
  ],
);
export type SpendBudgetRow = typeof spendBudget.$inferSelect;

/** Addition (issue #52): a threshold of a budget crossed in a period; its key makes the event once per period. */
export const budgetThresholdCrossing = pgTable(
  'budget_threshold_crossing',
  {
    budget_id: uuid('budget_id')
      .notNull()
      .references(() => spendBudget.budget_id),
    period_start: ts('period_start').notNull(),
    threshold: integer('threshold').notNull(),
    /** Spent in the period with the create that crossed it. */
    spent: money('spent').notNull(),
    event_id: uuid('event_id').notNull(),
    crossed_at: ts('crossed_at').notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.budget_id, t.period_start, t.threshold] })],
);
