// The webhook relay (docs/webhooks.md, docs/decisions/0018-tenant-webhooks.md): sends the
// deliveries that task transitions recorded (the trigger on task_transition), apart from the
// task's own progress: a slow or dead receiver costs only its own endpoint's slots.
//
// Each pass: read the fence (region active? mode lets notifications out?), count the backlog,
// then claim due deliveries (db/webhooks.ts claimDueDeliveries: tenants in turn from where the
// last pass stopped, at most WEBHOOK_RELAY_CLAIM_PER_TENANT each; FOR UPDATE SKIP LOCKED, a
// lease, at most WEBHOOK_TENANT_CONCURRENCY in flight per tenant and WEBHOOK_ENDPOINT_CONCURRENCY
// per target across every relay; targets backing off after a timeout left out) within this
// process's in-flight cap and rate, and send each one on its own (not awaited by the pass), so
// the next pass claims for other tenants while a slow one times out. Every attempt is recorded
// with what follows it (the Svix-like schedule, domain/webhook-schedule.ts) and, when it timed
// out, its target's back-off.
import type { Agent } from 'undici';
import type { Db } from '../db/client';
import { acquireFence, FenceRejectedError, type FenceToken } from '../db/fence';
import { signingSecrets, type SecretBox } from '../db/webhook-secrets';
import {
  claimDueDeliveries,
  notifyBacklog,
  recordAttempt,
  taskUrlSigningEndpoint,
  type AttemptNext,
  type ClaimedDelivery,
  type TimeoutBackoff,
} from '../db/webhooks';
import { policyFor } from '../domain/modes';
import { afterFailure } from '../domain/webhook-schedule';
import { webhookIdOf } from '../domain/webhook-id';
import type { Logger } from '../observability/logger';
import { createSafeDispatcher } from '../net/safe-fetch';
import { sendWebhook, type AttemptOutcome } from '../net/webhook-send';

export interface WebhookRelaySettings {
  /** Delay before each attempt (WEBHOOK_RETRY_SCHEDULE_MS). */
  readonly schedule: readonly number[];
  readonly attemptTimeoutMs: number;
  readonly responseMaxBytes: number;
  readonly perEndpoint: number;
  /** In flight per tenant across every relay (WEBHOOK_TENANT_CONCURRENCY). */
  readonly perTenant: number;
  /** Claimed per tenant per pass (WEBHOOK_RELAY_CLAIM_PER_TENANT). */
  readonly claimPerTenant: number;
  /** A timed-out target's back-off (WEBHOOK_TIMEOUT_BACKOFF_MS, WEBHOOK_TIMEOUT_BACKOFF_MAX_MS). */
  readonly timeoutBackoff: TimeoutBackoff;
  readonly maxInFlight: number;
  readonly ratePerSecond: number;
  readonly intervalMs: number;
  readonly disableAfterMs: number;
  /** WEBHOOK_ALLOW_PRIVATE: http and loopback receivers (dev and tests only); never private or link-local ones. */
  readonly allowLoopback: boolean;
}

export interface WebhookRelayOptions {
  readonly db: Db;
  readonly fence: { readonly scope: string; readonly region: string };
  readonly secrets: SecretBox;
  /** Links in payloads point here (PUBLIC_BASE_URL). */
  readonly publicBaseUrl: string;
  readonly logger: Logger;
  readonly settings: WebhookRelaySettings;
  /**
   * What followed each attempt; `unrecorded`: it was sent but recording it failed, so it is sent
   * again when its lease expires; `not_sent`: it could not be made, because the endpoint's signing
   * secrets could not be read (Postgres) or opened (a secret sealed under a key this worker does
   * not hold: WEBHOOK_SECRET_KEY rotated without WEBHOOK_SECRET_KEY_PREVIOUS). Either way the
   * delivery stays pending and is claimed again when its lease expires (vidorch_webhook_attempts_total:
   * a delivery that can never be sent or recorded shows as a steady rate of these, not as silence).
   */
  readonly onAttempt?: (outcome: 'delivered' | 'retry' | 'failed' | 'unrecorded' | 'not_sent') => void;
}

export interface NotifyBacklog {
  readonly count: number;
  readonly oldestSeconds: number;
  /** True while the mode holds deliveries back. */
  readonly paused: boolean;
}

export interface WebhookRelay {
  /** The backlog as the last pass counted it. */
  backlog(): NotifyBacklog;
  stop(): Promise<void>;
}

/**
 * The JSON body of an event: Standard Webhooks' type / timestamp / data, with a link to the task
 * (a tenant's own event, tenant.budget_threshold, links its budgets).
 */
