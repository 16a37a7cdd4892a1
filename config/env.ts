// The one place that reads process.env. Every process (API, worker, simulator, CLI, tests)
// calls loadConfig() once and passes the result down; nothing else touches the environment.
// Credentials and third-party URLs are declared with config/profile.ts's helpers: their dev
// values serve development and tests only, and the production profile refuses them.
import ipaddr from 'ipaddr.js';
import { z } from 'zod';
import { pollQueueRate, QUOTA_WINDOW_S } from '../domain/poll-quota';
import { devDefault, outputHosts, productionProblems, profileOf, publicUrl, refusedInProduction, secret, unsafeInProduction, withDevValues } from './profile';

const bool = z.enum(['true', 'false', '1', '0', 'yes', 'no']).transform((v) => v === 'true' || v === '1' || v === 'yes');

const csvItems = (v: string): string[] =>
  v
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
const csv = z.string().transform(csvItems);
const DEV_WEBHOOK_SECRET_KEY = 'dev-webhook-secret-key-not-for-production';
const DEV_CALLBACK_TOKEN_SECRET = 'dev-callback-token-secret-not-for-production';

const port = z.coerce.number().int().min(0).max(65535);
const ms = z.coerce.number().int().min(0);
const hosts = (list: string[]) => outputHosts(csv.default(list), list);

