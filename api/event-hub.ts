// One LISTEN connection per API process, fanned out in memory to the open event streams
// (docs/events.md, docs/decisions/0021-event-notify.md). The trigger on task_transition (and on
// task_attempt.progress) NOTIFYs vidorch_task_events with ids only; the fence channel says the
// mode may have changed. A NOTIFY only wakes: every stream then re-reads Postgres from its own
// position, so a NOTIFY lost with a dropped connection loses nothing — on reconnect, and every
// EVENTS_RESYNC_MS anyway, every stream re-reads. The pattern is workers/fence-watcher.ts's.
// The same connection hears API key changes (API_KEYS_CHANNEL): the key lookup cache and the
// streams of a revoked key (api/api-keys.ts) act on them.
import type pg from 'pg';
import { discardClient, listenClients, type DatabaseHost } from '../db/client';
import { FENCE_CHANNEL } from '../db/modes';
import { API_KEYS_CHANNEL } from '../db/tenants';
import type { Logger } from '../observability/logger';

export const TASK_EVENTS_CHANNEL = 'vidorch_task_events';

/** Why a stream is woken: a transition or progress of its task (or tenant), a resync, or a fence change. */
export type Wake = { readonly kind: 'transition' | 'progress'; readonly taskId: string } | { readonly kind: 'resync' } | { readonly kind: 'fence' };
export type WakeListener = (wake: Wake) => void;

/**
 * An API key change (db/tenants.ts), or `connected`: the LISTEN connection was (re)established,
 * so changes made while it was down were not heard.
 */
export type KeyNotice =
  { readonly kind: 'revoked'; readonly keyId: string; readonly revokedAt: Date } | { readonly kind: 'issued' } | { readonly kind: 'connected' };
export type KeyListener = (notice: KeyNotice) => void;

export interface EventHub {
  /** Wakes `listener` for every event of the task, every resync and fence change. Returns the unsubscribe. */
  watchTask(taskId: string, listener: WakeListener): () => void;
  /** The same for every task of the tenant. */
  watchTenant(tenantId: string, listener: WakeListener): () => void;
  /** Tells `listener` of every API key change and every (re)connect. Returns the unsubscribe. */
  watchKeys(listener: KeyListener): () => void;
  /** True while the LISTEN connection is up. */
  listening(): boolean;
  /** Times the LISTEN connection was (re)established. */
  connects(): number;
  stop(): Promise<void>;
}

export interface EventHubOptions {
  /** For the LISTEN connection (a pooled connection cannot hold a LISTEN). */
  readonly databaseUrl: string;
  /** DATABASE_FAILOVER_HOSTS: the LISTEN connection follows a switchover like the pool (docs/decisions/0030). */
  readonly failoverHosts?: readonly DatabaseHost[];
  readonly resyncMs: number;
  readonly logger: Logger;
  readonly reconnectMs?: number;
  /**
   * One connection attempt (the connect and its LISTEN) gives up after this, and the hub tries
   * again: a server that accepts and never answers must not leave the hub unconnected for good.
   */
  readonly connectTimeoutMs?: number;
}

const notice = (payload: string | undefined): { k: string; tenant: string; task: string } | null => {
  try {
    const p = JSON.parse(payload ?? '') as { k?: unknown; tenant?: unknown; task?: unknown };
    return typeof p.task === 'string' && typeof p.tenant === 'string' && typeof p.k === 'string' ? { k: p.k, tenant: p.tenant, task: p.task } : null;
  } catch {
    return null;
  }
};

const keyNotice = (payload: string | undefined): KeyNotice | null => {
  try {
    const p = JSON.parse(payload ?? '') as { k?: unknown; key_id?: unknown; revoked_at?: unknown };
    if (p.k === 'issued') return { kind: 'issued' };
    if (p.k !== 'revoked' || typeof p.key_id !== 'string' || typeof p.revoked_at !== 'string') return null;
    const revokedAt = new Date(p.revoked_at);
    return Number.isNaN(revokedAt.getTime()) ? null : { kind: 'revoked', keyId: p.key_id, revokedAt };
  } catch {
    return null;
  }
};

/**
 * The hub connects on its first watcher (a stream, or the key cache at the first request with a
 * key: an API that serves neither holds no connection), and
 * wakes every watcher with `resync` each time the connection is (re)established: what happened
 * while it was not listening is read then.
 */
