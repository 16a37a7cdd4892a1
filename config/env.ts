// The one place that reads process.env. Every process (API, worker, simulator, CLI, tests)
// calls loadConfig() once and passes the result down; nothing else touches the environment.
// Credentials and third-party URLs are declared with config/profile.ts's helpers: their dev
// values serve development and tests only, and the production profile refuses them.
import { z } from 'zod';
import { pollQueueRate, QUOTA_WINDOW_S } from '../domain/poll-quota';
import { PROVIDER_COST_UNITS } from '../domain/provider-cost';
import { hostRuleProblem, isLoopbackHost } from '../net/host-rules';
import { connectionProblems } from './connections';
import {
  credential,
  isImplicitProduction,
  outputHosts,
  productionProblems,
  profileOf,
  publicUrl,
  refusedInProduction,
  secret,
  storageEndpoint,
  unsafeInProduction,
  withDevValues,
} from './profile';

const bool = z.enum(['true', 'false', '1', '0', 'yes', 'no']).transform((v) => v === 'true' || v === '1' || v === 'yes');

const csvItems = (v: string): string[] =>
  v
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
const csv = z.string().transform(csvItems);
const DEV_WEBHOOK_SECRET_KEY = 'dev-webhook-secret-key-not-for-production';
const DEV_CALLBACK_TOKEN_SECRET = 'dev-callback-token-secret-not-for-production';
const DEV_BROWSER_TOKEN_SECRET = 'dev-browser-token-secret-not-for-production';

const port = z.coerce.number().int().min(0).max(65535);
const ms = z.coerce.number().int().min(0);
/** Output host rules, each an exact host or `*.domain` (net/host-rules.ts); a malformed one is refused in every profile. */
const hostRules = csv.superRefine((rules, ctx) => {
  for (const rule of rules) {
    const problem = hostRuleProblem(rule);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  }
});
const hosts = (list: string[]) => outputHosts(hostRules.default(list), list);
/** An optional file path or name; empty means unset (a compose `${NAME:-}`). */
const optionalText = () =>
  z
    .string()
    .optional()
    .transform((v) => v || undefined);
/** A setting and what it means: the description is docs/configuration.md's (`npm run docs:config` writes it). */
const setting = <T extends z.ZodType>(description: string, schema: T): T => schema.describe(description);

