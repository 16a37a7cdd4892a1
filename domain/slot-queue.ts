// The admission queue's chooser (docs/providers.md "The slot queue"): which waiting attempts get a
// provider's free slots. Pure: the caller reads the waiters and the in-flight counts from the facts
// under the provider's row lock and writes the grants in the same transaction.
//
// Fair policy, in order:
//  1. the highest effective priority first; a waiter's priority rises by one per `agingMs` waited
//     (capped at MAX_PRIORITY), so a priority-0 waiter reaches the top class after
//     MAX_PRIORITY × agingMs and is never starved (the bound is in docs/providers.md);
//  2. within that class, the tenant with the least in-flight work at this provider per unit of
//     weight (weighted fair share, counted from the facts, so it needs no scheduler state);
//  3. within the tenant, the oldest waiter.
// FIFO policy: the oldest waiter, whoever and whatever priority (the baseline the bench compares).
// Both skip a waiter whose tenant is at its cap (per provider or overall).

import { Heap } from 'heap-js';

export const MAX_PRIORITY = 9;

export type QueuePolicyMode = 'fair' | 'fifo';

export interface QueuePolicy {
  readonly mode: QueuePolicyMode;
  /** A waiter's priority rises by one per this many ms waited; 0 turns aging off. */
  readonly agingMs: number;
}

export interface Waiter {
  readonly id: string;
  readonly tenant: string;
  /** 0–9 as accepted by POST /v1/tasks. */
  readonly priority: number;
  readonly sinceMs: number;
  /** The tenant's fair-share weight (≥ 1). */
  readonly weight: number;
  /** In-flight cap of the tenant at this provider; null: none. */
  readonly tenantProviderCap: number | null;
  /** In-flight cap of the tenant across providers; null: none. */
  readonly tenantTotalCap: number | null;
}

export interface SlotLoad {
  /** Slots taken at the provider: attempts holding one plus grants not yet used. */
  readonly inFlight: number;
  /** The provider's ceiling. */
  readonly limit: number;
  /** Per tenant, slots taken at this provider. */
  readonly tenantAtProvider: ReadonlyMap<string, number>;
  /** Per tenant, slots taken at every provider. */
  readonly tenantTotal: ReadonlyMap<string, number>;
}

export type WaitReason = 'provider_full' | 'tenant_provider_cap' | 'tenant_total_cap' | 'queued_behind';

export interface Choice {
  /** Granted waiter ids, in grant order. */
  readonly granted: readonly string[];
  /** Why each waiter that was not granted still waits. */
  readonly waiting: ReadonlyMap<string, WaitReason>;
}

export function effectivePriority(w: Pick<Waiter, 'priority' | 'sinceMs'>, now: number, agingMs: number): number {
  const base = Math.min(MAX_PRIORITY, Math.max(0, Math.trunc(w.priority)));
  if (agingMs <= 0) return base;
  const aged = Math.floor(Math.max(0, now - w.sinceMs) / agingMs);
  return Math.min(MAX_PRIORITY, base + aged);
}

const older = (a: Waiter, b: Waiter): boolean => a.sinceMs < b.sinceMs || (a.sinceMs === b.sinceMs && a.id < b.id);

function capReason(w: Waiter, atProvider: ReadonlyMap<string, number>, total: ReadonlyMap<string, number>): WaitReason | null {
  if (w.tenantProviderCap !== null && (atProvider.get(w.tenant) ?? 0) >= w.tenantProviderCap) return 'tenant_provider_cap';
  if (w.tenantTotalCap !== null && (total.get(w.tenant) ?? 0) >= w.tenantTotalCap) return 'tenant_total_cap';
  return null;
}

/** The next waiter under `policy` among `open` (none blocked by a cap), or null. */
function next(open: readonly Waiter[], atProvider: Map<string, number>, policy: QueuePolicy, now: number): Waiter | null {
  if (open.length === 0) return null;
  if (policy.mode === 'fifo') return open.reduce((best, w) => (older(w, best) ? w : best));
  let top = -1;
  for (const w of open) top = Math.max(top, effectivePriority(w, now, policy.agingMs));
  // Per tenant in the top class: its oldest waiter.
  const heads = new Map<string, Waiter>();
  for (const w of open) {
    if (effectivePriority(w, now, policy.agingMs) !== top) continue;
    const head = heads.get(w.tenant);
    if (!head || older(w, head)) heads.set(w.tenant, w);
  }
  let best: Waiter | null = null;
  let bestShare = Number.POSITIVE_INFINITY;
  for (const head of heads.values()) {
    const share = (atProvider.get(head.tenant) ?? 0) / Math.max(1, head.weight);
    if (share < bestShare || (share === bestShare && best !== null && older(head, best))) {
      best = head;
      bestShare = share;
    }
  }
  return best;
}

/**
 * Grants free slots to waiters until the provider is full or no waiter may go. `limit: Infinity`
 * with caps ignored gives the queue order (positions, `ops provider queue`).
 */
