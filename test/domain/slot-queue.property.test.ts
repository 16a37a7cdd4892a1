// The slot queue's chooser (domain/slot-queue.ts): examples of each rule, then its laws under
// fast-check — never over the provider's limit or a tenant's cap, the top effective priority
// first, oldest first within a tenant, and a bounded wait for priority 0.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  MAX_PRIORITY,
  chooseGrants,
  effectivePriority,
  lineHeads,
  queueOrder,
  takesFreeSlot,
  type QueuePolicy,
  type SlotLoad,
  type Waiter,
} from '../../domain/slot-queue';

const FAIR: QueuePolicy = { mode: 'fair', agingMs: 60_000 };
const NOW = 10_000_000;
const w = (id: string, tenant: string, priority: number, ageMs: number, extra: Partial<Waiter> = {}): Waiter => ({
  id,
  tenant,
  priority,
  sinceMs: NOW - ageMs,
  weight: 1,
  tenantProviderCap: null,
  tenantTotalCap: null,
  ...extra,
});
const load = (inFlight: number, limit: number, atProvider: Record<string, number> = {}, total: Record<string, number> = {}): SlotLoad => ({
  inFlight,
  limit,
  tenantAtProvider: new Map(Object.entries(atProvider)),
  tenantTotal: new Map(Object.entries(total)),
});

test('higher priority goes first, whatever its age', () => {
  const c = chooseGrants([w('old-low', 'a', 0, 50_000), w('new-high', 'b', 9, 0)], load(9, 10), FAIR, NOW);
  assert.deepEqual(c.granted, ['new-high']);
  assert.equal(c.waiting.get('old-low'), 'provider_full');
});

test("within a priority, a tenant with fewer slots goes before a tenant's older backlog", () => {
  const a = Array.from({ length: 50 }, (_, i) => w(`a${i}`, 'A', 0, 40_000 - i));
  const c = chooseGrants([...a, w('b0', 'B', 0, 1_000), w('b1', 'B', 0, 500)], load(10, 12, { A: 10 }), FAIR, NOW);
  assert.deepEqual(c.granted, ['b0', 'b1'], 'B holds none of the 10 slots: it gets the two that free');
});

test('tenants share in proportion to their weights', () => {
  const waiters = [
    ...Array.from({ length: 40 }, (_, i) => w(`a${i}`, 'A', 3, 10_000 - i, { weight: 3 })),
    ...Array.from({ length: 40 }, (_, i) => w(`b${i}`, 'B', 3, 10_000 - i)),
  ];
  const c = chooseGrants(waiters, load(0, 20), FAIR, NOW);
  assert.equal(c.granted.filter((id) => id.startsWith('a')).length, 15);
  assert.equal(c.granted.filter((id) => id.startsWith('b')).length, 5);
});

test('within a tenant, oldest first', () => {
  const c = chooseGrants([w('young', 'A', 2, 10), w('old', 'A', 2, 20_000), w('mid', 'A', 2, 5_000)], load(0, 2), FAIR, NOW);
  assert.deepEqual(c.granted, ['old', 'mid']);
});

test('a tenant at its cap waits and its slot goes to the next tenant; the reason says so', () => {
  const c = chooseGrants(
    [w('a0', 'A', 9, 9_000, { tenantProviderCap: 2 }), w('b0', 'B', 0, 1, {}), w('a1', 'A', 9, 8_000, { tenantTotalCap: 3 })],
    load(2, 5, { A: 2 }, { A: 3 }),
    FAIR,
    NOW,
  );
  assert.deepEqual(c.granted, ['b0']);
  assert.equal(c.waiting.get('a0'), 'tenant_provider_cap');
  assert.equal(c.waiting.get('a1'), 'tenant_total_cap');
});

test('FIFO ignores priority and tenant: the oldest waiter goes first', () => {
  const c = chooseGrants([w('new-high', 'B', 9, 0), w('old-low', 'A', 0, 50_000)], load(0, 1), { mode: 'fifo', agingMs: 0 }, NOW);
  assert.deepEqual(c.granted, ['old-low']);
});

test('aging: a priority-0 waiter gains a level per aging step and reaches the top class after 9 steps', () => {
  assert.equal(effectivePriority({ priority: 0, sinceMs: NOW - 59_999 }, NOW, 60_000), 0);
  assert.equal(effectivePriority({ priority: 0, sinceMs: NOW - 60_000 }, NOW, 60_000), 1);
  assert.equal(effectivePriority({ priority: 0, sinceMs: NOW - 9 * 60_000 }, NOW, 60_000), MAX_PRIORITY);
  assert.equal(effectivePriority({ priority: 7, sinceMs: NOW - 99 * 60_000 }, NOW, 60_000), MAX_PRIORITY, 'capped');
  const c = chooseGrants([w('fresh-9', 'B', 9, 0), w('aged-0', 'A', 0, 9 * 60_000)], load(0, 1), FAIR, NOW);
  assert.deepEqual(c.granted, ['aged-0'], 'in the top class the older one goes first');
});