export const envSchema = z.object({
  NODE_ENV: z.enum(['development', 'test', 'production']).default('development'),
  /** The deployment profile; production (here or in NODE_ENV) refuses dev values (README "Deploying"). */
  VIDORCH_ENV: z.enum(['development', 'test', 'production']).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Human-readable logs (pino-pretty) instead of JSON lines. */
  LOG_PRETTY: bool.default(false),

  // ---- Traces (docs/observability.md): off unless an endpoint is set ----
  /** OTLP/HTTP base URL of a collector (e.g. http://otel-collector:4318; `/v1/traces` is appended). Unset: no tracing. */
  OTEL_EXPORTER_OTLP_ENDPOINT: z.url({ protocol: /^https?$/ }).optional(),
  /** Headers of every export, `name=value` comma-separated (OTel's format; values may be percent-encoded): a collector's auth. */
  OTEL_EXPORTER_OTLP_HEADERS: z
    .string()
    .regex(/^\s*[^=,\s]+\s*=[^,]*(?:,\s*[^=,\s]+\s*=[^,]*)*$/, 'expected name=value pairs separated by commas')
    .optional(),
  /** Share of new traces kept, 0–1 (a kept parent keeps its children). */
  OTEL_TRACES_SAMPLE_RATIO: z.coerce.number().min(0).max(1).default(1),

  PORT: port.default(3000),
  /** Base URL the outside world uses to reach this API; callback URLs handed to providers start with it. */
  PUBLIC_BASE_URL: publicUrl('http://127.0.0.1:3000'),
  /** Slow-client guards of the API's HTTP server: all headers within, the whole request within, idle keep-alive. */
  API_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(100).default(10_000),
  API_REQUEST_TIMEOUT_MS: z.coerce.number().int().min(100).default(30_000),
  API_KEEP_ALIVE_TIMEOUT_MS: z.coerce.number().int().min(100).default(65_000),
  /**
   * The operator listener (API: OPS_PORT; worker: WORKER_METRICS_PORT): /metrics and the detailed
   * /readyz. Loopback unless set; a bearer token, when set, is required of every request (and in
   * production whenever the host is not loopback).
   */
  OPS_LISTEN_HOST: z.string().min(1).default('127.0.0.1'),
  OPS_PORT: port.default(9463),
  OPS_BEARER_TOKEN: z.string().min(16).optional(),
  /** How often each process recomputes its fact gauges (one bounded pass on its own connection). */
  METRICS_FACTS_INTERVAL_MS: z.coerce.number().int().min(100).default(15_000),
  /** How long a create may wait for the workflow start before leaving it to the outbox relay. */
  API_FAST_PATH_TIMEOUT_MS: ms.default(1_000),
  /** After a failed fast-path start, skip the fast path this long (Temporal is likely down). */
  API_FAST_PATH_COOLDOWN_MS: ms.default(5_000),
  /** Whether the 202 waits for the workflow start ('await') or answers once the task is committed ('background'); docs/decisions/0008. */
  API_FAST_PATH_MODE: z.enum(['await', 'background']).default('await'),
  /** Background starts in flight at once per API process; beyond it the outbox relay starts the workflow. */
  API_FAST_PATH_MAX_IN_FLIGHT: z.coerce.number().int().min(1).max(10_000).default(64),
  /** Task creations per tenant per second (shared through Redis). */
  TENANT_CREATE_RATE_PER_SECOND: z.coerce.number().int().min(1).default(50),
  /** Reads (GET a task, the list) and cancels per tenant per second. */
  TENANT_READ_RATE_PER_SECOND: z.coerce.number().int().min(1).default(100),
  TENANT_CANCEL_RATE_PER_SECOND: z.coerce.number().int().min(1).default(10),
  /** Redis for shared rate limits; empty disables it (local limits only). */
  REDIS_URL: z.string().default('redis://127.0.0.1:6379'),
  /** API processes sharing the limit: when Redis is down each allows rate / this. */
  API_INSTANCES: z.coerce.number().int().min(1).default(1),
  /** Largest accepted JSON body for task creation and callbacks. */
  API_BODY_LIMIT: z.string().default('256kb'),
  /** Live events (docs/events.md): a comment line on every open stream this often, so proxies keep it open. */
  EVENTS_HEARTBEAT_MS: z.coerce.number().int().min(100).default(15_000),
  /** At most one provider progress event per task this often (per API process). */
  EVENTS_PROGRESS_INTERVAL_MS: ms.default(2_000),
  /** Open event streams per tenant per API process; one more answers 429. */
  EVENTS_MAX_STREAMS_PER_TENANT: z.coerce.number().int().min(1).default(20),
  /** Open event streams per API process; one more answers 503. */
  EVENTS_MAX_STREAMS: z.coerce.number().int().min(1).default(2_000),
  /** Every open stream re-reads its transitions this often besides the NOTIFY wake-ups (a safety net). */
  EVENTS_RESYNC_MS: z.coerce.number().int().min(100).default(10_000),
  /** The reconnection time every stream tells its client at the start (SSE `retry`), after a drop or an API restart. */
  EVENTS_RETRY_MS: z.coerce.number().int().min(100).default(3_000),
  /** In DEGRADED_NOTIFY and below: how long streams tell clients to wait before polling or reconnecting. */
  EVENTS_POLL_AFTER_MS: z.coerce.number().int().min(100).default(5_000),

  DATABASE_URL: secret(z.string().min(1), 'postgres://postgres@127.0.0.1:5432/vidorch'),
  DATABASE_POOL_MAX: z.coerce.number().int().min(1).max(200).default(10),
  /**
   * Standbys that may be promoted (host:port, in order): the pool tries DATABASE_URL's host, then
   * these, and keeps only a read-write server (libpq's target_session_attrs=read-write;
   * docs/decisions/0030, docs/runbooks/pg-switchover.md). Empty: DATABASE_URL's host only.
   */
  DATABASE_FAILOVER_HOSTS: csv.pipe(z.array(z.string().regex(/^[^\s,]+:\d{1,5}$/, 'entries are host:port, e.g. db-2.internal:5432'))).default([]),

  /** The region this process runs in; every fact write checks it against region_write_fence. */
  REGION: z.string().min(1).default('region-a'),
  FENCE_SCOPE: z.string().min(1).default('global'),

  TEMPORAL_ADDRESS: z.string().min(1).default('127.0.0.1:7233'),
  TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
  TEMPORAL_UI_URL: z.url().default('http://127.0.0.1:8233'),
  /** The base of every queue name (and so of visibility queries: letters, digits, `.`, `_`, `-` only). */
  TEMPORAL_TASK_QUEUE: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,200}$/, 'letters, digits, ".", "_" and "-" only (it is spliced into visibility queries)')
    .default('generation'),

  /** May be private (a store inside the network), but production names it. */
  S3_ENDPOINT: devDefault(z.url(), 'http://127.0.0.1:7070'),
  S3_REGION: z.string().min(1).default('us-east-1'),
  S3_ACCESS_KEY_ID: secret(z.string().min(1), 'vidorch-dev'),
  S3_SECRET_ACCESS_KEY: secret(z.string().min(1), 'vidorch-dev-secret'),
  S3_BUCKET_OUTPUTS: z.string().min(3).default('vidorch-outputs'),
  S3_FORCE_PATH_STYLE: bool.default(true),
  /**
   * The second S3 endpoint a rescue writes to while the primary is unreachable
   * (docs/decisions/0029); '' turns the fallback off. Dev and tests run a second versitygw.
   */
  S3_FALLBACK_ENDPOINT: devDefault(z.union([z.url(), z.literal('')]), 'http://127.0.0.1:7071'),
  S3_FALLBACK_REGION: z.string().min(1).default('us-east-1'),
  S3_FALLBACK_ACCESS_KEY_ID: secret(z.string().min(1), 'vidorch-dev'),
  S3_FALLBACK_SECRET_ACCESS_KEY: secret(z.string().min(1), 'vidorch-dev-secret'),
  S3_FALLBACK_BUCKET: z.string().min(3).default('vidorch-outputs-fallback'),
  /** Lifetime of presigned download URLs returned by GET /v1/tasks/:id. */
  S3_PRESIGN_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .max(7 * 24 * 3600)
    .default(3600),

  /** Provider APIs, credentials and webhook keys: dev values are the simulator's (`npm run simulator`). */
  PROVIDER_REPLICATE_BASE_URL: publicUrl('http://127.0.0.1:7081/replicate'),
  PROVIDER_REPLICATE_API_TOKEN: secret(z.string().min(1), 'r8_dev_simulator_token'),
  /** Standard Webhooks secret ("whsec_" + base64). */
  PROVIDER_REPLICATE_WEBHOOK_SECRET: secret(
    z.string().regex(/^whsec_[A-Za-z0-9+/=]+$/, 'must be "whsec_" followed by base64'),
    'whsec_ZGV2LXNpbXVsYXRvci13ZWJob29rLXNlY3JldC0zMmI=',
  ),
  /** Hosts the worker may download provider outputs from (exact host names; dev and tests add 127.0.0.1 and localhost). */
  PROVIDER_REPLICATE_OUTPUT_HOSTS: hosts(['replicate.delivery']),
  /** fal queue API. */
  PROVIDER_FAL_BASE_URL: publicUrl('http://127.0.0.1:7081/fal'),
  PROVIDER_FAL_API_KEY: secret(z.string().min(1), 'sim-fal-key-id:sim-fal-key-secret'),
  PROVIDER_FAL_JWKS_URL: publicUrl('http://127.0.0.1:7081/fal/.well-known/jwks.json'),
  PROVIDER_FAL_OUTPUT_HOSTS: hosts(['v3.fal.media', 'fal.media']),
  /** Runway tasks API (poll only). */
  PROVIDER_RUNWAY_BASE_URL: publicUrl('http://127.0.0.1:7081/runway'),
  PROVIDER_RUNWAY_API_SECRET: secret(z.string().min(1), 'sim-runway-secret-0123456789'),
  PROVIDER_RUNWAY_OUTPUT_HOSTS: hosts(['dnznrvs05pmza.cloudfront.net']),
  /** Kling API (JWT from an access key and a secret key). */
  PROVIDER_KLING_BASE_URL: publicUrl('http://127.0.0.1:7081/kling'),
  PROVIDER_KLING_ACCESS_KEY: secret(z.string().min(1), 'sim-kling-access-key'),
  PROVIDER_KLING_SECRET_KEY: secret(z.string().min(1), 'sim-kling-secret-key-0123456789'),
  PROVIDER_KLING_OUTPUT_HOSTS: hosts(['cdn.klingai.com']),
  /** Timeout of one provider HTTP call (submit, status, cancel). */
  PROVIDER_HTTP_TIMEOUT_MS: ms.default(10_000),
  /** Bulkhead ramp after a rebuild (worker start, a breaker closing): the in-flight ceiling grows from START_SHARE of the limit (at least MIN_SLOTS) to all of it over RAMP_MS (0: no ramp). */
  BULKHEAD_RAMP_MS: ms.default(60_000),
  BULKHEAD_RAMP_START_SHARE: z.coerce.number().min(0).max(1).default(0.2),
  BULKHEAD_RAMP_MIN_SLOTS: z.coerce.number().int().min(1).default(2),
  /** DEGRADED_PROVIDER mode: a provider's breaker trips at this failure rate and sends no probes (docs/modes.md). */
  DEGRADED_PROVIDER_FAILURE_RATE: z.coerce.number().gt(0).max(1).default(0.2),
  /** The slot queue's order (docs/providers.md "The slot queue"): fair (priority, then weighted share per tenant, then age) or fifo (oldest first). */
  SLOT_QUEUE_POLICY: z.enum(['fair', 'fifo']).default('fair'),
  /** A waiting attempt's priority rises by one per this long waited (0: no aging); priority 0 reaches the top after 9×. */
  SLOT_QUEUE_AGING_MS: ms.default(60_000),
  /** A waiting workflow re-checks its place after this long if no grant woke it (a lost wake). */
  SLOT_WAIT_FALLBACK_MS: z.coerce.number().int().min(1_000).default(60_000),
  /** A grant its workflow has not used by then goes back to the queue (a terminated workflow). */
  SLOT_GRANT_TTL_MS: z.coerce.number().int().min(1_000).default(300_000),
  /** Default in-flight cap per tenant per provider, and over all providers (unset: none); `ops tenant limit` overrides. */
  TENANT_MAX_IN_FLIGHT_PER_PROVIDER: z.coerce.number().int().min(0).optional(),
  TENANT_MAX_IN_FLIGHT: z.coerce.number().int().min(0).optional(),
  /** A tenant's default fair-share weight in the slot queue; `ops tenant limit --weight` overrides. */
  TENANT_SLOT_WEIGHT: z.coerce.number().int().min(1).default(1),
  /** Pass the task's priority and tenant to Temporal as task-queue priority and fairness keys (docs/decisions/0025). */
  TEMPORAL_TASK_PRIORITY: bool.default(true),

  /** Allow http:// and loopback/private output URLs. Only for the local simulator; never in production. */
  OUTPUT_FETCH_ALLOW_PRIVATE: refusedInProduction(
    bool.default(false),
    ['true', '1', 'yes'],
    'true is refused in production (it allows loopback and private output URLs)',
  ),
  OUTPUT_MAX_BYTES: z.coerce
    .number()
    .int()
    .min(1)
    .default(2 * 1024 * 1024 * 1024),
  /** Part size of an output download: what a resumed download keeps (S3 refuses parts under 5 MiB but the last). */
  OUTPUT_PART_BYTES: z.coerce
    .number()
    .int()
    .min(5 * 1024 * 1024)
    .max(512 * 1024 * 1024)
    .default(8 * 1024 * 1024),
  /** Days an output is kept after its task ends, unless the tenant sets its own (tenant.output_retention_days); 0 keeps forever. */
  OUTPUT_RETENTION_DAYS: z.coerce.number().int().min(0).default(30),
  /** A rescue that fails this close to the provider output URL's expiry marks the task OUTPUT_AT_RISK (operators are alerted). */
  OUTPUT_AT_RISK_MARGIN_MS: ms.default(15 * 60 * 1000),

  /** Poll fallback: first poll after submit, growth cap, and the slower pace while callbacks are healthy. */
  POLL_INITIAL_MS: ms.default(5_000),
  POLL_MAX_MS: ms.default(60_000),
  /** While a provider's callbacks are healthy (one arrived within the window), polls waiting on its jobs are this many times slower. */
  POLL_HEALTHY_FACTOR: z.coerce.number().min(1).max(100).default(3),
  CALLBACK_HEALTHY_WINDOW_MS: ms.default(5 * 60 * 1000),
  /**
   * A provider's query quota for this account, requests per second, over the adapter's declared
   * one (capabilities.requestsPerSecond): "replicate=5,kling=2". Its poll queue's rate is set
   * below it by what Temporal's bursts can add (domain/poll-quota.ts).
   */
  POLL_QUEUE_RATES: csv
    .pipe(
      z
        .array(z.string().regex(/^[a-z0-9-]+=\d+(\.\d+)?$/, 'entries are provider=requests per second, e.g. replicate=5'))
        .refine((entries) => entries.every((e) => Number(e.split('=')[1]) > 0), 'rates must be above 0'),
    )
    .default([]),
  /**
   * When more jobs wait on a provider than its poll rate can visit within their intervals, each
   * next poll is put waiting / (rate × share) away (activities/poll-demand.ts): the wait loops
   * wake about as often as the provider can be asked, at this share of the rate.
   */
  POLL_QUOTA_SHARE: z.coerce.number().gt(0).max(1).default(0.8),
  /**
   * The Temporal server's partitions per task queue (matching.numTaskqueueReadPartitions and
   * WritePartitions; 4 is its default): each partition's limiter has its own burst, which the
   * poll queues' rates leave room for (domain/poll-quota.ts).
   */
  // At most 48: the adapters' smallest declared quota (5/s) is held on up to 49 (domain/poll-quota.ts).
  POLL_QUEUE_PARTITIONS: z.coerce.number().int().min(1).max(48).default(4),

  /** The router's scoring budget per decision; over it, the static route is used (and counted). */
  ROUTER_BUDGET_MS: z.coerce.number().min(0.1).max(1_000).default(5),
  /** The deterministic fallback route: lowest priority first, or a stable hash of the task id. */
  ROUTER_STATIC_ROUTE: z.enum(['priority', 'hash']).default('priority'),

  /** A task's deadline when its request names none (deadline_seconds): no provider call starts after it. */
  TASK_DEADLINE_SECONDS: z.coerce
    .number()
    .int()
    .min(10)
    .max(7 * 86_400)
    .default(3_600),

  /** Submit attempts per task before it fails (proven rejections only; a throttle counts against MAX_THROTTLED_SUBMITS instead). */
  MAX_SUBMIT_ATTEMPTS: z.coerce.number().int().min(1).max(10).default(3),
  /**
   * Creates a provider throttled (HTTP 429) before the task fails: a throttle is a wait for the
   * provider's reset, not a rejection of the request (docs/decisions/0057). The task's deadline
   * bounds them too.
   */
  MAX_THROTTLED_SUBMITS: z.coerce.number().int().min(0).max(1_000).default(20),
  /**
   * A provider's create quota for this account, creates per second, over the adapter's documented
   * one (capabilities.createsPerSecond; Replicate: 600 a minute): "replicate=20,kling=1". Every
   * worker's submits of that provider share one pace at 0.9 of it (domain/create-pace.ts); a
   * provider with neither figure is not paced.
   */
  PROVIDER_CREATE_QUOTAS: csv
    .pipe(
      z
        .array(z.string().regex(/^[a-z0-9-]+=\d+(\.\d+)?$/, 'entries are provider=creates per second, e.g. replicate=10'))
        .refine((entries) => entries.every((e) => Number(e.split('=')[1]) > 0), 'quotas must be above 0'),
    )
    .default([]),
  /**
   * A reconciliation lookup that misses proves the job was never created only once the provider
   * has had this long since our submit began (its own processing of a slow request).
   */
  UNKNOWN_PROOF_DELAY_MS: ms.default(2 * 60 * 1000),
  /** An unknown submit outcome that reconciliation has not resolved by then goes to MANUAL_REVIEW. */
  UNKNOWN_OUTCOME_DEADLINE_MS: ms.default(30 * 60 * 1000),
  /**
   * One reconciliation lookup (a Replicate list walk of up to 20 pages) gives up after this, well
   * inside the poll activity's 5-minute timeout, so the poll still answers (and the deadline runs).
   */
  RECONCILE_LOOKUP_BUDGET_MS: z.coerce.number().int().min(100).max(240_000).default(60_000),
  /**
   * Consecutive reads of a known job (status, cancel) answered 404/410 or another lasting 4xx
   * before the task goes to MANUAL_REVIEW with the evidence (docs/decisions/0012).
   */
  PROVIDER_READ_FAILURE_LIMIT: z.coerce.number().int().min(1).max(1_000).default(5),
  /**
   * A provider's maximum run time over its adapter's (capabilities.maxRunMs), ms: "replicate=7200000".
   * A job still in flight (or unreadable) that long after the submit goes to MANUAL_REVIEW.
   */
  PROVIDER_MAX_RUN_MS: csv.pipe(z.array(z.string().regex(/^[a-z0-9-]+=\d+$/, 'entries are provider=milliseconds, e.g. replicate=7200000'))).default([]),

  /** Outbox relay cadence and batch size. */
  OUTBOX_RELAY_INTERVAL_MS: ms.default(1_000),
  OUTBOX_RELAY_BATCH: z.coerce.number().int().min(1).max(1000).default(100),
  /**
   * The worker's relay leaves outbox rows younger than this to the API's fast path (ms, at most a
   * minute). Above API_FAST_PATH_TIMEOUT_MS, so a fast-path start that answers within its timeout
   * is not made a second time by the relay; a start the fast path missed waits this long more.
   * 0: claim at once.
   */
  OUTBOX_RELAY_HOLD_OFF_MS: ms.max(60_000).default(2_000),

  /**
   * Outbox watermark (automatic narrowing): while more rows than this wait unpublished, or the
   * oldest has waited longer than the age, creates answer 503 with Retry-After.
   */
  OUTBOX_WATERMARK_COUNT: z.coerce.number().int().min(1).default(10_000),
  OUTBOX_WATERMARK_AGE_MS: ms.default(10 * 60 * 1000),
  /** Durable fallback for callbacks when the inbox cannot be written (Postgres down, READ_ONLY). */
  CALLBACK_SPOOL_DIR: z.string().min(1).default('.data/spool'),
  /**
   * Wake signals after callbacks (and slot grants) in flight at once from one process, across
   * tasks (api/wakes.ts): past it a task's wake waits its turn and later wakes of it fold in.
   */
  WAKE_SIGNALS_MAX_IN_FLIGHT: z.coerce.number().int().min(1).default(16),
  /** How often the API replays spooled callbacks into the inbox. */
  CALLBACK_SPOOL_REPLAY_MS: ms.default(2_000),
  /** A process's spool lease: its files are adopted by another process once it has not renewed it for this long (api/spool.ts). */
  CALLBACK_SPOOL_LEASE_MS: ms.default(30_000),

  // ---- Reconcilers and data lifecycle (docs/runbooks/reconcilers.md) ----
  /** The worker creates (or updates) the reconciler Schedules at start. */
  RECONCILE_SCHEDULES_ENABLED: bool.default(true),
  /** How often each reconciler's Schedule runs it (overlap policy SKIP: a run still going skips the next). */
  RECONCILE_OUTBOX_INTERVAL_MS: z.coerce.number().int().min(1_000).default(60_000),
  RECONCILE_PROVIDER_INTERVAL_MS: z.coerce
    .number()
    .int()
    .min(1_000)
    .default(5 * 60_000),
  RECONCILE_CALLBACKS_INTERVAL_MS: z.coerce.number().int().min(1_000).default(60_000),
  RECONCILE_OUTPUT_INTERVAL_MS: z.coerce.number().int().min(1_000).default(60_000),
  RECONCILE_BILLING_INTERVAL_MS: z.coerce
    .number()
    .int()
    .min(1_000)
    .default(15 * 60_000),
  RETENTION_INTERVAL_MS: z.coerce
    .number()
    .int()
    .min(1_000)
    .default(60 * 60_000),
  /** The interval of a reconciler with no setting of its own (one added to reconcilers/index.ts). */
  RECONCILE_DEFAULT_INTERVAL_MS: z.coerce
    .number()
    .int()
    .min(1_000)
    .default(15 * 60_000),
  /** At most this many rows or tasks per reconciler run (the rest waits for the next run). */
  RECONCILE_BATCH_LIMIT: z.coerce.number().int().min(1).max(100_000).default(500),
  /** A row or task has waited this long on its normal path before a reconciler acts on it (the relay, a wake, a timer). */
  RECONCILE_GRACE_MS: ms.default(60_000),
  /** SUBMITTED/RUNNING this long without change counts as long running (the Provider reconciler wakes it). */
  RECONCILE_LONG_RUNNING_MS: ms.default(30 * 60_000),
  /** Processed inbox rows of finished tasks are deleted after this many days: longer than any provider redelivers (at least 7). */
  RETENTION_INBOX_DAYS: z.coerce.number().int().min(7).max(3650).default(14),
  /** Published outbox rows are deleted after this many hours. */
  RETENTION_OUTBOX_HOURS: z.coerce
    .number()
    .int()
    .min(1)
    .max(24 * 3650)
    .default(24),
  /** Spool dead-letter files untouched this many days are deleted (their callbacks are re-read by polling). */
  RETENTION_SPOOL_DEAD_LETTER_DAYS: z.coerce.number().int().min(1).max(3650).default(30),
  /** Reconciler runs that changed nothing are deleted after this many days (runs that changed something are kept: they are the audit). */
  RETENTION_RECONCILE_RUN_DAYS: z.coerce.number().int().min(1).max(3650).default(7),
  /** Rows deleted per statement (each its own short transaction). */
  RETENTION_BATCH: z.coerce.number().int().min(1).max(100_000).default(1_000),
  /** Closed workflow histories kept by Temporal (set on the dev server by harness/temporal.ts; docs/runbooks/reconcilers.md). */
  TEMPORAL_NAMESPACE_RETENTION_HOURS: z.coerce
    .number()
    .int()
    .min(24)
    .max(24 * 3650)
    .default(72),

  /** Fence watcher: LISTEN for fence changes, plus a check this often (a missed NOTIFY costs at most this). */
  FENCE_WATCH_ENABLED: bool.default(true),
  FENCE_WATCH_INTERVAL_MS: ms.default(1_000),
  /** A step paused by the system mode is retried after this long (plus up to 50 % jitter). */
  MODE_PAUSE_RETRY_MS: ms.default(5_000),

  /** Who the ops CLI records as the operator (default: the OS user). */
  OPS_OPERATOR: z.string().min(2).optional(),

  WORKER_METRICS_PORT: port.default(9464),
  /**
   * The Temporal SDK's own Prometheus exporter (worker slots, pollers, schedule-to-start, sticky
   * cache), bound to 127.0.0.1 on this port (0: a free one) and served inside the worker's
   * /metrics beside ours, so one scrape sees both.
   */
  WORKER_SDK_METRICS_PORT: port.default(0),
  WORKER_MAX_CONCURRENT_ACTIVITIES: z.coerce.number().int().min(1).default(50),
  WORKER_SHUTDOWN_GRACE_MS: ms.default(30_000),
  /**
   * Workflows kept in the worker's sticky cache (0 = none: every workflow task replays its
   * history). The SDK's default (~60 % of the heap limit in MiB, ≈ 2,300 here) lets thousands
   * of waiting tasks hold memory; docs/performance.md has the measured choice.
   */
  WORKER_MAX_CACHED_WORKFLOWS: z.coerce.number().int().min(0).default(500),
  /**
   * V8's old-generation growing factor in the worker process, as 1 + percent / 100 (0: V8's own,
   * up to 4 ×): after a burst of work the main heap otherwise stays at its burst size, garbage
   * included, while tasks wait (docs/performance.md "Tuning knobs").
   */
  WORKER_HEAP_GROWING_PERCENT: z.coerce.number().int().min(0).max(300).default(20),
  /**
   * Node's Buffer pool in the worker process, bytes (0: Node's own, 64 KiB since 24.22). The
   * Temporal SDK keeps each cached run's last activation completion, a small slice of a pool
   * chunk, so every cached run can pin a whole chunk (docs/decisions/0053-worker-buffer-pool.md).
   */
  WORKER_BUFFER_POOL_BYTES: z.coerce.number().int().min(0).max(1_048_576).default(8_192),
  /**
   * How often the worker process hands glibc's free pages back to the system (malloc_trim; 0:
   * never). After a burst the allocator otherwise keeps its burst-time pages while tasks wait
   * (docs/decisions/0058-worker-malloc-trim.md).
   */
  WORKER_MALLOC_TRIM_INTERVAL_MS: ms
    .refine((v) => v === 0 || v >= 10_000, 'must be 0 (off) or at least 10000 ms: a trim stalls allocating threads while it runs')
    .default(60_000),
  /**
   * Whether those ticks also compact the worker's main V8 heap when a burst has left 16 MB of it
   * unused (a memory-reducing collection on the main thread, ~0.45 s measured; docs/decisions/0060-worker-heap-compaction.md).
   */
  WORKER_HEAP_COMPACTION: bool.default(true),
  /** Workflow tasks run at once (SDK default 40; at most the cache size). */
  WORKER_MAX_CONCURRENT_WORKFLOW_TASKS: z.coerce.number().int().min(2).default(40),
  /** Long polls kept open per task queue for workflow tasks and for activity tasks (SDK default 10 each). */
  WORKER_WORKFLOW_TASK_POLLERS: z.coerce.number().int().min(1).max(100).default(10),
  WORKER_ACTIVITY_TASK_POLLERS: z.coerce.number().int().min(1).max(100).default(10),

  SIMULATOR_PORT: port.default(7081),
  /** How long a simulated generation takes. */
  SIMULATOR_GENERATION_MS: ms.default(3_000),
  /** Where the simulator keeps its generated sample videos. */
  SIMULATOR_DATA_DIR: z.string().min(1).default('.data/simulator'),
  /** How long the simulator's output URL stays valid. */
  SIMULATOR_OUTPUT_TTL_MS: ms.default(60 * 60 * 1000),
  /** How long the simulated fal keeps a completed request's result (fal: 1 h; 6 min at 10 KB or more). */
  SIMULATOR_FAL_RESULT_RETENTION_MS: ms.default(60 * 60 * 1000),
  /**
   * The simulated Replicate account's request limits, `creates,others` a minute, or `off`
   * (default: the documented 600 and 3,000; providers/simulator/rate-limits.ts).
   */
  SIMULATOR_REPLICATE_RATE_LIMITS: z
    .string()
    .regex(/^(off|[1-9]\d*,[1-9]\d*)$/, 'expected "off" or "creates,others" a minute, e.g. 600,3000')
    .default('600,3000'),

  // ---- Callback and fetch hardening (docs/security.md) ----
  /** Key of the callback URL tokens (providers/callback-token.ts); the dev default is public, production sets its own. */
  CALLBACK_TOKEN_SECRET: secret(z.string().min(32, 'at least 32 characters'), DEV_CALLBACK_TOKEN_SECRET),
  /**
   * Retired values of CALLBACK_TOKEN_SECRET, comma-separated: the API still accepts the callback
   * URLs minted under them (never mints), so the secret rotates without orphaning the URLs of
   * attempts in flight (docs/security.md "Rotating the callback token secret").
   */
  CALLBACK_TOKEN_SECRET_PREVIOUS: unsafeInProduction(
    csv.pipe(z.array(z.string().min(32, 'each at least 32 characters')).max(10, 'at most 10 retired secrets')).default([]),
    (v) => (csvItems(v).includes(DEV_CALLBACK_TOKEN_SECRET) ? 'the dev CALLBACK_TOKEN_SECRET is refused in production, as a retired secret too' : null),
  ),
  /** The fal account whose webhooks we accept (X-Fal-Webhook-User-Id, part of the signed message). */
  PROVIDER_FAL_USER_ID: secret(z.string().min(1), 'sim-fal-user'),
  /** Callbacks per token and per source address per minute (Redis, else each API allows rate / API_INSTANCES). */
  CALLBACK_RATE_PER_TOKEN_PER_MINUTE: z.coerce.number().int().min(1).default(30),
  CALLBACK_RATE_PER_SOURCE_PER_MINUTE: z.coerce.number().int().min(1).default(6_000),
  /** Largest fallback spool (bytes across its files); past it callbacks answer 503 + Retry-After. */
  CALLBACK_SPOOL_MAX_BYTES: z.coerce
    .number()
    .int()
    .min(1024)
    .default(256 * 1024 * 1024),

  // ---- Tenant webhooks (docs/webhooks.md, docs/decisions/0018) ----
  /** Allow http:// and loopback/private webhook URLs (a receiver on this machine; `npm run dev` turns it on). Never in production. */
  WEBHOOK_ALLOW_PRIVATE: refusedInProduction(
    bool.default(false),
    ['true', '1', 'yes'],
    'true is refused in production (it allows http and loopback/private webhook URLs)',
  ),
  /** Key that seals the endpoints' signing secrets at rest (AES-256-GCM of a key derived from it); the dev default is public. */
  WEBHOOK_SECRET_KEY: secret(z.string().min(32, 'at least 32 characters'), DEV_WEBHOOK_SECRET_KEY),
  /**
   * Retired values of WEBHOOK_SECRET_KEY, comma-separated: they still open the secrets sealed
   * under them (never seal), so the key rotates without a flag day (docs/webhooks.md "Rotating
   * the sealing key"). Empty once `ops webhook reseal` has run.
   */
  WEBHOOK_SECRET_KEY_PREVIOUS: unsafeInProduction(
    csv.pipe(z.array(z.string().min(32, 'each at least 32 characters')).max(10, 'at most 10 retired keys')).default([]),
    (v) => (csvItems(v).includes(DEV_WEBHOOK_SECRET_KEY) ? 'the dev WEBHOOK_SECRET_KEY is refused in production, as a retired key too' : null),
  ),
  /**
   * Delay before each delivery attempt, ms, comma-separated: the first is the first attempt's
   * (0 = at once). Default Svix's: immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
   */
  WEBHOOK_RETRY_SCHEDULE_MS: csv
    .pipe(z.array(z.string().regex(/^\d+$/, 'entries are milliseconds')).min(1, 'at least one attempt').max(50))
    .transform((v) => v.map(Number))
    .default([0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]),
  /** One delivery attempt (connect, send, answer) gives up after this. */
  WEBHOOK_ATTEMPT_TIMEOUT_MS: z.coerce.number().int().min(100).max(60_000).default(15_000),
  /** Bytes of a receiver's answer read (and the first 512 kept in the attempt log); the rest is discarded. */
  WEBHOOK_RESPONSE_MAX_BYTES: z.coerce
    .number()
    .int()
    .min(0)
    .max(1024 * 1024)
    .default(4_096),
  /** Attempts in flight at once to one endpoint (across every worker). */
  WEBHOOK_ENDPOINT_CONCURRENCY: z.coerce.number().int().min(1).max(100).default(4),
  /** Attempts in flight at once per worker process. */
  WEBHOOK_RELAY_MAX_IN_FLIGHT: z.coerce.number().int().min(1).max(10_000).default(64),
  /** Attempts started per second per worker process at most (the drain after DEGRADED_NOTIFY lifts, or an outage). */
  WEBHOOK_RELAY_RATE_PER_SECOND: z.coerce.number().int().min(1).max(100_000).default(50),
  /** How often the relay looks for due deliveries. */
  WEBHOOK_RELAY_INTERVAL_MS: z.coerce.number().int().min(10).default(500),
  /** An endpoint that has failed every attempt for this long is disabled, and the tenant gets a needs-attention record. */
  WEBHOOK_DISABLE_AFTER_MS: z.coerce
    .number()
    .int()
    .min(1_000)
    .default(5 * 86_400_000),
  /** After rotate-secret, the previous secret keeps signing beside the new one for this long. */
  WEBHOOK_SECRET_OVERLAP_MS: z.coerce
    .number()
    .int()
    .min(0)
    .max(7 * 86_400_000)
    .default(86_400_000),
  /** Endpoints per tenant. */
  WEBHOOK_MAX_ENDPOINTS_PER_TENANT: z.coerce.number().int().min(1).max(1_000).default(20),

  /** API key of the demo tenant that `npm run dev` seeds (generated when unset). */
  DEMO_API_KEY: z.string().min(24).optional(),
});