export function eventBody(d: Pick<ClaimedDelivery, 'event_type' | 'event_created_at' | 'data'>, publicBaseUrl: string): string {
  const taskId = d.data['task_id'];
  const links = typeof taskId === 'string' ? { task: `${publicBaseUrl}/v1/tasks/${taskId}` } : { budget: `${publicBaseUrl}/v1/budget` };
  return JSON.stringify({ type: d.event_type, timestamp: d.event_created_at.toISOString(), data: { ...d.data, links } });
}

const BACKLOG_COUNT_EVERY_MS = 1_000;

export function startWebhookRelay(opts: WebhookRelayOptions): WebhookRelay {
  const s = opts.settings;
  const dispatcher: Agent = createSafeDispatcher({ allowPrivate: false, allowLoopback: s.allowLoopback });
  const inFlight = new Set<Promise<void>>();
  const leaseMs = s.attemptTimeoutMs + 30_000;
  let last: NotifyBacklog = { count: 0, oldestSeconds: 0, paused: false };
  let countedAt = 0;
  let kick: () => void = () => undefined;
  let tokens = s.ratePerSecond;
  let refilledAt = Date.now();
  let stopped = false;
  /** Where the last pass's turn of tenants stopped (this process's own rotation). */
  let lastTenant: string | null = null;
  // One pass at a time: `again` asks for one more right after the running one (runPass below).
  let passing = false;
  let again = false;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> = Promise.resolve();

  const refill = () => {
    const now = Date.now();
    tokens = Math.min(s.ratePerSecond, tokens + ((now - refilledAt) / 1000) * s.ratePerSecond);
    refilledAt = now;
  };

  async function secretsFor(d: ClaimedDelivery): Promise<string[]> {
    const endpointId = d.endpoint_id ?? (await taskUrlSigningEndpoint(opts.db, d.tenant_id));
    if (!endpointId) return [];
    const { secrets, unopenable } = await signingSecrets(opts.db, opts.secrets, endpointId);
    // Signed with the secrets that open; the others are named so an operator can reseal or retire them.
    if (unopenable.length > 0)
      opts.logger.warn({ endpointId, tenantId: d.tenant_id, secretIds: unopenable }, 'webhook secrets open under no configured key; signed without them');
    return secrets;
  }

  async function deliver(token: FenceToken, d: ClaimedDelivery): Promise<void> {
    const startedAt = new Date();
    let outcome: AttemptOutcome;
    try {
      outcome = await sendWebhook(
        { url: d.url, webhookId: webhookIdOf(d.event_id), timestamp: startedAt, body: eventBody(d, opts.publicBaseUrl), secrets: await secretsFor(d) },
        { dispatcher, allowLoopback: s.allowLoopback, timeoutMs: s.attemptTimeoutMs, maxResponseBytes: s.responseMaxBytes },
      );
    } catch (err) {
      // The secrets could not be read or opened: nothing was sent, so nothing is recorded against
      // the delivery's schedule; the lease expires and it is tried again, counted each time.
      opts.onAttempt?.('not_sent');
      opts.logger.warn({ err, deliveryId: d.delivery_id, endpointId: d.endpoint_id, tenantId: d.tenant_id }, 'webhook attempt not made');
      return;
    }
    const next: AttemptNext = outcome.ok
      ? { kind: 'delivered' }
      : (() => {
          const f = afterFailure(s.schedule, d.schedule_step);
          return f.kind === 'exhausted' ? { kind: 'failed' as const } : f;
        })();
    const { disabledEndpoint } = await recordAttempt(
      opts.db,
      token,
      d,
      {
        url: d.url,
        startedAt,
        ok: outcome.ok,
        status: outcome.status,
        latencyMs: outcome.latencyMs,
        error: outcome.error,
        excerpt: outcome.excerpt,
        timedOut: outcome.timedOut,
      },
      next,
      { disableAfterMs: s.disableAfterMs, timeoutBackoff: s.timeoutBackoff },
    );
    opts.onAttempt?.(next.kind);
    if (outcome.detail) opts.logger.warn({ deliveryId: d.delivery_id, tenantId: d.tenant_id, detail: outcome.detail }, 'webhook attempt refused');
    if (disabledEndpoint) opts.logger.warn({ endpointId: d.endpoint_id, tenantId: d.tenant_id }, 'webhook endpoint disabled after failing too long');
    if (next.kind === 'failed')
      opts.logger.warn({ deliveryId: d.delivery_id, tenantId: d.tenant_id, error: outcome.error }, 'webhook delivery failed for good');
  }

  async function pass(): Promise<void> {
    let token: FenceToken;
    let fence;
    try {
      ({ token, state: fence } = await acquireFence(opts.db, opts.fence.scope, opts.fence.region));
    } catch (err) {
      if (err instanceof FenceRejectedError) return;
      throw err;
    }
    const paused = !policyFor(fence.mode).notify;
    // The count scans the pending rows: once a second is enough for a gauge.
    if (Date.now() - countedAt >= BACKLOG_COUNT_EVERY_MS || paused !== last.paused) {
      countedAt = Date.now();
      last = { ...(await notifyBacklog(opts.db)), paused };
    }
    if (paused) return;
    refill();
    const limit = Math.min(s.maxInFlight - inFlight.size, Math.floor(tokens));
    if (limit <= 0) return;
    const claim = await claimDueDeliveries(opts.db, token, {
      limit,
      perTarget: s.perEndpoint,
      perTenant: s.perTenant,
      perTenantPass: s.claimPerTenant,
      leaseMs,
      afterTenant: lastTenant,
    }).catch((err: unknown) => {
      if (err instanceof FenceRejectedError) return null;
      throw err;
    });
    if (!claim) return;
    const { claimed } = claim;
    lastTenant = claim.lastTenant;
    tokens -= claimed.length;
    // Tenants' turns ended with due deliveries left and this process has room: go round again now.
    if (claim.more && claimed.length > 0 && claimed.length < limit) again = true;
    for (const d of claimed) {
      const p: Promise<void> = deliver(token, d)
        .catch((err: unknown) => {
          // Fenced off: the active region's relay sends it; anything else is counted.
          if (!(err instanceof FenceRejectedError)) opts.onAttempt?.('unrecorded');
          opts.logger.warn({ err, deliveryId: d.delivery_id }, 'webhook attempt could not be recorded; its lease will expire and it is tried again');
        })
        .finally(() => {
          inFlight.delete(p);
          kick();
        });
      inFlight.add(p);
    }
  }

  // One pass at a time; a kick during a pass runs one more right after it. An attempt that ends
  // kicks, so a busy endpoint's freed slot is refilled at once rather than at the next tick
  // (otherwise one endpoint could get at most cap / interval attempts per second).
  const runPass = () => {
    if (stopped) return;
    if (passing) {
      again = true;
      return;
    }
    passing = true;
    running = pass()
      .catch((err: unknown) => {
        opts.logger.warn({ err }, 'webhook relay pass failed');
      })
      .finally(() => {
        passing = false;
        if (again) {
          again = false;
          runPass();
        }
      });
  };
  kick = runPass;
  const tick = () => {
    runPass();
    if (!stopped) timer = setTimeout(tick, s.intervalMs);
  };
  tick();

  return {
    backlog: () => last,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
      while (passing) await running;
      // Attempts in flight end within their timeout; each records itself.
      await Promise.allSettled([...inFlight]);
      await dispatcher.close();
    },
  };
}

