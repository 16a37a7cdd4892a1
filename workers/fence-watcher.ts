// The worker's view of the region fence (docs/design.md §7: consumers and
// the provider submit switch follow the active region). A dedicated connection LISTENs on FENCE_CHANNEL, which
// `ops mode set` and `ops failover` NOTIFY in their transactions, and a periodic re-read covers
// a missed notification or a lost connection. Region-bound services (the Temporal worker, the
// outbox relay) run only while this process's REGION is the active one: they are stopped when
// it is not — the process stays up — and started again when it is.
import pg from 'pg';
import { discardClient, listenClients, type Db, type DatabaseHost } from '../db/client';
import { readFence, type FenceState } from '../db/fence';
import { FENCE_CHANNEL } from '../db/modes';
import type { Logger } from '../observability/logger';

export interface FenceWatcher {
  /** The last fence state read, or null before the first successful read. */
  current(): FenceState | null;
  /** Called with every changed state (region, epoch or mode). Returns an unsubscribe. */
  onChange(listener: (state: FenceState) => void): () => void;
  /** Reads the fence now (also what a NOTIFY and the timer do). */
  refresh(): Promise<FenceState | null>;
  stop(): Promise<void>;
}

export interface FenceWatcherOptions {
  readonly db: Db;
  /** For the LISTEN connection (a pooled connection cannot hold a LISTEN). */
  readonly databaseUrl: string;
  /** DATABASE_FAILOVER_HOSTS: the LISTEN connection follows a promoted standby as the pool does (docs/decisions/0030). */
  readonly failoverHosts?: readonly DatabaseHost[];
  readonly scope: string;
  readonly intervalMs: number;
  readonly logger: Logger;
  /** False: periodic reads only (tests of the fallback path). */
  readonly listen?: boolean;
}

const sameFence = (a: FenceState | null, b: FenceState) => a !== null && a.activeRegion === b.activeRegion && a.epoch === b.epoch && a.mode === b.mode;