// ---- laws ----

const arbWaiters = fc
  .array(
    fc.record({
      tenant: fc.constantFrom('A', 'B', 'C', 'D'),
      priority: fc.integer({ min: 0, max: 9 }),
      ageMs: fc.integer({ min: 0, max: 20 * 60_000 }),
      weight: fc.integer({ min: 1, max: 4 }),
      cap: fc.option(fc.integer({ min: 0, max: 5 }), { nil: null }),
      total: fc.option(fc.integer({ min: 0, max: 8 }), { nil: null }),
    }),
    { maxLength: 60 },
  )
  .map((rows) => rows.map((r, i) => w(`w${i}`, r.tenant, r.priority, r.ageMs, { weight: r.weight, tenantProviderCap: r.cap, tenantTotalCap: r.total })));
const arbLoad = fc.record({
  inFlight: fc.integer({ min: 0, max: 20 }),
  limit: fc.integer({ min: 0, max: 25 }),
  at: fc.dictionary(fc.constantFrom('A', 'B', 'C', 'D'), fc.integer({ min: 0, max: 6 })),
});
const arbPolicy = fc.record({ mode: fc.constantFrom<'fair' | 'fifo'>('fair', 'fifo'), agingMs: fc.constantFrom(0, 1_000, 60_000) });

test('law: grants never take the provider over its limit nor a tenant over its caps', () => {
  fc.assert(
    fc.property(arbWaiters, arbLoad, arbPolicy, (waiters, l, policy) => {
      const before = load(l.inFlight, l.limit, l.at, l.at);
      const c = chooseGrants(waiters, before, policy, NOW);
      assert.ok(l.inFlight + c.granted.length <= Math.max(l.limit, l.inFlight));
      const byId = new Map(waiters.map((x) => [x.id, x]));
      const at = new Map(before.tenantAtProvider);
      for (const id of c.granted) {
        const x = byId.get(id)!;
        const n = (at.get(x.tenant) ?? 0) + 1;
        at.set(x.tenant, n);
        if (x.tenantProviderCap !== null) assert.ok(n <= x.tenantProviderCap, `${id} over its tenant's provider cap`);
        if (x.tenantTotalCap !== null) assert.ok(n <= x.tenantTotalCap, `${id} over its tenant's total cap`);
      }
      assert.equal(c.granted.length + c.waiting.size, waiters.length, 'every waiter is granted or told why it waits');
    }),
  );
});

test('law: with room and no caps, nobody is left waiting; without room, nobody is granted', () => {
  fc.assert(
    fc.property(arbWaiters, arbPolicy, (waiters, policy) => {
      const free = waiters.map((x) => ({ ...x, tenantProviderCap: null, tenantTotalCap: null }));
      assert.equal(chooseGrants(free, load(0, free.length), policy, NOW).granted.length, free.length);
      assert.equal(chooseGrants(free, load(5, 5), policy, NOW).granted.length, 0);
    }),
  );
});

test('law: the fast path decides as the chooser would for a claimant alone in the queue', () => {
  fc.assert(
    fc.property(
      arbWaiters,
      arbLoad,
      arbPolicy,
      fc.dictionary(fc.constantFrom('A', 'B', 'C', 'D'), fc.integer({ min: 0, max: 9 })),
      (waiters, l, policy, total) => {
        const [me] = waiters;
        if (!me) return;
        const now = load(l.inFlight, l.limit, l.at, total);
        assert.equal(takesFreeSlot(me, now), chooseGrants([me], now, policy, NOW).granted.length === 1);
      },
    ),
  );
});

test('law (fair): each grant has the top effective priority among those that could go, and is its tenant’s oldest in that class', () => {
  fc.assert(
    fc.property(arbWaiters, (waiters) => {
      const free = waiters.map((x) => ({ ...x, tenantProviderCap: null, tenantTotalCap: null }));
      const c = chooseGrants(free, load(0, 1), FAIR, NOW);
      if (free.length === 0) return;
      const [id] = c.granted;
      const g = free.find((x) => x.id === id)!;
      const top = Math.max(...free.map((x) => effectivePriority(x, NOW, FAIR.agingMs)));
      assert.equal(effectivePriority(g, NOW, FAIR.agingMs), top);
      for (const x of free) {
        if (x.tenant === g.tenant && effectivePriority(x, NOW, FAIR.agingMs) === top) assert.ok(x.sinceMs >= g.sinceMs);
      }
    }),
  );
});

