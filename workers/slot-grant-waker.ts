// Wakes the workflow of each attempt granted a provider slot (docs/providers.md "The slot queue").
// The grant is written and a NOTIFY queued in the transaction that freed the slot; Postgres
// delivers the notification only if that transaction commits, so a wake never announces a grant
// that did not happen. A dedicated connection LISTENs (a pooled one cannot hold a LISTEN) and
// reconnects after errors; a notification lost meanwhile costs the waiter its fallback timer
// (SLOT_WAIT_FALLBACK_MS), never its grant, which stays in Postgres. The same connection hears
// SLOT_FREED_CHANNEL: a provider whose slots a transaction freed while it held another provider's
// control row (the one lock order, db/slot-queue.ts grantFreeSlotsAt); its pass runs here, after
// that commit, in a transaction of its own.
import type pg from 'pg';
import { discardClient, listenClients, type DatabaseHost } from '../db/client';
import { SLOT_FREED_CHANNEL, SLOT_GRANTED_CHANNEL } from '../db/slot-queue';

export interface SlotGrantWaker {
  stop(): Promise<void>;
}

export interface SlotGrantWakerOptions {
  /** The database of the LISTEN connection (the activities' pool's own). */
  readonly databaseUrl: string;
  /** DATABASE_FAILOVER_HOSTS: the LISTEN connection follows a switchover like the pool (docs/decisions/0030). */
  readonly failoverHosts?: readonly DatabaseHost[];
  /** Wakes one task's workflow (temporal/wakes.ts createTaskWaker over the facade: coalesced, best effort). */
  readonly wake: (taskId: string) => void;
  /**
   * Runs a grant pass at `provider` in a transaction of its own (db/slot-queue.ts grantFreeSlots):
   * the pass a transaction holding another provider's control row left for after its commit.
   */
  readonly grant: (provider: string) => Promise<void>;
  readonly reconnectMs?: number;
}

/** Opens the LISTEN connection and returns. Never rejects: a connect that fails is retried every `reconnectMs`. */
export async function startSlotGrantWaker(opts: SlotGrantWakerOptions): Promise<SlotGrantWaker> {
  const newClient = listenClients({ url: opts.databaseUrl, failoverHosts: opts.failoverHosts, applicationName: 'vidorch-slot-grant-waker' });
  let stopped = false;
  let listener: pg.Client | null = null;
  let reconnectTimer: NodeJS.Timeout | null = null;
  // One pass per provider at a time; a notification during it asks for one more after it.
  const passes = new Map<string, { again: boolean }>();
  function pass(provider: string): void {
    const running = passes.get(provider);
    if (running) {
      running.again = true;
      return;
    }
    const entry = { again: true };
    passes.set(provider, entry);
    void (async () => {
      while (entry.again && !stopped) {
        entry.again = false;
        // A failed pass is left to the waiters' own looks (their fallback timers find the free slot).
        await opts.grant(provider).catch(() => undefined);
      }
      passes.delete(provider);
    })();
  }

  async function connect(): Promise<void> {
    if (stopped) return;
    const client = newClient();
    const retry = () => {
      if (listener === client) listener = null;
      void discardClient(client);
      if (!stopped && !reconnectTimer) {
        reconnectTimer = setTimeout(() => {
          reconnectTimer = null;
          void connect();
        }, opts.reconnectMs ?? 2_000);
      }
    };
    client.on('error', retry);
    client.on('end', retry);
    client.on('notification', (n) => {
      if (n.channel === SLOT_GRANTED_CHANNEL && n.payload) opts.wake(n.payload);
      if (n.channel === SLOT_FREED_CHANNEL && n.payload) pass(n.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${SLOT_GRANTED_CHANNEL}; LISTEN ${SLOT_FREED_CHANNEL}`);
      if (stopped) {
        // Stopped while this attempt was opening: nobody will end it later.
        await discardClient(client);
        return;
      }
      listener = client;
      // Grants made while no connection listened (a reconnect, a switchover) were announced to
      // nobody: wake their workflows now instead of leaving each to its fallback timer.
      // (A grant dated ahead is a slot held for a moment in the create pace: its workflow sleeps until then anyway.)
      const missed = await client.query<{ task_id: string }>('SELECT DISTINCT task_id::text AS task_id FROM slot_wait WHERE granted_at <= now()');
      for (const r of missed.rows) opts.wake(r.task_id);
    } catch {
      retry();
    }
  }

  await connect();
  return {
    async stop() {
      stopped = true;
      if (reconnectTimer) clearTimeout(reconnectTimer);
      const c = listener;
      listener = null;
      if (c) await discardClient(c);
    },
  };
}