export function chooseGrants(waiters: readonly Waiter[], load: SlotLoad, policy: QueuePolicy, now: number, opts: { readonly caps?: boolean } = {}): Choice {
  const caps = opts.caps ?? true;
  const atProvider = new Map(load.tenantAtProvider);
  const total = new Map(load.tenantTotal);
  const pending = new Map(waiters.map((w) => [w.id, w]));
  const granted: string[] = [];
  let inFlight = load.inFlight;
  while (inFlight < load.limit && pending.size > 0) {
    const open = [...pending.values()].filter((w) => !caps || capReason(w, atProvider, total) === null);
    const w = next(open, atProvider, policy, now);
    if (!w) break;
    pending.delete(w.id);
    granted.push(w.id);
    inFlight += 1;
    atProvider.set(w.tenant, (atProvider.get(w.tenant) ?? 0) + 1);
    total.set(w.tenant, (total.get(w.tenant) ?? 0) + 1);
  }
  const waiting = new Map<string, WaitReason>();
  for (const w of pending.values()) {
    const capped = caps ? capReason(w, atProvider, total) : null;
    waiting.set(w.id, capped ?? (inFlight >= load.limit ? 'provider_full' : 'queued_behind'));
  }
  return { granted, waiting };
}

/**
 * The waiters a grant pass of `free` slots needs to look at (db/slot-queue.ts reads the same rows
 * from an index): the `free` oldest of each (tenant, priority) line. Within a line the older
 * waiter has the same or a higher effective priority, is older, and shares the tenant's share and
 * caps, so chooseGrants takes a line's waiters oldest first and grants at most `free`: over these
 * it grants exactly what it grants over everyone (test/domain/slot-queue.property.test.ts). A
 * pass then costs O(lines × free), not O(waiting).
 */
export function lineHeads(waiters: readonly Waiter[], free: number): Waiter[] {
  const lines = new Map<string, Waiter[]>();
  for (const w of waiters) {
    const key = `${w.tenant}\u0000${Math.min(MAX_PRIORITY, Math.max(0, Math.trunc(w.priority)))}`;
    const line = lines.get(key) ?? lines.set(key, []).get(key)!;
    line.push(w);
  }
  const heads: Waiter[] = [];
  for (const line of lines.values()) heads.push(...line.sort((a, b) => (older(a, b) ? -1 : older(b, a) ? 1 : 0)).slice(0, Math.max(0, free)));
  return heads;
}

/**
 * The fast path's decision (docs/providers.md "The slot queue"): a claimant at a provider where
 * nobody waits takes a free slot exactly when the chooser would grant it as the only waiter.
 */
export function takesFreeSlot(w: Waiter, load: SlotLoad): boolean {
  return load.inFlight < load.limit && capReason(w, load.tenantAtProvider, load.tenantTotal) === null;
}

/**
 * Every waiter in the order it would be granted if slots kept freeing and nobody new arrived (caps
 * aside): the order chooseGrants gives with every slot free and caps off, in O(n log n). A queue
 * read (GET /v1/tasks/:id, `ops provider queue`) of tens of thousands of waiters must not repeat
 * the chooser's scan of every waiter per grant (O(n²)). Classes are taken from the top down (no
 * waiter changes class within one call: `now` is fixed); within a class the next grant is the
 * tenant head with the least share, then the oldest (next()'s rule), from a heap of tenant heads.
 * Only the granted tenant's share moves, so only its entry is replaced.
 * `test/domain/slot-queue.property.test.ts` checks that the two orders are equal.
 */
export function queueOrder(waiters: readonly Waiter[], load: Omit<SlotLoad, 'inFlight' | 'limit'>, policy: QueuePolicy, now: number): readonly string[] {
  const byAge = [...waiters].sort((a, b) => (older(a, b) ? -1 : older(b, a) ? 1 : 0));
  if (policy.mode === 'fifo') return byAge.map((w) => w.id);
  const atProvider = new Map(load.tenantAtProvider);
  const classes = new Map<number, Map<string, Waiter[]>>();
  for (const w of byAge) {
    const cls = effectivePriority(w, now, policy.agingMs);
    const tenants = classes.get(cls) ?? classes.set(cls, new Map()).get(cls)!;
    const line = tenants.get(w.tenant) ?? tenants.set(w.tenant, []).get(w.tenant)!;
    line.push(w);
  }
  const order: string[] = [];
  type Head = { readonly line: readonly Waiter[]; readonly at: number; readonly share: number };
  const headOf = (line: readonly Waiter[], at: number): Head => ({ line, at, share: (atProvider.get(line[at]!.tenant) ?? 0) / Math.max(1, line[at]!.weight) });
  const heads = new Heap<Head>((a, b) => a.share - b.share || (older(a.line[a.at]!, b.line[b.at]!) ? -1 : 1));
  for (const cls of [...classes.keys()].sort((a, b) => b - a)) {
    heads.init([...classes.get(cls)!.values()].map((line) => headOf(line, 0)));
    for (let head = heads.pop(); head; head = heads.pop()) {
      const w = head.line[head.at]!;
      order.push(w.id);
      atProvider.set(w.tenant, (atProvider.get(w.tenant) ?? 0) + 1);
      if (head.at + 1 < head.line.length) heads.push(headOf(head.line, head.at + 1));
    }
  }
  return order;
}