export async function startFenceWatcher(opts: FenceWatcherOptions): Promise<FenceWatcher> {
  let state: FenceState | null = null;
  let stopped = false;
  const listeners = new Set<(s: FenceState) => void>();
  let listener: pg.Client | null = null;
  let reconnectTimer: NodeJS.Timeout | null = null;
  const newClient = listenClients({ url: opts.databaseUrl, failoverHosts: opts.failoverHosts, applicationName: 'vidorch-fence-watcher' });

  async function refresh(): Promise<FenceState | null> {
    try {
      const next = await readFence(opts.db, opts.scope);
      if (next && !sameFence(state, next)) {
        const previous = state;
        state = next;
        opts.logger.info(
          {
            region: next.activeRegion,
            epoch: next.epoch,
            mode: next.mode,
            previous: previous && { region: previous.activeRegion, epoch: previous.epoch, mode: previous.mode },
          },
          'fence changed',
        );
        for (const l of listeners) l(next);
      }
    } catch (err) {
      // Keep the last known state: without the database this process cannot write anyway.
      opts.logger.debug({ err }, 'fence read failed');
    }
    return state;
  }

  async function connectListener(): Promise<void> {
    if (stopped || opts.listen === false) return;
    const client = newClient();
    const retry = () => {
      if (listener === client) listener = null;
      void discardClient(client);
      if (!stopped && !reconnectTimer) {
        reconnectTimer = setTimeout(() => {
          reconnectTimer = null;
          void connectListener();
        }, 2_000);
      }
    };
    client.on('error', retry);
    client.on('end', retry);
    client.on('notification', () => void refresh());
    try {
      await client.connect();
      await client.query(`LISTEN ${FENCE_CHANNEL}`);
      if (stopped) {
        // Stopped while this attempt was opening: nobody will end it later.
        await discardClient(client);
        return;
      }
      listener = client;
      // Anything that changed while we were not listening.
      await refresh();
    } catch (err) {
      opts.logger.debug({ err }, 'fence LISTEN connection failed; retrying');
      retry();
    }
  }

  await refresh();
  await connectListener();
  const timer = setInterval(() => void refresh(), opts.intervalMs);

  return {
    current: () => state,
    onChange(l) {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    refresh,
    async stop() {
      stopped = true;
      clearInterval(timer);
      if (reconnectTimer) clearTimeout(reconnectTimer);
      const c = listener;
      listener = null;
      if (c) await discardClient(c);
    },
  };
}

/** A service that runs only while this region is active. */
export interface RegionService {
  stop(): Promise<void>;
  /** Settles when the service ends on its own (e.g. the worker crashed); it is then restarted. */
  readonly ended?: Promise<unknown>;
}

/** Runs a worker as a RegionService: `stop()` asks it to shut down and waits until it has. */
export function runAsRegionService(worker: { run(): Promise<void>; shutdown(): void }): RegionService & { readonly ended: Promise<void> } {
  const ended = worker.run();
  return {
    ended,
    async stop() {
      try {
        worker.shutdown();
      } catch {
        // Already stopping (e.g. a fatal error): wait for it below.
      }
      await ended.catch(() => undefined);
    },
  };
}

export type SupervisedState = 'waiting' | 'starting' | 'running' | 'stopping' | 'stopped';

export interface RegionSupervisor {
  state(): SupervisedState;
  /** Stops the service for good (process shutdown). */
  stop(): Promise<void>;
}

/**
 * Keeps `start()`'s service running exactly while `region` is the active region. Transitions
 * run one at a time; a service that ends by itself while it should run is restarted after
 * `restartDelayMs`.
 */
export function superviseRegion(opts: {
  name: string;
  region: string;
  watcher: FenceWatcher;
  start: () => Promise<RegionService>;
  logger: Logger;
  onState?: (state: SupervisedState) => void;
  restartDelayMs?: number;
}): RegionSupervisor {
  let service: RegionService | null = null;
  let current: SupervisedState = 'waiting';
  let closed = false;
  let chain: Promise<void> = Promise.resolve();
  let restartTimer: NodeJS.Timeout | null = null;
  const set = (s: SupervisedState) => {
    current = s;
    opts.onState?.(s);
  };
  const shouldRun = () => !closed && opts.watcher.current()?.activeRegion === opts.region;

  const converge = (): Promise<void> => {
    chain = chain.then(async () => {
      if (shouldRun() && !service) {
        set('starting');
        try {
          const s = await opts.start();
          service = s;
          set('running');
          opts.logger.info({ service: opts.name, region: opts.region }, 'region active: started');
          void s.ended?.then(
            () => onEnded(s, null),
            (err: unknown) => onEnded(s, err),
          );
        } catch (err) {
          set('waiting');
          opts.logger.error({ err, service: opts.name }, 'could not start; retrying');
          scheduleRestart();
        }
      } else if (!shouldRun() && service) {
        const s = service;
        service = null;
        set('stopping');
        const active = opts.watcher.current()?.activeRegion;
        if (closed) opts.logger.info({ service: opts.name }, 'shutting down: stopping');
        else opts.logger.warn({ service: opts.name, region: opts.region, activeRegion: active }, 'region not active: stopping');
        await s.stop().catch((err: unknown) => opts.logger.error({ err, service: opts.name }, 'stop failed'));
        set(closed ? 'stopped' : 'waiting');
      }
    });
    return chain;
  };

  function scheduleRestart() {
    if (restartTimer || closed) return;
    restartTimer = setTimeout(() => {
      restartTimer = null;
      void converge();
    }, opts.restartDelayMs ?? 5_000);
  }

  function onEnded(s: RegionService, err: unknown) {
    if (service !== s) return; // stopped on purpose
    service = null;
    set('waiting');
    opts.logger.error({ err, service: opts.name }, 'ended unexpectedly; restarting');
    scheduleRestart();
  }

  const unsubscribe = opts.watcher.onChange(() => void converge());
  void converge();

  return {
    state: () => current,
    async stop() {
      closed = true;
      unsubscribe();
      if (restartTimer) clearTimeout(restartTimer);
      await converge();
      set('stopped');
    },
  };
}

/** The in-memory submit switch (activities/deps.ts SubmitSwitch) driven by the watcher. */
export function regionSubmitSwitch(watcher: FenceWatcher, region: string) {
  return {
    closedReason(): string | null {
      const s = watcher.current();
      // Unknown (no read yet): the fence row in the claim transaction decides alone.
      if (!s || s.activeRegion === region) return null;
      return `region ${region} is not active (active ${s.activeRegion}, epoch ${s.epoch})`;
    },
  };
}