export type Config = z.infer<typeof envSchema>;

export class ConfigError extends Error {
  constructor(readonly issues: { field: string; message: string }[]) {
    super(`invalid configuration: ${issues.map((i) => `${i.field}: ${i.message}`).join('; ')}`);
    this.name = 'ConfigError';
  }
}

/**
 * Parses an environment (process.env by default) into a typed Config, or throws ConfigError
 * naming each bad field. Under the production profile (VIDORCH_ENV or NODE_ENV = production)
 * no dev value fills in, and every unset, dev or unsafe setting is named (config/profile.ts).
 */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const production = profileOf(env) === 'production';
  const refused = production ? [...productionProblems(envSchema.shape, env), ...opsListenerProblems(env)] : [];
  const result = envSchema.safeParse(production ? env : withDevValues(envSchema.shape, env));
  const named = new Set(refused.map((p) => p.field));
  const parsed = result.success
    ? [...timeoutProblems(result.data), ...pollQuotaProblems(result.data)]
    : result.error.issues.map((i) => ({ field: i.path.join('.'), message: i.message }));
  const issues = [...refused, ...parsed.filter((i) => !named.has(i.field))];
  if (issues.length > 0 || !result.success) throw new ConfigError(issues);
  return result.data;
}

function timeoutProblems(config: Config): { field: string; message: string }[] {
  return config.API_HEADERS_TIMEOUT_MS > config.API_REQUEST_TIMEOUT_MS
    ? [{ field: 'API_HEADERS_TIMEOUT_MS', message: 'must not exceed API_REQUEST_TIMEOUT_MS' }]
    : [];
}