test('law (fair): a waiter in the top class is granted within (tenants × its older same-tenant top-class waiters + 1) grants', () => {
  fc.assert(
    fc.property(arbWaiters, fc.nat({ max: 59 }), (waiters, pick) => {
      const free = waiters.map((x) => ({ ...x, weight: 1, tenantProviderCap: null, tenantTotalCap: null }));
      if (free.length === 0) return;
      const me = free[pick % free.length]!;
      const top = effectivePriority(me, NOW, FAIR.agingMs);
      if (top !== MAX_PRIORITY) return;
      const tenants = new Set(free.filter((x) => effectivePriority(x, NOW, FAIR.agingMs) === MAX_PRIORITY).map((x) => x.tenant)).size;
      // Older as the chooser orders them: an equal age goes by id (found by fast-check, seed 540816224).
      const olderThanMe = (x: Waiter) => x.sinceMs < me.sinceMs || (x.sinceMs === me.sinceMs && x.id < me.id);
      const ahead = free.filter((x) => x.tenant === me.tenant && effectivePriority(x, NOW, FAIR.agingMs) === MAX_PRIORITY && olderThanMe(x)).length;
      const order = queueOrder(free, { tenantAtProvider: new Map(), tenantTotal: new Map() }, FAIR, NOW);
      assert.ok(order.indexOf(me.id) < tenants * (ahead + 1), `position ${order.indexOf(me.id)} with ${tenants} tenants and ${ahead} ahead`);
    }),
  );
});

test('law: the queue order (positions) is the order the chooser grants in with every slot free and caps aside', () => {
  // Ages from a small set too, so equal ages (the id breaks the tie) and equal shares are common.
  const arbTied = fc
    .array(
      fc.record({
        tenant: fc.constantFrom('A', 'B', 'C', 'D', 'E'),
        priority: fc.integer({ min: 0, max: 9 }),
        ageMs: fc.constantFrom(0, 1_000, 60_000, 120_000, 600_000),
        weight: fc.integer({ min: 1, max: 4 }),
      }),
      { maxLength: 80 },
    )
    .map((rows) => rows.map((r, i) => w(`t${String(i).padStart(2, '0')}`, r.tenant, r.priority, r.ageMs, { weight: r.weight })));
  fc.assert(
    fc.property(fc.oneof(arbWaiters, arbTied), arbLoad, arbPolicy, (waiters, l, policy) => {
      const shares = { tenantAtProvider: new Map(Object.entries(l.at)), tenantTotal: new Map(Object.entries(l.at)) };
      const chooser = chooseGrants(waiters, { ...shares, inFlight: 0, limit: Number.POSITIVE_INFINITY }, policy, NOW, { caps: false }).granted;
      assert.deepEqual(queueOrder(waiters, shares, policy, NOW), chooser);
    }),
    { numRuns: 500 },
  );
});

test('law: a grant pass over the oldest `free` waiters of each (tenant, priority) line grants exactly what it grants over every waiter', () => {
  // A tenant's weight and caps are the tenant's (every row of it carries the same, db/slot-queue.ts).
  const terms = fc.dictionary(
    fc.constantFrom('A', 'B', 'C', 'D'),
    fc.record({
      weight: fc.integer({ min: 1, max: 4 }),
      cap: fc.option(fc.integer({ min: 0, max: 5 }), { nil: null }),
      total: fc.option(fc.integer({ min: 0, max: 8 }), { nil: null }),
    }),
  );
  fc.assert(
    fc.property(arbWaiters, terms, arbLoad, arbPolicy, (waiters, t, l, policy) => {
      const all = waiters.map((x) => {
        const own = t[x.tenant];
        return own
          ? { ...x, weight: own.weight, tenantProviderCap: own.cap, tenantTotalCap: own.total }
          : { ...x, weight: 1, tenantProviderCap: null, tenantTotalCap: null };
      });
      const before = load(l.inFlight, l.limit, l.at, l.at);
      const free = l.limit - l.inFlight;
      const heads = lineHeads(all, free);
      assert.ok(heads.length <= new Set(all.map((x) => `${x.tenant}/${x.priority}`)).size * Math.max(0, free));
      assert.deepEqual(chooseGrants(heads, before, policy, NOW).granted, chooseGrants(all, before, policy, NOW).granted);
    }),
    { numRuns: 500 },
  );
});