export function createEventHub(opts: EventHubOptions): EventHub {
  const newClient = listenClients({
    url: opts.databaseUrl,
    failoverHosts: opts.failoverHosts,
    applicationName: 'vidorch-api-events',
    timeoutMs: opts.connectTimeoutMs,
  });
  const byTask = new Map<string, Set<WakeListener>>();
  const byTenant = new Map<string, Set<WakeListener>>();
  const keyListeners = new Set<KeyListener>();
  let client: pg.Client | null = null;
  /** The connection being opened, until it listens or is given up (one at a time). */
  let attempt: pg.Client | null = null;
  let started = false;
  let stopped = false;
  let connectCount = 0;
  let reconnectTimer: NodeJS.Timeout | null = null;
  let resyncTimer: NodeJS.Timeout | null = null;

  const each = (fn: (l: WakeListener) => void) => {
    for (const set of [...byTask.values(), ...byTenant.values()]) for (const l of [...set]) fn(l);
  };
  const wakeAll = (wake: Wake) => each((l) => l(wake));

  function onNotification(msg: pg.Notification) {
    if (msg.channel === FENCE_CHANNEL) return wakeAll({ kind: 'fence' });
    if (msg.channel === API_KEYS_CHANNEL) {
      const k = keyNotice(msg.payload);
      if (k) for (const l of [...keyListeners]) l(k);
      return;
    }
    const n = notice(msg.payload);
    if (!n) return;
    const wake: Wake = { kind: n.k === 'p' ? 'progress' : 'transition', taskId: n.task };
    for (const l of [...(byTask.get(n.task) ?? [])]) l(wake);
    for (const l of [...(byTenant.get(n.tenant) ?? [])]) l(wake);
  }

  async function connect(): Promise<void> {
    if (stopped || attempt || client) return;
    // Its connect and its LISTEN are bounded (db/client.ts listenClients).
    const c = newClient();
    attempt = c;
    const retry = (err?: unknown) => {
      if (client === c) {
        client = null;
        opts.logger.warn({ err }, 'event LISTEN connection lost; reconnecting');
      }
      // An attempt that ends (the connection closed, or errored, while it was being opened) is
      // given up here, whether or not its connect or LISTEN ever settles: the next one may start.
      if (attempt === c) attempt = null;
      void discardClient(c);
      if (!stopped && !reconnectTimer) {
        reconnectTimer = setTimeout(() => {
          reconnectTimer = null;
          void connect();
        }, opts.reconnectMs ?? 1_000);
      }
    };
    c.on('error', retry);
    c.on('end', () => retry());
    c.on('notification', onNotification);
    try {
      await c.connect();
      await c.query(`LISTEN ${TASK_EVENTS_CHANNEL}; LISTEN ${FENCE_CHANNEL}; LISTEN ${API_KEYS_CHANNEL}`);
      // Stopped meanwhile, or given up (its connection ended) while the LISTEN was answered.
      if (stopped || attempt !== c) {
        await discardClient(c);
        return;
      }
      attempt = null;
      client = c;
      connectCount += 1;
      // Anything written while nobody listened here: every stream reads again, every key is checked again.
      for (const l of [...keyListeners]) l({ kind: 'connected' });
      wakeAll({ kind: 'resync' });
    } catch (err) {
      opts.logger.debug({ err }, 'event LISTEN connection failed; retrying');
      retry(err);
    } finally {
      if (attempt === c) attempt = null;
    }
  }

  function start() {
    if (started || stopped) return;
    started = true;
    void connect();
    resyncTimer = setInterval(() => wakeAll({ kind: 'resync' }), opts.resyncMs);
    resyncTimer.unref();
  }

  const watch = (map: Map<string, Set<WakeListener>>, key: string, l: WakeListener) => {
    start();
    let set = map.get(key);
    if (!set) map.set(key, (set = new Set()));
    set.add(l);
    return () => {
      set.delete(l);
      if (set.size === 0 && map.get(key) === set) map.delete(key);
    };
  };

  return {
    watchTask: (taskId, l) => watch(byTask, taskId, l),
    watchTenant: (tenantId, l) => watch(byTenant, tenantId, l),
    watchKeys(l) {
      start();
      keyListeners.add(l);
      return () => keyListeners.delete(l);
    },
    listening: () => client !== null,
    connects: () => connectCount,
    async stop() {
      stopped = true;
      if (reconnectTimer) clearTimeout(reconnectTimer);
      if (resyncTimer) clearInterval(resyncTimer);
      const [listening, opening] = [client, attempt];
      client = null;
      attempt = null;
      // An attempt still opening is not waited for: against a server that does not answer, its
      // end would wait out the connect timeout.
      if (opening) void discardClient(opening);
      if (listening) await discardClient(listening);
    },
  };
}