/** `provider=number` entries (POLL_QUEUE_RATES, PROVIDER_MAX_RUN_MS, each checked by its schema) as provider → number. */
export const perProvider = (entries: readonly string[]): Record<string, number> =>
  Object.fromEntries(
    entries.map((entry) => {
      const [provider = '', value = ''] = entry.split('=');
      return [provider, Number(value)];
    }),
  );

/** A quota POLL_QUEUE_RATES names that no poll queue rate can hold over 10 s on POLL_QUEUE_PARTITIONS partitions (domain/poll-quota.ts). */
function pollQuotaProblems(config: Config): { field: string; message: string }[] {
  return Object.entries(perProvider(config.POLL_QUEUE_RATES)).flatMap(([provider, quota]) => {
    try {
      pollQueueRate(quota, config.POLL_QUEUE_PARTITIONS);
      return [];
    } catch {
      return [
        {
          field: 'POLL_QUEUE_RATES',
          message: `${provider}=${quota} cannot be held over ${QUOTA_WINDOW_S} s on POLL_QUEUE_PARTITIONS=${config.POLL_QUEUE_PARTITIONS} (each partition's limiter lets one more through): it takes more than ${config.POLL_QUEUE_PARTITIONS / QUOTA_WINDOW_S}/s, or fewer partitions`,
        },
      ];
    }
  });
}

/** Production: an operator listener off loopback needs its bearer token. */
function opsListenerProblems(env: Record<string, string | undefined>): { field: string; message: string }[] {
  const host = envSchema.shape.OPS_LISTEN_HOST.safeParse(env['OPS_LISTEN_HOST']);
  if (!host.success || env['OPS_BEARER_TOKEN'] || isLoopback(host.data)) return [];
  return [{ field: 'OPS_BEARER_TOKEN', message: `required in production when OPS_LISTEN_HOST (${host.data}) is not loopback` }];
}

function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  return ipaddr.isValid(host) && ipaddr.process(host).range() === 'loopback';
}

/** For process entry points: parse or print the field errors and exit(2). */
export function loadConfigOrExit(): Config {
  try {
    return loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const issue of err.issues) console.error(`config: ${issue.field}: ${issue.message}`);
      process.exit(2);
    }
    throw err;
  }
}

/** The environment that reproduces `config` in a child process (drills and tests spawn workers). */
export function configToEnv(config: Config): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(config)) {
    if (v === undefined) continue;
    env[k] = Array.isArray(v) ? v.join(',') : String(v);
  }
  return env;
}