export const envSchema = z.object({
  NODE_ENV: setting(
    "Node's conventional flag. `production` always selects the production profile; `development` or `test` here never selects a dev profile on its own (`VIDORCH_ENV` does).",
    z.enum(['development', 'test', 'production']).default('development'),
  ),
  VIDORCH_ENV: setting(
    'The deployment profile. `development` or `test` lets the dev values fill in (`npm run dev`, `npm test`, the drills, the benchmarks and `npm run api`/`worker`/`ops` set it); unset or `production` (or `NODE_ENV=production`): the production profile, which refuses dev values (README "Deploying").',
    z.enum(['development', 'test', 'production']).optional(),
  ),
  LOG_LEVEL: setting(
    'Lowest level logged (pino): `fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`.',
    z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  ),
  LOG_PRETTY: setting('Human-readable logs (pino-pretty) instead of JSON lines; `npm run dev` turns it on.', bool.default(false)),

  // ---- Traces (docs/observability.md): off unless an endpoint is set ----
  OTEL_EXPORTER_OTLP_ENDPOINT: setting(
    'OTLP/HTTP receiver of the traces (a collector, Jaeger, Tempo), e.g. `http://127.0.0.1:4318`; spans go to `/v1/traces` under it. Unset: no tracing (docs/observability.md).',
    z.url({ protocol: /^https?$/ }).optional(),
  ),
  OTEL_EXPORTER_OTLP_HEADERS: setting(
    "Headers of every export, `name=value` comma-separated (OpenTelemetry's format; values may be percent-encoded), e.g. a backend's auth.",
    z
      .string()
      .regex(/^\s*[^=,\s]+\s*=[^,]*(?:,\s*[^=,\s]+\s*=[^,]*)*$/, 'expected name=value pairs separated by commas')
      .optional(),
  ),
  OTEL_TRACES_SAMPLE_RATIO: setting('Share of new traces kept, 0–1 (a kept parent keeps its children).', z.coerce.number().min(0).max(1).default(1)),

  PORT: setting("The API's public port.", port.default(3000)),
  PUBLIC_BASE_URL: setting(
    'Base URL the outside world reaches this API under: the callback URLs handed to providers start with it, and `/openapi.json` names it as the server. Production: https and a public host.',
    publicUrl('http://127.0.0.1:3000'),
  ),
  API_HEADERS_TIMEOUT_MS: setting(
    "Slow-client guard of the API's HTTP server: a request's headers must all arrive within this (at most `API_REQUEST_TIMEOUT_MS`).",
    z.coerce.number().int().min(100).default(10_000),
  ),
  API_REQUEST_TIMEOUT_MS: setting('Slow-client guard: a whole request must arrive within this.', z.coerce.number().int().min(100).default(30_000)),
  API_KEEP_ALIVE_TIMEOUT_MS: setting(
    "How long an idle keep-alive connection stays open; keep it above the load balancer's idle timeout.",
    z.coerce.number().int().min(100).default(65_000),
  ),
  /**
   * The operator listener (API: OPS_PORT; worker: WORKER_METRICS_PORT): /metrics and the detailed
   * /readyz. Loopback unless set; a bearer token, when set, is required of every request (and in
   * production whenever the host is not loopback).
   */
  OPS_LISTEN_HOST: setting(
    "Host the operator listeners bind (the API's on `OPS_PORT`, the worker's on `WORKER_METRICS_PORT`): `/metrics`, the detailed `/readyz`, `/healthz`. Off loopback, production requires `OPS_BEARER_TOKEN`.",
    z.string().min(1).default('127.0.0.1'),
  ),
  OPS_PORT: setting("The API's operator listener port (the worker's is `WORKER_METRICS_PORT`).", port.default(9463)),
  OPS_BEARER_TOKEN: setting(
    'When set (16 characters or more), every request to the operator listeners must carry `Authorization: Bearer <token>` (else `401`); production requires it when `OPS_LISTEN_HOST` is not loopback.',
    z.string().min(16).optional(),
  ),
  METRICS_FACTS_INTERVAL_MS: setting(
    'How often each process recomputes its fact gauges: one bounded pass on a connection of its own, so a scrape runs no query (docs/decisions/0013).',
    z.coerce.number().int().min(100).default(15_000),
  ),
  API_FAST_PATH_TIMEOUT_MS: setting('How long a create waits for its workflow start before leaving it to the outbox relay.', ms.default(1_000)),
  API_FAST_PATH_COOLDOWN_MS: setting(
    'After a failed fast-path start, creates skip the fast path this long (Temporal is likely down) and the outbox relay starts their workflows.',
    ms.default(5_000),
  ),
  API_FAST_PATH_MODE: setting(
    '`await`: the 202 waits for the workflow start; `background`: it answers once the task is committed and the start runs behind it (docs/decisions/0008).',
    z.enum(['await', 'background']).default('await'),
  ),
  API_FAST_PATH_MAX_IN_FLIGHT: setting(
    'Background starts in flight at once per API process; beyond it the outbox relay starts the workflow.',
    z.coerce.number().int().min(1).max(10_000).default(64),
  ),
  TENANT_CREATE_RATE_PER_SECOND: setting(
    'Writes a second per tenant (task creations, webhook endpoint writes, rotations and redelivers), shared through Redis; over it `429` + `Retry-After`.',
    z.coerce.number().int().min(1).default(50),
  ),
  TENANT_READ_RATE_PER_SECOND: setting(
    'Reads a second per tenant (`GET /v1/tasks…`), shared through Redis; over it `429` + `Retry-After`.',
    z.coerce.number().int().min(1).default(100),
  ),
  TENANT_CANCEL_RATE_PER_SECOND: setting(
    'Cancels a second per tenant, shared through Redis; over it `429` + `Retry-After`.',
    z.coerce.number().int().min(1).default(10),
  ),
  REDIS_URL: setting(
    'Redis holding the limits shared by the API processes; empty: local limits only. `rediss://` for TLS (the server\'s certificate and name checked); production requires it unless the host is loopback (docs/security.md "Connections").',
    z.string().default('redis://127.0.0.1:6379'),
  ),
  REDIS_TLS_CA_FILE: setting("PEM file of the CA that signed Redis's certificate, with a `rediss://` `REDIS_URL`; unset: the system's CAs.", optionalText()),
  API_INSTANCES: setting(
    'API processes sharing the limits: without Redis (or while it is down) each allows rate / this.',
    z.coerce.number().int().min(1).default(1),
  ),
  AUTH_LOOKUPS_PER_SOURCE_PER_SECOND: setting(
    'Per API process, lookups a second of API keys it has not seen valid, per source address (IPv6: per /64), before Postgres is asked; over it `429` + `Retry-After` and no query (docs/security.md "API keys").',
    z.coerce.number().int().min(1).default(20),
  ),
  AUTH_CACHE_TTL_MS: setting(
    "How long an API key lookup's answer (valid or unknown) is used; a revocation evicts the key on every API process at once (NOTIFY).",
    z.coerce.number().int().min(0).max(60_000).default(5_000),
  ),
  AUTH_CACHE_MAX_KEYS: setting(
    'API keys each API process remembers: this many valid ones, and as many unknown ones.',
    z.coerce.number().int().min(1).max(1_000_000).default(10_000),
  ),
  API_BODY_LIMIT: setting('Largest request or callback body.', z.string().default('256kb')),
  TASK_BATCH_BODY_LIMIT: setting('Largest `POST /v1/tasks/batch` body (up to 1,000 creates).', z.string().default('4mb')),
  TASK_BATCH_CHUNK_SIZE: setting(
    'Items of a `POST /v1/tasks/batch` admitted per transaction: each chunk commits its tasks and their results together (docs/decisions/0076-task-batches.md).',
    z.coerce.number().int().min(1).max(1_000).default(100),
  ),
  EVENTS_HEARTBEAT_MS: setting(
    'Live event streams (docs/events.md): a heartbeat comment on every open stream this often, so proxies keep it open.',
    z.coerce.number().int().min(100).default(15_000),
  ),
  EVENTS_PROGRESS_INTERVAL_MS: setting('At most one provider progress event per task this often, per API process (the latest value).', ms.default(2_000)),
  EVENTS_MAX_STREAMS_PER_TENANT: setting('Open event streams per tenant per API process; one more answers `429`.', z.coerce.number().int().min(1).default(20)),
  EVENTS_MAX_STREAMS: setting('Open event streams per API process; one more answers `503`.', z.coerce.number().int().min(1).default(2_000)),
  EVENTS_RESYNC_MS: setting(
    'Every open stream re-reads Postgres this often besides its NOTIFY wake-ups (a safety net; docs/decisions/0021).',
    z.coerce.number().int().min(100).default(10_000),
  ),
  EVENTS_RETRY_MS: setting(
    'The reconnection time (SSE `retry`) every stream tells its client at the start, for a drop or an API restart.',
    z.coerce.number().int().min(100).default(3_000),
  ),
  EVENTS_POLL_AFTER_MS: setting(
    'In `DEGRADED_NOTIFY` and below: how long streams tell clients to wait before polling or reconnecting (`poll_after_ms`, SSE `retry`).',
    z.coerce.number().int().min(100).default(5_000),
  ),
  EVENTS_RESUME_MAX_AGE_MS: setting(
    "How far back the tenant stream replays: a `Last-Event-ID` whose next transition of the tenant's is older than this is answered with `event: resync` (re-read the tasks) instead of a replay (docs/events.md).",
    z.coerce.number().int().min(60_000).default(86_400_000),
  ),

  DATABASE_URL: setting(
    'The fact database, credentials included. TLS as libpq reads its `sslmode` (`disable`, `require`, `verify-ca`, `verify-full`; `prefer` and `allow` are refused), `sslrootcert`, `sslcert` and `sslkey`; production requires `sslmode=verify-full` unless every server is on loopback (docs/security.md "Connections").',
    secret(z.string().min(1), 'postgres://postgres@127.0.0.1:5432/vidorch'),
  ),
  DATABASE_POOL_MAX: setting("Connections in each process's pool.", z.coerce.number().int().min(1).max(200).default(10)),
  /**
   * Every API and worker connection gives up waiting for a row lock after this (Postgres
   * lock_timeout): a step retries instead of holding a pooled connection behind a hot row (a
   * provider's control row under a burst of claims).
   */
  DATABASE_LOCK_TIMEOUT_MS: setting(
    'An API or worker statement that waits longer than this for a lock fails and its step retries (Postgres `lock_timeout`).',
    z.coerce.number().int().min(100).max(600_000).default(5_000),
  ),
  DATABASE_FAILOVER_HOSTS: setting(
    "Standbys that may be promoted, `host:port,…` in order: each pool tries `DATABASE_URL`'s host, then these, and keeps only a read-write server, so the API and workers follow a promotion without a restart (docs/decisions/0030, docs/runbooks/pg-switchover.md). Empty: `DATABASE_URL`'s host only.",
    csv.pipe(z.array(z.string().regex(/^[^\s,]+:\d{1,5}$/, 'entries are host:port, e.g. db-2.internal:5432'))).default([]),
  ),
  DATABASE_TLS_CA_FILE: setting(
    "PEM file of the CA that signed Postgres's certificate (libpq's `sslrootcert`, for every pool and LISTEN connection); without an `sslmode` in `DATABASE_URL` it means `verify-full`. Unset: the system's CAs.",
    optionalText(),
  ),
  DATABASE_TLS_CERT_FILE: setting('PEM file of a client certificate Postgres asks for (`sslcert`), with `DATABASE_TLS_KEY_FILE`.', optionalText()),
  DATABASE_TLS_KEY_FILE: setting("PEM file of the client certificate's private key (`sslkey`).", optionalText()),

  REGION: setting(
    'The region this process runs in; every fact write checks it against the region write fence (docs/runbooks/failover.md).',
    z.string().min(1).default('region-a'),
  ),
  FENCE_SCOPE: setting('The fence row this process checks.', z.string().min(1).default('global')),

  TEMPORAL_ADDRESS: setting("Temporal's frontend, `host:port`.", z.string().min(1).default('127.0.0.1:7233')),
  TEMPORAL_NAMESPACE: setting('The Temporal namespace.', z.string().min(1).default('default')),
  TEMPORAL_UI_URL: setting('The Temporal Web UI, for printed links.', z.url().default('http://127.0.0.1:8233')),
  TEMPORAL_TASK_QUEUE: setting(
    "The generation task queue, and the base of the other queues' names (`<queue>-poll-<provider>`, `<queue>-reconcile`); letters, digits, `.`, `_` and `-` only, as it is spliced into visibility queries.",
    z
      .string()
      .regex(/^[A-Za-z0-9._-]{1,200}$/, 'letters, digits, ".", "_" and "-" only (it is spliced into visibility queries)')
      .default('generation'),
  ),
  TEMPORAL_TLS: setting(
    'TLS toward `TEMPORAL_ADDRESS` (the server\'s certificate and name checked); the other `TEMPORAL_TLS_*` settings and `TEMPORAL_API_KEY` need it. Production requires it unless the address is loopback (docs/security.md "Connections").',
    bool.default(false),
  ),
  TEMPORAL_TLS_CA_FILE: setting("PEM file of the CA that signed the frontend's certificate; unset: the system's CAs (Temporal Cloud).", optionalText()),
  TEMPORAL_TLS_CERT_FILE: setting(
    "mTLS: PEM file of this client's certificate (Temporal Cloud's certificate auth, or a frontend that requires client certificates), with `TEMPORAL_TLS_KEY_FILE`.",
    optionalText(),
  ),
  TEMPORAL_TLS_KEY_FILE: setting("mTLS: PEM file of the client certificate's private key.", optionalText()),
  TEMPORAL_TLS_SERVER_NAME: setting(
    "The name the frontend's certificate must carry (and the SNI sent), when it is not `TEMPORAL_ADDRESS`'s host (a load balancer reached by address).",
    optionalText(),
  ),
  TEMPORAL_API_KEY: setting(
    'A Temporal Cloud API key, sent as `Authorization: Bearer` on every call of the API, the worker and the CLI; needs `TEMPORAL_TLS=true`.',
    credential(optionalText()),
  ),

  S3_ENDPOINT: setting(
    'Object storage of the outputs; may be private (a store inside the network), but production names it, over https unless its host is loopback (presigned download URLs are served from it).',
    storageEndpoint(z.url(), 'http://127.0.0.1:7070'),
  ),
  S3_REGION: setting("The outputs bucket's region.", z.string().min(1).default('us-east-1')),
  S3_ACCESS_KEY_ID: setting('Object storage access key id.', secret(z.string().min(1), 'vidorch-dev')),
  S3_SECRET_ACCESS_KEY: setting('Object storage secret key.', secret(z.string().min(1), 'vidorch-dev-secret')),
  S3_BUCKET_OUTPUTS: setting('Bucket of the outputs and thumbnails.', z.string().min(3).default('vidorch-outputs')),
  S3_FORCE_PATH_STYLE: setting('Path-style bucket addressing (`endpoint/bucket/key`), as versitygw and MinIO need.', bool.default(true)),
  S3_FALLBACK_ENDPOINT: setting(
    "The second S3 endpoint a rescue writes to while the primary is unreachable (docs/decisions/0029); `''` turns the fallback off. Dev and tests run a second versitygw; production must set it, over https unless its host is loopback.",
    storageEndpoint(z.union([z.url(), z.literal('')]), 'http://127.0.0.1:7071'),
  ),
  S3_FALLBACK_REGION: setting("The fallback bucket's region.", z.string().min(1).default('us-east-1')),
  S3_FALLBACK_ACCESS_KEY_ID: setting("The fallback endpoint's access key id.", secret(z.string().min(1), 'vidorch-dev')),
  S3_FALLBACK_SECRET_ACCESS_KEY: setting("The fallback endpoint's secret key.", secret(z.string().min(1), 'vidorch-dev-secret')),
  S3_FALLBACK_BUCKET: setting('The fallback bucket.', z.string().min(3).default('vidorch-outputs-fallback')),
  S3_PRESIGN_TTL_SECONDS: setting(
    'Lifetime of the presigned download URLs that `GET /v1/tasks/:id` returns (60 s to 7 days).',
    z.coerce
      .number()
      .int()
      .min(60)
      .max(7 * 24 * 3600)
      .default(3600),
  ),

  /** Provider APIs, credentials and webhook keys: dev values are the simulator's (`npm run simulator`). */
  PROVIDER_REPLICATE_BASE_URL: setting(
    "Replicate's API, or any server speaking its protocol; when set, `npm run dev` does not start the simulator.",
    publicUrl('http://127.0.0.1:7081/replicate'),
  ),
  PROVIDER_REPLICATE_API_TOKEN: setting('Replicate API token.', secret(z.string().min(1), 'r8_dev_simulator_token')),
  PROVIDER_REPLICATE_WEBHOOK_SECRET: setting(
    "Replicate's webhook signing secret: Standard Webhooks, `whsec_` + base64.",
    secret(z.string().regex(/^whsec_[A-Za-z0-9+/=]+$/, 'must be "whsec_" followed by base64'), 'whsec_ZGV2LXNpbXVsYXRvci13ZWJob29rLXNlY3JldC0zMmI='),
  ),
  /**
   * Hosts the worker may download provider outputs from: exact names or `*.domain` for the
   * domain's subdomains (never the domain itself, list it too), as each provider documents its
   * hosts (docs/providers.md "Output hosts"); dev and tests add 127.0.0.1 and localhost.
   * Replicate: "replicate.delivery and its subdomains".
   */
  PROVIDER_REPLICATE_OUTPUT_HOSTS: setting(
    'Hosts Replicate outputs may be downloaded from: exact names, or `*.domain` for its subdomains (list the domain too). A refused host parks the task in OUTPUT_AT_RISK for an operator (docs/providers.md "Output hosts").',
    hosts(['replicate.delivery', '*.replicate.delivery']),
  ),
  PROVIDER_FAL_BASE_URL: setting("fal's queue API.", publicUrl('http://127.0.0.1:7081/fal')),
  PROVIDER_FAL_API_KEY: setting('fal API key.', secret(z.string().min(1), 'sim-fal-key-id:sim-fal-key-secret')),
  PROVIDER_FAL_OPENAPI_URL: setting(
    "fal's per-endpoint OpenAPI documents (`?endpoint_id=` is added), read by `ops catalog sync`; fal publishes them at https://fal.ai/api/openapi/queue/openapi.json.",
    publicUrl('http://127.0.0.1:7081/fal/api/openapi/queue/openapi.json'),
  ),
  PROVIDER_FAL_JWKS_URL: setting("fal's JWKS: the keys its webhooks are signed with (ED25519).", publicUrl('http://127.0.0.1:7081/fal/.well-known/jwks.json')),
  /** fal's CDN: fal.media and its subdomains (v3.fal.media, v3b.fal.media). */
  PROVIDER_FAL_OUTPUT_HOSTS: setting('Hosts fal outputs may be downloaded from (rules as for Replicate).', hosts(['fal.media', '*.fal.media'])),
  PROVIDER_RUNWAY_BASE_URL: setting("Runway's tasks API (polling only: Runway sends no webhooks).", publicUrl('http://127.0.0.1:7081/runway')),
  PROVIDER_RUNWAY_API_SECRET: setting('Runway API secret.', secret(z.string().min(1), 'sim-runway-secret-0123456789')),
  PROVIDER_RUNWAY_OUTPUT_HOSTS: setting('Hosts Runway outputs may be downloaded from.', hosts(['dnznrvs05pmza.cloudfront.net'])),
  PROVIDER_KLING_BASE_URL: setting("Kling's API (a JWT from an access key and a secret key).", publicUrl('http://127.0.0.1:7081/kling')),
  PROVIDER_KLING_ACCESS_KEY: setting('Kling access key.', secret(z.string().min(1), 'sim-kling-access-key')),
  PROVIDER_KLING_SECRET_KEY: setting('Kling secret key (signs the JWT).', secret(z.string().min(1), 'sim-kling-secret-key-0123456789')),
  /** Kling's video URLs: subdomains of klingai.com (cdn.klingai.com, v15-kling.klingai.com, …). */
  PROVIDER_KLING_OUTPUT_HOSTS: setting('Hosts Kling outputs may be downloaded from.', hosts(['*.klingai.com'])),
  PROVIDER_HTTP_TIMEOUT_MS: setting('Timeout of one provider HTTP call (submit, status, cancel).', ms.default(10_000)),
  BULKHEAD_RAMP_MS: setting(
    "After a worker starts or a provider's breaker closes, its in-flight ceiling ramps from `BULKHEAD_RAMP_START_SHARE` of the limit (at least `BULKHEAD_RAMP_MIN_SLOTS`) to all of it over this long; 0: no ramp (docs/providers.md).",
    ms.default(60_000),
  ),
  BULKHEAD_RAMP_START_SHARE: setting('Share of the in-flight limit the ramp starts from.', z.coerce.number().min(0).max(1).default(0.2)),
  BULKHEAD_RAMP_MIN_SLOTS: setting('Slots the ramp allows at least.', z.coerce.number().int().min(1).default(2)),
  DEGRADED_PROVIDER_FAILURE_RATE: setting(
    "In the `DEGRADED_PROVIDER` mode, a provider's breaker trips at this failure rate and sends no probes (docs/modes.md).",
    z.coerce.number().gt(0).max(1).default(0.2),
  ),
  SLOT_QUEUE_POLICY: setting(
    'Order of a provider\'s slot queue: `fair` (priority with aging, then weighted share per tenant, then age) or `fifo` (oldest first) (docs/providers.md "The slot queue").',
    z.enum(['fair', 'fifo']).default('fair'),
  ),
  SLOT_QUEUE_AGING_MS: setting(
    "A waiting task's priority rises one level per this long waited (0: no aging); priority 0 reaches the top after 9×.",
    ms.default(60_000),
  ),
  SLOT_WAIT_FALLBACK_MS: setting(
    'A task waiting for a slot re-checks its place after this long if no grant woke it (a lost wake).',
    z.coerce.number().int().min(1_000).default(60_000),
  ),
  SLOT_GRANT_TTL_MS: setting('A grant not used by then goes back to the queue (a terminated workflow).', z.coerce.number().int().min(1_000).default(300_000)),
  TENANT_MAX_IN_FLIGHT_PER_PROVIDER: setting(
    "Default in-flight cap per tenant at one provider; unset: none (`ops tenant limit` sets a tenant's own).",
    z.coerce.number().int().min(0).optional(),
  ),
  TENANT_MAX_IN_FLIGHT: setting(
    "Default in-flight cap per tenant over all providers; unset: none (`ops tenant limit` sets a tenant's own).",
    z.coerce.number().int().min(0).optional(),
  ),
  TENANT_SLOT_WEIGHT: setting(
    "A tenant's default fair-share weight in the slot queue (`ops tenant limit --weight` sets a tenant's own).",
    z.coerce.number().int().min(1).default(1),
  ),
  TEMPORAL_TASK_PRIORITY: setting(
    "Start workflows with Temporal task-queue priority (from the task's priority) and the tenant as fairness key (docs/decisions/0025).",
    bool.default(true),
  ),

  OUTPUT_FETCH_ALLOW_PRIVATE: setting(
    'Allow http and loopback/private output URLs (the local simulator only; refused in production). Otherwise only public addresses, checked at connect time (docs/security.md).',
    refusedInProduction(bool.default(false), ['true', '1', 'yes'], 'true is refused in production (it allows loopback and private output URLs)'),
  ),
  OUTPUT_MAX_BYTES: setting(
    'Largest output accepted.',
    z.coerce
      .number()
      .int()
      .min(1)
      .default(2 * 1024 * 1024 * 1024),
  ),
  OUTPUT_PART_BYTES: setting(
    'Part size of an output download: what a resumed download keeps (docs/decisions/0028); at least 5 MiB, as S3 refuses smaller parts but the last.',
    z.coerce
      .number()
      .int()
      .min(5 * 1024 * 1024)
      .max(512 * 1024 * 1024)
      .default(8 * 1024 * 1024),
  ),
  OUTPUT_RETENTION_DAYS: setting(
    "Days a finished task's output is kept unless its tenant has its own (`ops tenant output-retention`); 0 keeps forever. `ops expire-outputs` deletes the expired.",
    z.coerce.number().int().min(0).default(30),
  ),
  OUTPUT_AT_RISK_MARGIN_MS: setting(
    "A rescue failing this close to the provider output URL's expiry marks the task OUTPUT_AT_RISK (operators are alerted).",
    ms.default(15 * 60 * 1000),
  ),
  MEDIA_PROBE_TIMEOUT_MS: setting(
    'One ffprobe run of the media step is killed after this; a timeout is a media failure (`MEDIA_MAX_FAILURES`).',
    z.coerce.number().int().min(1).max(240_000).default(30_000),
  ),
  MEDIA_MAX_FAILURES: setting(
    'Failures of the media step that are no verdict on the video (ffprobe crashed, timed out or answered garbage; the stored video could not be read) before the task goes to MANUAL_REVIEW with the last error; counted in `generation_task.media_failures` (docs/design.md §5 "Bounds").',
    z.coerce.number().int().min(1).max(1_000).default(5),
  ),

  POLL_INITIAL_MS: setting('Poll fallback: the first poll after the submit; then the interval doubles, ±20 % jitter.', ms.default(5_000)),
  POLL_MAX_MS: setting("Poll fallback: the interval's cap.", ms.default(60_000)),
  POLL_HEALTHY_FACTOR: setting(
    'While a provider\'s callbacks are healthy (one reached the inbox within `CALLBACK_HEALTHY_WINDOW_MS`), polls waiting on its jobs are this many times slower (docs/providers.md "Poll queues and pacing").',
    z.coerce.number().min(1).max(100).default(3),
  ),
  CALLBACK_HEALTHY_WINDOW_MS: setting("A provider's callbacks count as healthy while one reached the inbox within this window.", ms.default(5 * 60 * 1000)),
  /**
   * A provider's query quota for this account, requests per second, over the adapter's declared
   * one (capabilities.requestsPerSecond): "replicate=5,kling=2". Its poll queue's rate is set
   * below it by what Temporal's bursts can add (domain/poll-quota.ts).
   */
  POLL_QUEUE_RATES: setting(
    "A provider's query quota for this account, requests a second, over its adapter's `requestsPerSecond`, e.g. `replicate=5,kling=2`; its poll queue's rate is set below it so the reads stay within it over any 10 s (docs/providers.md, docs/decisions/0046). A quota that cannot be held on `POLL_QUEUE_PARTITIONS` is refused at start.",
    csv
      .pipe(
        z
          .array(z.string().regex(/^[a-z0-9-]+=\d+(\.\d+)?$/, 'entries are provider=requests per second, e.g. replicate=5'))
          .refine((entries) => entries.every((e) => Number(e.split('=')[1]) > 0), 'rates must be above 0'),
      )
      .default([]),
  ),
  /**
   * When more jobs wait on a provider than its poll rate can visit within their intervals, each
   * next poll is put waiting / (rate × share) away (activities/poll-demand.ts): the wait loops
   * wake about as often as the provider can be asked, at this share of the rate.
   */
  POLL_QUOTA_SHARE: setting(
    'When more jobs wait on a provider than its poll rate can read in turn, each next poll is `waiting / (rate × share)` away (docs/providers.md).',
    z.coerce.number().gt(0).max(1).default(0.8),
  ),
  /**
   * The Temporal server's partitions per task queue (matching.numTaskqueueReadPartitions and
   * WritePartitions; 4 is its default): each partition's limiter has its own burst, which the
   * poll queues' rates leave room for (domain/poll-quota.ts).
   */
  // At most 48: the adapters' smallest declared quota (5/s) is held on up to 49 (domain/poll-quota.ts).
  POLL_QUEUE_PARTITIONS: setting(
    "The Temporal server's partitions per task queue (`matching.numTaskqueueReadPartitions` and `WritePartitions`, default 4): each partition's rate limiter has its own burst, which the poll queues' rates leave room for.",
    z.coerce.number().int().min(1).max(48).default(4),
  ),

  ROUTER_BUDGET_MS: setting(
    "The router's scoring budget per decision; over it the static route is used, and counted (docs/routing.md).",
    z.coerce.number().min(0.1).max(1_000).default(5),
  ),
  ROUTER_STATIC_ROUTE: setting(
    'The deterministic fallback route: `priority` (lowest priority first) or `hash` (a stable hash of the task id).',
    z.enum(['priority', 'hash']).default('priority'),
  ),

  TASK_DEADLINE_SECONDS: setting(
    "A task's deadline when its request names none (`deadline_seconds`): no provider call starts past it (or with less than `PROVIDER_HTTP_TIMEOUT_MS` left); the task then fails `DEADLINE_EXCEEDED`, its credits released (docs/timeouts.md).",
    z.coerce
      .number()
      .int()
      .min(10)
      .max(7 * 86_400)
      .default(3_600),
  ),

  QUOTE_TTL_SECONDS: setting(
    'How long a quote (`POST /v1/quotes`) may be cited by a create (`quote_id`); the create then reserves at most the quoted price (docs/api.md "Quotes").',
    z.coerce.number().int().min(10).max(86_400).default(900),
  ),

  MAX_SUBMIT_ATTEMPTS: setting(
    'Attempts per task after proven rejections; a throttle (a retryable 429) counts against `MAX_THROTTLED_SUBMITS` instead.',
    z.coerce.number().int().min(1).max(10).default(3),
  ),
  /**
   * Creates a provider throttled (HTTP 429) before the task fails: a throttle is a wait for the
   * provider's reset, not a rejection of the request (docs/decisions/0057). The task's deadline
   * bounds them too.
   */
  /**
   * A provider model whose daily allowance of creates is spent (Runway's 429 on create) is asked
   * again, by one create, at the next UTC midnight or after this long, whichever comes first:
   * Runway documents a 24-hour window and no reset moment (docs/decisions/0070).
   */
  PROVIDER_CAP_RECHECK_MS: setting(
    "A provider model whose daily allowance of creates is spent (Runway's 429 on create) is asked again by one create at the next UTC midnight or after this long, whichever comes first; meanwhile its tasks wait unsent, bounded by their deadline (docs/decisions/0070).",
    z.coerce.number().int().min(1_000).max(86_400_000).default(900_000),
  ),
  MAX_THROTTLED_SUBMITS: setting(
    "Creates a provider may throttle (HTTP 429) before the task fails: each waits for the provider's reset, and the task's deadline bounds them too (docs/decisions/0057).",
    z.coerce.number().int().min(0).max(1_000).default(20),
  ),
  /**
   * A provider's create quota for this account, creates per second, over the adapter's documented
   * one (capabilities.createsPerSecond; Replicate: 600 a minute): "replicate=20,kling=1". Every
   * worker's submits of that provider share one pace at 0.9 of it (domain/create-pace.ts); a
   * provider with neither figure is not paced.
   */
  PROVIDER_CREATE_QUOTAS: setting(
    "A provider's create quota for this account, creates a second, over its adapter's documented one (Replicate: 600 a minute), e.g. `replicate=20,kling=1`; every worker's submits to that provider share one pace in Postgres at 0.9 of it; a claim the pace holds back waits, holding nothing. A provider with neither is not paced (docs/providers.md \"Create pacing\").",
    csv
      .pipe(
        z
          .array(z.string().regex(/^[a-z0-9-]+=\d+(\.\d+)?$/, 'entries are provider=creates per second, e.g. replicate=10'))
          .refine((entries) => entries.every((e) => Number(e.split('=')[1]) > 0), 'quotas must be above 0'),
      )
      .default([]),
  ),
  /**
   * What one unit of a provider's cost is worth in credits, per unit (domain/provider-cost.ts
   * PROVIDER_COST_UNITS): `ops usage` turns the jobs' costs into credits with it to show a margin.
   */
  PROVIDER_COST_CREDITS: setting(
    "Credits one unit of provider cost is worth, per unit, e.g. `USD=1,runway_credit=0.01` (the default: a credit is one US dollar, and Runway sells API credits at $0.01). `ops usage` shows a margin (charged - cost) only where every job's cost is known and its unit is listed (docs/decisions/0071).",
    csv
      .pipe(
        z
          .array(z.string().regex(/^[A-Za-z_]+=\d{1,12}(\.\d{1,6})?$/, 'entries are unit=credits, e.g. USD=1'))
          .refine(
            (entries) => entries.every((e) => (PROVIDER_COST_UNITS as readonly string[]).includes(e.split('=')[0]!)),
            `units are ${PROVIDER_COST_UNITS.join(', ')}`,
          ),
      )
      .default(['USD=1', 'runway_credit=0.01']),
  ),
  /**
   * A reconciliation lookup that misses proves the job was never created only once the provider
   * has had this long since our submit began (its own processing of a slow request).
   */
  UNKNOWN_PROOF_DELAY_MS: setting(
    'An exact lookup\'s documented miss proves "never created" only this long after the submit began (then a new attempt may start); no provider\'s lookup qualifies today, so every miss proves nothing (docs/providers.md "Proof of absence").',
    ms.default(2 * 60 * 1000),
  ),
  /**
   * The claim stamps the attempt's send-by moment this far ahead: a create not handed to the HTTP
   * client by then is never sent (the attempt is claimed again), and nothing may conclude the
   * attempt sent nothing before it has passed (docs/decisions/0063).
   */
  SUBMIT_SEND_WINDOW_MS: setting(
    'A claimed create not handed to the HTTP client within this of its claim is never sent (the attempt is claimed again); no proof of absence or operator "not-submitted" is accepted before it has passed (docs/decisions/0063). At most 9,000: below the submit activity\'s 10 s heartbeat timeout, so a retry that finds the claim concludes nothing before it has passed.',
    z.coerce.number().int().min(100).max(9_000).default(5_000),
  ),
  UNKNOWN_OUTCOME_DEADLINE_MS: setting(
    'An unknown submit outcome that reconciliation has not resolved by then goes to MANUAL_REVIEW.',
    ms.default(30 * 60 * 1000),
  ),
  /**
   * Re-sends of an unknown create with the same key, per attempt, where the provider refuses a
   * duplicate key (Kling): at most one per poll, never sooner than POLL_INITIAL_MS after the last
   * (activities/resend-unknown.ts). Past them the attempt waits for a lookup hit or the deadline.
   */
  UNKNOWN_RESEND_LIMIT: setting(
    'Times an unknown create is sent again with its own key, per attempt, at a provider that refuses a duplicate key (Kling): at most one per poll, never sooner than `POLL_INITIAL_MS` after the last (docs/providers.md "Proof of absence").',
    z.coerce.number().int().min(0).max(100).default(5),
  ),
  /**
   * One reconciliation lookup (a Replicate list walk of up to 20 pages) gives up after this, well
   * inside the poll activity's 5-minute timeout, so the poll still answers (and the deadline runs).
   */
  RECONCILE_LOOKUP_BUDGET_MS: setting(
    "One reconciliation lookup (a Replicate list walk) gives up after this, inside the poll activity's 5-minute timeout: nothing learned, and the deadline still runs.",
    z.coerce.number().int().min(100).max(240_000).default(60_000),
  ),
  PROVIDER_READ_FAILURE_LIMIT: setting(
    'Consecutive reads of a known job (status, cancel) answered 404/410 or another lasting 4xx before the task goes to MANUAL_REVIEW with the evidence (docs/decisions/0012).',
    z.coerce.number().int().min(1).max(1_000).default(5),
  ),
  PROVIDER_MAX_RUN_MS: setting(
    "A provider's maximum run time over its adapter's (`maxRunMs`: Replicate and Kling 2 h, fal and Runway 6 h), e.g. `replicate=3600000`; a job still in flight (or unreadable) that long after its submit goes to MANUAL_REVIEW.",
    csv.pipe(z.array(z.string().regex(/^[a-z0-9-]+=\d+$/, 'entries are provider=milliseconds, e.g. replicate=7200000'))).default([]),
  ),

  OUTBOX_RELAY_INTERVAL_MS: setting("How often the worker's outbox relay looks for rows to publish.", ms.default(1_000)),
  OUTBOX_RELAY_BATCH: setting('Outbox rows the relay claims at once.', z.coerce.number().int().min(1).max(1000).default(100)),
  /**
   * The worker's relay leaves outbox rows younger than this to the API's fast path (ms, at most a
   * minute). Above API_FAST_PATH_TIMEOUT_MS, so a fast-path start that answers within its timeout
   * is not made a second time by the relay; a start the fast path missed waits this long more.
   * 0: claim at once.
   */
  OUTBOX_RELAY_HOLD_OFF_MS: setting(
    "The worker's relay leaves outbox rows younger than this (at most a minute; 0: claim at once) to the API's fast path. Keep it above `API_FAST_PATH_TIMEOUT_MS` (the worker warns at start when it is not), or both may start the same workflow.",
    ms.max(60_000).default(2_000),
  ),

  OUTBOX_WATERMARK_COUNT: setting(
    'While more outbox rows than this wait unpublished, creates answer `503` + `Retry-After` (automatic narrowing).',
    z.coerce.number().int().min(1).default(10_000),
  ),
  OUTBOX_WATERMARK_AGE_MS: setting(
    'While the oldest unpublished outbox row has waited longer than this, creates answer `503` + `Retry-After`.',
    ms.default(10 * 60 * 1000),
  ),
  CALLBACK_SPOOL_DIR: setting(
    'Where verified callbacks are written while the inbox cannot be (Postgres down, READ_ONLY), to be replayed into it.',
    z.string().min(1).default('.data/spool'),
  ),
  WAKE_SIGNALS_MAX_IN_FLIGHT: setting(
    "Wake signals (after callbacks and slot grants) in flight at once from one process, across tasks; past it a task's wake waits its turn and later wakes of it fold in (`temporal/wakes.ts`).",
    z.coerce.number().int().min(1).default(16),
  ),
  CALLBACK_SPOOL_REPLAY_MS: setting('How often the API replays spooled callbacks into the inbox.', ms.default(2_000)),
  CALLBACK_SPOOL_LEASE_MS: setting(
    'A process renews its spool lease every third of this; once it has not for this long, another process adopts and replays its spool files.',
    ms.default(30_000),
  ),

  // ---- Reconcilers and data lifecycle (docs/runbooks/reconcilers.md) ----
  RECONCILE_SCHEDULES_ENABLED: setting(
    'The worker creates (or updates) the reconciler Schedules at start; a paused one stays paused (docs/runbooks/reconcilers.md).',
    bool.default(true),
  ),
  RECONCILE_OUTBOX_INTERVAL_MS: setting(
    "Interval of the outbox reconciler's Schedule (overlap policy SKIP: a run still going skips the next).",
    z.coerce.number().int().min(1_000).default(60_000),
  ),
  RECONCILE_PROVIDER_INTERVAL_MS: setting(
    "Interval of the provider reconciler's Schedule.",
    z.coerce
      .number()
      .int()
      .min(1_000)
      .default(5 * 60_000),
  ),
  RECONCILE_CALLBACKS_INTERVAL_MS: setting("Interval of the callbacks reconciler's Schedule.", z.coerce.number().int().min(1_000).default(60_000)),
  RECONCILE_OUTPUT_INTERVAL_MS: setting("Interval of the output reconciler's Schedule.", z.coerce.number().int().min(1_000).default(60_000)),
  RECONCILE_BILLING_INTERVAL_MS: setting(
    "Interval of the billing reconciler's Schedule.",
    z.coerce
      .number()
      .int()
      .min(1_000)
      .default(15 * 60_000),
  ),
  RETENTION_INTERVAL_MS: setting(
    "Interval of the retention job's Schedule.",
    z.coerce
      .number()
      .int()
      .min(1_000)
      .default(60 * 60_000),
  ),
  RECONCILE_DEFAULT_INTERVAL_MS: setting(
    'Interval of a reconciler with no setting of its own (one added to `reconcilers/index.ts`).',
    z.coerce
      .number()
      .int()
      .min(1_000)
      .default(15 * 60_000),
  ),
  RECONCILE_BATCH_LIMIT: setting(
    'Rows or tasks per reconciler run; the rest waits for the next run.',
    z.coerce.number().int().min(1).max(100_000).default(500),
  ),
  RECONCILE_GRACE_MS: setting(
    'How long a row or task waits on its normal path (the relay, a wake, a timer) before a reconciler acts on it.',
    ms.default(60_000),
  ),
  RECONCILE_LONG_RUNNING_MS: setting(
    'SUBMITTED or RUNNING this long unchanged counts as long running (the provider reconciler wakes it).',
    ms.default(30 * 60_000),
  ),
  RETENTION_INBOX_DAYS: setting(
    'Processed inbox rows of finished tasks are deleted after this many days (at least 7: longer than any provider redelivers).',
    z.coerce.number().int().min(7).max(3650).default(14),
  ),
  RETENTION_OUTBOX_HOURS: setting(
    'Published outbox rows are deleted after this many hours.',
    z.coerce
      .number()
      .int()
      .min(1)
      .max(24 * 3650)
      .default(24),
  ),
  RETENTION_SPOOL_DEAD_LETTER_DAYS: setting(
    'Spool dead-letter files untouched this many days are deleted (polling re-reads their callbacks).',
    z.coerce.number().int().min(1).max(3650).default(30),
  ),
  RETENTION_RECONCILE_RUN_DAYS: setting(
    'Reconciler runs that changed nothing are deleted after this many days; runs that changed something are kept (they are the audit).',
    z.coerce.number().int().min(1).max(3650).default(7),
  ),
  RETENTION_WEBHOOK_DAYS: setting(
    "Tenant webhook deliveries that ended (delivered, failed, cancelled) and had no attempt for this many days are deleted with their attempts, then events left without deliveries; a delivery target's back-off row untouched this long too. At least 2 (longer than the retry schedule); the delivery log shows this window.",
    z.coerce.number().int().min(2).max(3650).default(30),
  ),
  RETENTION_BATCH: setting('Rows deleted per statement, each its own short transaction.', z.coerce.number().int().min(1).max(100_000).default(1_000)),
  TEMPORAL_NAMESPACE_RETENTION_HOURS: setting(
    'Closed workflow histories kept by Temporal (at least 24); `npm run dev` sets it on its namespaces (what it means for reset and inspection: docs/runbooks/reconcilers.md).',
    z.coerce
      .number()
      .int()
      .min(24)
      .max(24 * 3650)
      .default(72),
  ),

  FENCE_WATCH_ENABLED: setting(
    'Workers stop polling while their region is not active: they LISTEN for fence changes and check every `FENCE_WATCH_INTERVAL_MS`.',
    bool.default(true),
  ),
  FENCE_WATCH_INTERVAL_MS: setting('How often the fence watcher checks besides its LISTEN (a missed NOTIFY costs at most this).', ms.default(1_000)),
  MODE_PAUSE_RETRY_MS: setting('A step paused by the system mode is tried again after this (plus up to 50 % jitter).', ms.default(5_000)),

  OPS_OPERATOR: setting('The operator identity the ops CLI records in `ops_audit`; unset: the OS user.', z.string().min(2).optional()),

  WORKER_METRICS_PORT: setting("The worker's operator listener port (on `OPS_LISTEN_HOST`).", port.default(9464)),
  /**
   * The Temporal SDK's own Prometheus exporter (worker slots, pollers, schedule-to-start, sticky
   * cache), bound to 127.0.0.1 on this port (0: a free one) and served inside the worker's
   * /metrics beside ours, so one scrape sees both.
   */
  WORKER_SDK_METRICS_PORT: setting(
    "The Temporal SDK's own Prometheus exporter, on 127.0.0.1 only (0: a free port); its `temporal_…` series are served inside the worker's `/metrics` beside ours.",
    port.default(0),
  ),
  WORKER_MAX_CONCURRENT_ACTIVITIES: setting('Activity slots per worker process.', z.coerce.number().int().min(1).default(50)),
  WORKER_SHUTDOWN_GRACE_MS: setting(
    'How long a worker stopped with SIGTERM lets running activities finish; give its container at least this to stop.',
    ms.default(30_000),
  ),
  WORKER_VERSIONING: setting(
    'Worker Versioning (docs/deploy.md): the worker polls as version `WORKER_DEPLOYMENT_NAME`/`WORKER_BUILD_ID` and gets tasks only once that version is current or ramping (`npm run ops -- deploy`); a workflow stays on the build that started it (docs/decisions/0073). Off: every worker takes every task.',
    bool.default(false),
  ),
  WORKER_DEPLOYMENT_NAME: setting(
    'The Worker Deployment the worker belongs to (`WORKER_VERSIONING`).',
    z
      .string()
      .regex(/^[A-Za-z0-9._-]{1,200}$/, 'letters, digits, ".", "_" and "-" only')
      .default('vidorch'),
  ),
  WORKER_BUILD_ID: setting(
    "The worker's build id (`WORKER_VERSIONING`); unset: the build's own (`dist/build-id`, the package version and a hash of the worker and its workflow bundles, written by `npm run build`), `dev` from sources.",
    z
      .string()
      .regex(/^[A-Za-z0-9._+-]{1,200}$/, 'letters, digits, ".", "_", "+" and "-" only')
      .optional()
      .or(z.literal('').transform(() => undefined)),
  ),
  /**
   * Workflows kept in the worker's sticky cache (0 = none: every workflow task replays its
   * history). The SDK's default (~60 % of the heap limit in MiB, ≈ 2,300 here) lets thousands
   * of waiting tasks hold memory; docs/performance.md has the measured choice.
   */
  WORKER_MAX_CACHED_WORKFLOWS: setting(
    'Workflows kept in the worker\'s sticky cache (0: none; every workflow task replays its history) (docs/performance.md "Tuning knobs").',
    z.coerce.number().int().min(0).default(500),
  ),
  /**
   * V8's old-generation growing factor in the worker process, as 1 + percent / 100 (0: V8's own,
   * up to 4 ×): after a burst of work the main heap otherwise stays at its burst size, garbage
   * included, while tasks wait (docs/performance.md "Tuning knobs").
   */
  WORKER_HEAP_GROWING_PERCENT: setting(
    'V8\'s old-generation growing factor in the worker process, as 1 + percent / 100 (0: V8\'s own, up to 4 ×), set by `workers/main.ts` (docs/performance.md "Tuning knobs").',
    z.coerce.number().int().min(0).max(300).default(20),
  ),
  /**
   * Node's Buffer pool in the worker process, bytes (0: Node's own, 64 KiB since 24.22). The
   * Temporal SDK keeps each cached run's last activation completion, a small slice of a pool
   * chunk, so every cached run can pin a whole chunk (docs/decisions/0053-worker-buffer-pool.md).
   */
  WORKER_BUFFER_POOL_BYTES: setting(
    "Node's `Buffer.poolSize` in the worker process (0: Node's own, 64 KiB): the Temporal SDK keeps one small completion per cached run, each pinning a pool chunk (docs/decisions/0053-worker-buffer-pool.md).",
    z.coerce.number().int().min(0).max(1_048_576).default(8_192),
  ),
  WORKER_MAX_CONCURRENT_WORKFLOW_TASKS: setting(
    'Workflow tasks run at once (the SDK default; at most the cache size).',
    z.coerce.number().int().min(2).default(40),
  ),
  WORKER_WORKFLOW_TASK_POLLERS: setting(
    'Long polls kept open per task queue for workflow tasks (the SDK default).',
    z.coerce.number().int().min(1).max(100).default(10),
  ),
  WORKER_ACTIVITY_TASK_POLLERS: setting(
    'Long polls kept open per task queue for activity tasks (the SDK default).',
    z.coerce.number().int().min(1).max(100).default(10),
  ),

  SIMULATOR_PORT: setting("The provider simulator's port (`npm run simulator`; docs/providers.md).", port.default(7081)),
  SIMULATOR_GENERATION_MS: setting('How long a simulated generation takes.', ms.default(3_000)),
  SIMULATOR_DATA_DIR: setting('Where the simulator keeps its generated sample videos.', z.string().min(1).default('.data/simulator')),
  SIMULATOR_OUTPUT_TTL_MS: setting("How long the simulator's output URLs stay valid.", ms.default(60 * 60 * 1000)),
  SIMULATOR_FAL_RESULT_RETENTION_MS: setting(
    "How long the simulated fal keeps a completed request's result (at most 6 min for one of 10 KB or more, as fal does), then answers 404.",
    ms.default(60 * 60 * 1000),
  ),
  SIMULATOR_REPLICATE_RATE_LIMITS: setting(
    "The simulated Replicate account's request limits, `creates,others` a minute (the documented 600 and 3,000), or `off`; over them a 429 with the documented throttle body.",
    z
      .string()
      .regex(/^(off|[1-9]\d*,[1-9]\d*)$/, 'expected "off" or "creates,others" a minute, e.g. 600,3000')
      .default('600,3000'),
  ),
  SIMULATOR_KLING_VISIBLE_AFTER_MS: setting(
    'The simulated Kling serves a new task (get by id or `external_task_id`, the list) only this long after its create, as Kling promises no read-after-write; its key is taken at once (fault knob `kling_visible_after_ms`).',
    ms.default(0),
  ),
  SIMULATOR_KLING_NOT_FOUND: setting(
    'What the simulated Kling answers a get of an id it does not serve: `404-1203`, or `400-1201` as the live API answered an unknown task id (fault knob `kling_not_found`).',
    z.enum(['404-1203', '400-1201']).default('404-1203'),
  ),

  // ---- Callback and fetch hardening (docs/security.md) ----
  BROWSER_TOKEN_SECRET: setting(
    'Key that signs browser tokens (`POST /v1/tokens`, docs/decisions/0077-browser-tokens.md), at least 32 characters. Changing it ends every token at once.',
    secret(z.string().min(32, 'at least 32 characters'), DEV_BROWSER_TOKEN_SECRET),
  ),
  BROWSER_TOKEN_MAX_TTL_SECONDS: setting(
    'Longest life of a browser token; a mint asks for at most this (default 15 minutes).',
    z.coerce.number().int().min(60).max(86_400).default(900),
  ),
  CORS_ALLOWED_ORIGINS: setting(
    'Origins (comma-separated, e.g. `https://app.example.com`) whose pages may call the read routes a browser token may call (CORS); empty: none.',
    z.string().default(''),
  ),
  CALLBACK_TOKEN_SECRET: setting(
    'Key of the callback URL tokens (docs/decisions/0016), at least 32 characters. To change it, list the old value in `CALLBACK_TOKEN_SECRET_PREVIOUS` (docs/security.md "Rotating the callback token secret").',
    secret(z.string().min(32, 'at least 32 characters'), DEV_CALLBACK_TOKEN_SECRET),
  ),
  /**
   * Retired values of CALLBACK_TOKEN_SECRET, comma-separated: the API still accepts the callback
   * URLs minted under them (never mints), so the secret rotates without orphaning the URLs of
   * attempts in flight (docs/security.md "Rotating the callback token secret").
   */
  CALLBACK_TOKEN_SECRET_PREVIOUS: setting(
    'Retired `CALLBACK_TOKEN_SECRET` values, comma-separated (at most 10): the API still accepts callback URLs minted under them, never mints; empty again once the jobs of those URLs have ended.',
    unsafeInProduction(csv.pipe(z.array(z.string().min(32, 'each at least 32 characters')).max(10, 'at most 10 retired secrets')).default([]), (v) =>
      csvItems(v).includes(DEV_CALLBACK_TOKEN_SECRET) ? 'the dev CALLBACK_TOKEN_SECRET is refused in production, as a retired secret too' : null,
    ),
  ),
  PROVIDER_FAL_USER_ID: setting(
    "Our fal account's user id: webhooks signed for any other fal user are refused, as fal's keys are shared by all its customers (docs/security.md).",
    secret(z.string().min(1), 'sim-fal-user'),
  ),
  CALLBACK_RATE_PER_TOKEN_PER_MINUTE: setting(
    'Callbacks a minute per callback URL (shared through Redis; without it each API allows rate / `API_INSTANCES`); over it `429` + `Retry-After`.',
    z.coerce.number().int().min(1).default(30),
  ),
  CALLBACK_RATE_PER_SOURCE_PER_MINUTE: setting('Callbacks a minute per source address, shared the same way.', z.coerce.number().int().min(1).default(6_000)),
  CALLBACK_SPOOL_MAX_BYTES: setting(
    "The callback spool's size cap across its files; past it callbacks answer `503` + `Retry-After`.",
    z.coerce
      .number()
      .int()
      .min(1024)
      .default(256 * 1024 * 1024),
  ),

  // ---- Tenant webhooks (docs/webhooks.md, docs/decisions/0018) ----
  WEBHOOK_ALLOW_PRIVATE: setting(
    'Allow http and loopback/private webhook URLs (a receiver on this machine; `npm run dev` and the tests turn it on); refused in production. Otherwise https to a public host, its addresses checked at connect time.',
    refusedInProduction(bool.default(false), ['true', '1', 'yes'], 'true is refused in production (it allows http and loopback/private webhook URLs)'),
  ),
  WEBHOOK_SECRET_KEY: setting(
    'Seals the endpoints\' signing secrets at rest (AES-256-GCM; docs/decisions/0018), at least 32 characters. To change it, list the old value in `WEBHOOK_SECRET_KEY_PREVIOUS` and run `ops webhook reseal` (docs/webhooks.md "Rotating the sealing key").',
    secret(z.string().min(32, 'at least 32 characters'), DEV_WEBHOOK_SECRET_KEY),
  ),
  /**
   * Retired values of WEBHOOK_SECRET_KEY, comma-separated: they still open the secrets sealed
   * under them (never seal), so the key rotates without a flag day (docs/webhooks.md "Rotating
   * the sealing key"). Empty once `ops webhook reseal` has run.
   */
  WEBHOOK_SECRET_KEY_PREVIOUS: setting(
    'Retired `WEBHOOK_SECRET_KEY` values, comma-separated (at most 10): they still open secrets sealed under them, never seal; empty again once `ops webhook reseal` has run.',
    unsafeInProduction(csv.pipe(z.array(z.string().min(32, 'each at least 32 characters')).max(10, 'at most 10 retired keys')).default([]), (v) =>
      csvItems(v).includes(DEV_WEBHOOK_SECRET_KEY) ? 'the dev WEBHOOK_SECRET_KEY is refused in production, as a retired key too' : null,
    ),
  ),
  WEBHOOK_RETRY_SCHEDULE_MS: setting(
    "Delays before the delivery attempts, ms, comma-separated, from the first attempt on (Svix's schedule: at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h); after the last the delivery is `failed`.",
    csv
      .pipe(z.array(z.string().regex(/^\d+$/, 'entries are milliseconds')).min(1, 'at least one attempt').max(50))
      .transform((v) => v.map(Number))
      .default([0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]),
  ),
  WEBHOOK_ATTEMPT_TIMEOUT_MS: setting(
    'One delivery attempt (connect, send, answer) gives up after this.',
    z.coerce.number().int().min(100).max(60_000).default(15_000),
  ),
  WEBHOOK_RESPONSE_MAX_BYTES: setting(
    "Bytes of a receiver's answer read (the first 512 kept in the attempt log); the rest is discarded.",
    z.coerce
      .number()
      .int()
      .min(0)
      .max(1024 * 1024)
      .default(4_096),
  ),
  WEBHOOK_ENDPOINT_CONCURRENCY: setting('Attempts in flight at once to one endpoint, across every worker.', z.coerce.number().int().min(1).max(100).default(4)),
  WEBHOOK_RELAY_MAX_IN_FLIGHT: setting('Attempts in flight at once per worker process.', z.coerce.number().int().min(1).max(10_000).default(64)),
  WEBHOOK_TENANT_CONCURRENCY: setting(
    "Attempts in flight at once for one tenant, across every worker and all its endpoints and tasks' URLs; keep it below `WEBHOOK_RELAY_MAX_IN_FLIGHT`, so no tenant can hold a worker's every slot.",
    z.coerce.number().int().min(1).max(10_000).default(16),
  ),
  WEBHOOK_RELAY_CLAIM_PER_TENANT: setting(
    'Deliveries one relay pass claims for one tenant at most; tenants take turns, so one with a backlog delays another by a pass at most.',
    z.coerce.number().int().min(1).max(1_000).default(4),
  ),
  WEBHOOK_TIMEOUT_BACKOFF_MS: setting(
    'A target (endpoint, or a task URL origin) whose attempt timed out gets no attempt for this long, doubled for each round of timeouts in a row, up to `WEBHOOK_TIMEOUT_BACKOFF_MAX_MS`; an answered attempt ends it.',
    z.coerce.number().int().min(0).default(30_000),
  ),
  WEBHOOK_TIMEOUT_BACKOFF_MAX_MS: setting('The longest back-off of a target whose attempts keep timing out.', z.coerce.number().int().min(0).default(600_000)),
  WEBHOOK_RELAY_RATE_PER_SECOND: setting(
    'Attempts started a second per worker process at most (the drain after `DEGRADED_NOTIFY` lifts, or after an outage).',
    z.coerce.number().int().min(1).max(100_000).default(50),
  ),
  WEBHOOK_RELAY_INTERVAL_MS: setting('How often the webhook relay looks for due deliveries.', z.coerce.number().int().min(10).default(500)),
  WEBHOOK_DISABLE_AFTER_MS: setting(
    'An endpoint whose every attempt has failed for this long is disabled, with a needs-attention record for its tenant.',
    z.coerce
      .number()
      .int()
      .min(1_000)
      .default(5 * 86_400_000),
  ),
  WEBHOOK_SECRET_OVERLAP_MS: setting(
    'After rotate-secret, the old secret keeps signing beside the new one this long (at most 7 days).',
    z.coerce
      .number()
      .int()
      .min(0)
      .max(7 * 86_400_000)
      .default(86_400_000),
  ),
  WEBHOOK_MAX_ENDPOINTS_PER_TENANT: setting('Webhook endpoints per tenant.', z.coerce.number().int().min(1).max(1_000).default(20)),
  WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT: setting(
    "Origins (scheme, host, port) of tasks' own `webhook_url`s in use per tenant (open tasks and pending deliveries); a create naming one more is a `400` naming `webhook_url`.",
    z.coerce.number().int().min(1).max(1_000).default(10),
  ),

  DEMO_API_KEY: setting(
    'API key of the demo tenant that `npm run dev` seeds; unset: generated and kept in `.data/dev/demo-api-key`.',
    z.string().min(24).optional(),
  ),
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
 * naming each bad field. Under the production profile (unless VIDORCH_ENV says development or
 * test; config/profile.ts profileOf) no dev value fills in, and every unset, dev or unsafe setting is named (config/profile.ts).
 */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const production = profileOf(env) === 'production';
  const refused = production ? [...productionProblems(envSchema.shape, env), ...opsListenerProblems(env)] : [];
  const result = envSchema.safeParse(production ? env : withDevValues(envSchema.shape, env));
  const named = new Set(refused.map((p) => p.field));
  const parsed = result.success
    ? [...timeoutProblems(result.data), ...pollQuotaProblems(result.data), ...connectionProblems(result.data, production)]
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
  if (!host.success || env['OPS_BEARER_TOKEN'] || isLoopbackHost(host.data)) return [];
  return [{ field: 'OPS_BEARER_TOKEN', message: `required in production when OPS_LISTEN_HOST (${host.data}) is not loopback` }];
}

/** The operator listener's settings alone, for the containers' health probe (ops/healthcheck.ts), which needs no secret. */
export function loadOpsListenerSettings(env: Record<string, string | undefined> = process.env) {
  return envSchema.pick({ OPS_LISTEN_HOST: true, OPS_PORT: true, WORKER_METRICS_PORT: true, OPS_BEARER_TOKEN: true }).parse(env);
}

/** For process entry points: parse or print the field errors and exit(2). */
export function loadConfigOrExit(): Config {
  try {
    return loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      for (const issue of err.issues) console.error(`config: ${issue.field}: ${issue.message}`);
      if (isImplicitProduction(process.env)) {
        console.error(
          'config: VIDORCH_ENV: unset, so the production profile applies; VIDORCH_ENV=development runs against the local stack (README "Deploying")',
        );
      }
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