/** The relay's settings from config (workers/main.ts and the test worker). */
export function webhookRelaySettings(config: {
  WEBHOOK_RETRY_SCHEDULE_MS: number[];
  WEBHOOK_ATTEMPT_TIMEOUT_MS: number;
  WEBHOOK_RESPONSE_MAX_BYTES: number;
  WEBHOOK_ENDPOINT_CONCURRENCY: number;
  WEBHOOK_TENANT_CONCURRENCY: number;
  WEBHOOK_RELAY_CLAIM_PER_TENANT: number;
  WEBHOOK_TIMEOUT_BACKOFF_MS: number;
  WEBHOOK_TIMEOUT_BACKOFF_MAX_MS: number;
  WEBHOOK_RELAY_MAX_IN_FLIGHT: number;
  WEBHOOK_RELAY_RATE_PER_SECOND: number;
  WEBHOOK_RELAY_INTERVAL_MS: number;
  WEBHOOK_DISABLE_AFTER_MS: number;
  WEBHOOK_ALLOW_PRIVATE: boolean;
}): WebhookRelaySettings {
  return {
    schedule: config.WEBHOOK_RETRY_SCHEDULE_MS,
    attemptTimeoutMs: config.WEBHOOK_ATTEMPT_TIMEOUT_MS,
    responseMaxBytes: config.WEBHOOK_RESPONSE_MAX_BYTES,
    perEndpoint: config.WEBHOOK_ENDPOINT_CONCURRENCY,
    perTenant: config.WEBHOOK_TENANT_CONCURRENCY,
    claimPerTenant: config.WEBHOOK_RELAY_CLAIM_PER_TENANT,
    timeoutBackoff: { baseMs: config.WEBHOOK_TIMEOUT_BACKOFF_MS, maxMs: config.WEBHOOK_TIMEOUT_BACKOFF_MAX_MS },
    maxInFlight: config.WEBHOOK_RELAY_MAX_IN_FLIGHT,
    ratePerSecond: config.WEBHOOK_RELAY_RATE_PER_SECOND,
    intervalMs: config.WEBHOOK_RELAY_INTERVAL_MS,
    disableAfterMs: config.WEBHOOK_DISABLE_AFTER_MS,
    allowLoopback: config.WEBHOOK_ALLOW_PRIVATE,
  };
}
