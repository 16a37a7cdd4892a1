// What each system mode allows (docs/design.md §7, docs/modes.md). One table, read
// by the API's admission, by the activities (fenced steps and the submit gate), by the ops CLI
// and by the test that keeps docs/modes.md in step with it. Pure: no I/O.
import type { SystemMode } from './states';

/** Where a verified provider callback goes. */
export type CallbackRoute = 'inbox' | 'spool';

export interface ModePolicy {
  /** POST /v1/tasks admits new paid work. */
  readonly create: boolean;
  /** GET /v1/tasks[/:id] answers. */
  readonly read: boolean;
  /** POST /v1/tasks/:id/cancel records a cancel (a fact write that never adds cost). */
  readonly cancel: boolean;
  /** A verified callback is written to the inbox, or to the local fallback spool (replayed later). */
  readonly callback: CallbackRoute;
  /** Workflow steps may write facts: dispatch, apply inbox, poll, rescue, media, settle, escalate. */
  readonly factWrites: boolean;
  /** A new provider job may be started: DISPATCHING → SUBMITTING and the submit call itself. */
  readonly submit: boolean;
  /**
   * Which providers take new submits (when `submit` allows any): 'breaker' = each provider's
   * circuit breaker decides, probing a tripped provider after its cool-down; 'healthy' = only
   * providers whose breaker is closed: it trips at a lower failure rate and sends no probes
   * (activities/provider-guard.ts).
   */
  readonly providers: ProviderGate;
  /**
   * Tenant webhook deliveries are sent. Off from DEGRADED_NOTIFY down: events are still recorded
   * with their transitions and kept, counted (vidorch_notify_backlog), and sent once a mode
   * allows it again (workers/webhook-relay.ts).
   */
  readonly notify: boolean;
  /**
   * Live event streams (docs/events.md) push progress and transitions. False: a stream says
   * `degraded` with a poll hint and closes; clients poll GET /v1/tasks/:id or reconnect later
   * with Last-Event-ID, missing nothing (the transitions stay in Postgres).
   */
  readonly liveEvents: boolean;
}

export type ProviderGate = 'breaker' | 'healthy';

const open: ModePolicy = {
  create: true,
  read: true,
  cancel: true,
  callback: 'inbox',
  factWrites: true,
  submit: true,
  providers: 'breaker',
  notify: true,
  liveEvents: true,
};
/** Every mode from DEGRADED_NOTIFY down pushes nothing: realtime progress and tenant webhooks are shed first (docs/design.md §7). */
const quiet: ModePolicy = { ...open, notify: false, liveEvents: false };

export const MODE_POLICIES: Readonly<Record<SystemMode, ModePolicy>> = {
  NORMAL: open,
  // No push to tenants: webhook deliveries wait (kept and counted), event streams tell clients to poll; everything else as NORMAL.
  DEGRADED_NOTIFY: quiet,
  // Unhealthy providers closed: a stricter breaker, no probes of a tripped provider.
  DEGRADED_PROVIDER: { ...quiet, providers: 'healthy' },
  // Accept and persist; no new provider cost. Accepted tasks wait in DISPATCHING.
  QUEUE_ONLY: { ...quiet, submit: false },
  // No new cost at all; converge what was accepted: polls, callbacks, rescue, settlement.
  RECONCILE_ONLY: { ...quiet, create: false, submit: false },
  // Only viewing. Callbacks are kept in the spool, not lost.
  READ_ONLY: {
    create: false,
    read: true,
    cancel: false,
    callback: 'spool',
    factWrites: false,
    submit: false,
    providers: 'breaker',
    notify: false,
    liveEvents: false,
  },
  // The fact source cannot be read safely: stop serving, keep callbacks in the spool.
  MAINTENANCE: {
    create: false,
    read: false,
    cancel: false,
    callback: 'spool',
    factWrites: false,
    submit: false,
    providers: 'breaker',
    notify: false,
    liveEvents: false,
  },
};

export const policyFor = (mode: SystemMode): ModePolicy => MODE_POLICIES[mode];

export type ModeAction = Exclude<keyof ModePolicy, 'callback' | 'providers' | 'liveEvents'>;

/** Null when `mode` allows `action`, else a sentence saying why not (for problems and failures). */
export function modeForbids(mode: SystemMode, action: ModeAction): string | null {
  if (MODE_POLICIES[mode][action]) return null;
  const what: Record<ModeAction, string> = {
    create: 'new tasks are not admitted',
    read: 'task reads are paused',
    cancel: 'cancels are paused',
    factWrites: 'task facts are read-only',
    submit: 'no new provider jobs are started',
    notify: 'webhook deliveries are paused (kept, and sent when the mode allows)',
  };
  return `system mode is ${mode}: ${what[action]}`;
}
