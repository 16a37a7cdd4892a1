// The router (docs/design.md §6): validated inputs, a scored choice within a strict budget, and a
// deterministic static route whenever scoring is late, throws or answers garbage.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  chooseRoute,
  mayFailOver,
  stableHash,
  staticRoute,
  type ProviderHealth,
  type RouteCandidate,
  type RouteDecision,
  type RouteInput,
  type RouterOptions,
  type Scorer,
} from '../../domain/router';

const C = (provider: string, priority: number, costPerSecond: number, over: Partial<RouteCandidate> = {}): RouteCandidate => ({
  provider,
  model: `${provider}/kling-v2.1`,
  priority,
  costPerSecond,
  maxDurationSeconds: 10,
  resolutions: ['480p', '720p', '1080p'],
  supportsImageInput: true,
  ...over,
});

const catalog: RouterOptions['catalog'] = {
  'kling-v2.1': [C('kling', 1, 0.28), C('fal', 2, 0.3), C('replicate', 3, 0.45, { resolutions: ['480p', '720p'] })],
  'runway-gen4': [C('runway', 1, 0.5, { maxDurationSeconds: 10, resolutions: ['720p'] })],
  'text-only': [C('kling', 1, 0.2, { supportsImageInput: false })],
};

const healthy: ProviderHealth = { errorRate: 0.01, p95LatencyMs: 60_000, breaker: 'closed' };
const input = (over: Partial<RouteInput> = {}): RouteInput => ({
  taskId: 'task-1',
  modelFamily: 'kling-v2.1',
  durationSeconds: 5,
  resolution: '720p',
  hasImageInput: false,
  health: { kling: healthy, fal: healthy, replicate: healthy },
  ...over,
});

/** A clock that advances by `step` ms on every read (a slow scorer reads it). */
const ticking = (step: number) => {
  let t = 0;
  return () => (t += step);
};
const fixed = () => 0;
const opts = (over: Partial<RouterOptions> = {}): RouterOptions => ({ catalog, budgetMs: 5, now: fixed, ...over });

/** The route's essentials; a rejection becomes a provider name that can never match. */
const routed = (d: RouteDecision): { provider: string; via: string; reason: string } =>
  d.kind === 'route' ? { provider: d.provider, via: d.via, reason: d.reason } : { provider: `rejected:${d.reason}`, via: 'none', reason: d.detail };

test('scored route: with all healthy, the cheapest wins; the tenant preference can outweigh a small cost difference', () => {
  assert.deepEqual(routed(chooseRoute(input(), opts())), { provider: 'kling', via: 'scored', reason: 'best-score' });
  assert.deepEqual(routed(chooseRoute(input({ tenantPreference: 'fal' }), opts())), { provider: 'fal', via: 'scored', reason: 'best-score' });
});

test('health moves the choice: a high error rate or a half-open breaker loses to a healthy provider', () => {
  const sick = input({ health: { kling: { errorRate: 0.6, p95LatencyMs: 60_000, breaker: 'closed' }, fal: healthy, replicate: healthy } });
  assert.equal(routed(chooseRoute(sick, opts())).provider, 'fal');
  const probing = input({ health: { kling: { ...healthy, breaker: 'half-open' }, fal: healthy, replicate: healthy } });
  assert.equal(routed(chooseRoute(probing, opts())).provider, 'fal');
});

test('a provider whose breaker is open is never chosen, scored or not', () => {
  const d = chooseRoute(input({ health: { kling: { ...healthy, breaker: 'open' }, fal: healthy, replicate: healthy } }), opts());
  assert.equal(routed(d).provider, 'fal');
  const failing: Scorer = () => {
    throw new Error('model down');
  };
  const f = chooseRoute(input({ health: { kling: { ...healthy, breaker: 'open' }, fal: healthy, replicate: healthy } }), opts({ scorer: failing }));
  assert.deepEqual(routed(f), { provider: 'fal', via: 'fallback', reason: 'scorer-error' });
});

test('all breakers open: the static route still answers and says so (the caller decides to wait)', () => {
  const open = { ...healthy, breaker: 'open' as const };
  const d = chooseRoute(input({ health: { kling: open, fal: open, replicate: open } }), opts());
  assert.deepEqual(d.kind === 'route' ? [d.provider, d.via, d.reason, d.allBreakersOpen] : d, ['kling', 'fallback', 'all-breakers-open', true]);
});

test('fallback on a scorer over its time budget, even when its answer is valid', () => {
  const slow: Scorer = (cands, _i, ctx) => {
    for (let i = 0; i < 10; i++) ctx.now(); // 10 reads × 1 ms each: over the 5 ms budget
    return cands.map((c) => ({ provider: c.provider, score: c.provider === 'replicate' ? 9 : 1 }));
  };
  const d = chooseRoute(input(), opts({ scorer: slow, now: ticking(1) }));
  assert.deepEqual(routed(d), { provider: 'kling', via: 'fallback', reason: 'budget-exceeded' });
  // The default scorer checks the clock itself and gives up.
  assert.deepEqual(routed(chooseRoute(input(), opts({ now: ticking(10) }))).reason, 'budget-exceeded');
});

test('fallback on a scorer error, an empty answer, or an invalid one (unknown provider, NaN score, not an array)', () => {
  const cases: [Scorer, string][] = [
    [
      () => {
        throw new Error('boom');
      },
      'scorer-error',
    ],
    [() => [], 'empty-output'],
    [() => [{ provider: 'nobody', score: 1 }], 'invalid-output'],
    [() => [{ provider: 'fal', score: Number.NaN }], 'invalid-output'],
    [() => ({ fal: 1 }) as unknown as ReturnType<Scorer>, 'empty-output'],
    [() => [null] as unknown as ReturnType<Scorer>, 'invalid-output'],
  ];
  for (const [scorer, reason] of cases) {
    assert.deepEqual(routed(chooseRoute(input(), opts({ scorer }))), { provider: 'kling', via: 'fallback', reason }, reason);
  }
});

test('the hash fallback is deterministic per task and spreads tasks over the compatible providers', () => {
  const failing: Scorer = () => [];
  const pick = (taskId: string) => routed(chooseRoute(input({ taskId }), opts({ scorer: failing, staticRoute: 'hash' }))).provider;
  assert.equal(pick('task-42'), pick('task-42'));
  const seen = new Set(Array.from({ length: 60 }, (_, i) => pick(`task-${i}`)));
  assert.deepEqual([...seen].sort(), ['fal', 'kling', 'replicate']);
  assert.equal(stableHash('abc'), 440920331); // FNV-1a 32-bit, fixed across runs and runtimes
});

test('the static route is a pure function of its inputs (property)', () => {
  fc.assert(
    fc.property(fc.string(), fc.shuffledSubarray(catalog['kling-v2.1'] as RouteCandidate[], { minLength: 1 }), (taskId, cands) => {
      for (const mode of ['priority', 'hash'] as const) {
        const a = staticRoute(cands, taskId, mode);
        const b = staticRoute([...cands].reverse(), taskId, mode);
        assert.equal(a.provider, b.provider);
      }
    }),
  );
});

test('rejections with a reason: unknown model, missing or out-of-range features, no compatible provider', () => {
  const reject = (over: Partial<RouteInput>) => {
    const d = chooseRoute(input(over), opts());
    return d.kind === 'rejected' ? d.reason : `routed to ${d.provider}`;
  };
  assert.equal(reject({ modelFamily: 'sora-9' }), 'unknown-model');
  assert.equal(reject({ durationSeconds: undefined }), 'missing-feature');
  assert.equal(reject({ resolution: '' }), 'missing-feature');
  assert.equal(reject({ taskId: '' }), 'missing-feature');
  assert.equal(reject({ durationSeconds: 0 }), 'out-of-range');
  assert.equal(reject({ durationSeconds: 2.5 }), 'out-of-range');
  assert.equal(reject({ durationSeconds: 11 }), 'out-of-range');
  assert.equal(reject({ resolution: '4k' }), 'out-of-range');
  assert.equal(reject({ modelFamily: 'text-only', hasImageInput: true, health: { kling: healthy } }), 'no-compatible-provider');
  assert.equal(reject({ exclude: ['kling', 'fal', 'replicate'] }), 'no-compatible-provider');
});

test('only compatible providers are candidates: 1080p excludes the provider without it; exclusions are honoured', () => {
  assert.notEqual(routed(chooseRoute(input({ resolution: '1080p', tenantPreference: 'replicate' }), opts())).provider, 'replicate');
  assert.equal(routed(chooseRoute(input({ exclude: ['kling'] }), opts())).provider, 'fal');
});

test('failover only after a proven rejection; never while an attempt is SUBMITTING or SUBMIT_UNKNOWN; never once a job exists', () => {
  const a = (attemptNo: number, provider: string, state: Parameters<typeof mayFailOver>[0][number]['state']) => ({ attemptNo, provider, state });
  assert.deepEqual(mayFailOver([a(1, 'kling', 'REJECTED')], 3), { allowed: true, exclude: ['kling'] });
  assert.deepEqual(mayFailOver([a(1, 'kling', 'REJECTED'), a(2, 'fal', 'REJECTED')], 3), { allowed: true, exclude: ['kling', 'fal'] });
  assert.deepEqual(mayFailOver([a(1, 'kling', 'SUBMIT_UNKNOWN')], 3), { allowed: false, reason: 'outcome-unknown' });
  assert.deepEqual(mayFailOver([a(1, 'kling', 'REJECTED'), a(2, 'fal', 'SUBMITTING')], 3), { allowed: false, reason: 'outcome-unknown' });
  assert.deepEqual(mayFailOver([a(1, 'kling', 'SUBMIT_UNKNOWN'), a(2, 'fal', 'REJECTED')], 3), { allowed: false, reason: 'outcome-unknown' });
  assert.deepEqual(mayFailOver([a(1, 'kling', 'RUNNING')], 3), { allowed: false, reason: 'job-exists' });
  assert.deepEqual(mayFailOver([a(1, 'kling', 'PREPARED')], 3), { allowed: false, reason: 'not-rejected' });
  assert.deepEqual(mayFailOver([], 3), { allowed: false, reason: 'no-attempt' });
  assert.deepEqual(mayFailOver([a(1, 'kling', 'REJECTED'), a(2, 'fal', 'REJECTED'), a(3, 'x', 'REJECTED')], 3), {
    allowed: false,
    reason: 'attempts-exhausted',
  });
});

test('throttled attempts (429) do not use up the attempt cap: a task throttled three times with a cap of 3 may still fail over', () => {
  const throttled = (attemptNo: number, provider: string) => ({ attemptNo, provider, state: 'REJECTED' as const, throttled: true });
  assert.deepEqual(mayFailOver([throttled(1, 'kling'), throttled(2, 'kling'), throttled(3, 'fal')], 3), { allowed: true, exclude: ['kling', 'fal'] });
  assert.deepEqual(mayFailOver([throttled(1, 'kling'), { attemptNo: 2, provider: 'fal', state: 'REJECTED' }], 1), {
    allowed: false,
    reason: 'attempts-exhausted',
  });
});

test('property: whatever the scorer does, the router answers a compatible provider or a typed rejection, never throws', () => {
  const anyScore = fc.oneof(fc.double(), fc.constant(Number.NaN), fc.integer());
  const scorerArb = fc.oneof(
    fc.array(fc.record({ provider: fc.constantFrom('kling', 'fal', 'replicate', 'zzz'), score: anyScore })).map((ans) => () => ans),
    fc.constant(() => {
      throw new Error('x');
    }),
  );
  fc.assert(
    fc.property(scorerArb, fc.integer({ min: -1, max: 12 }), fc.constantFrom('480p', '720p', '1080p', '8k'), fc.string(), (scorer, d, res, taskId) => {
      const dec = chooseRoute(input({ durationSeconds: d, resolution: res, taskId: taskId || 't' }), opts({ scorer }));
      if (dec.kind === 'rejected') return;
      const cand = (catalog['kling-v2.1'] as RouteCandidate[]).find((c) => c.provider === dec.provider);
      assert.ok(cand && cand.resolutions.includes(res) && d <= cand.maxDurationSeconds);
    }),
  );
});

test('a route that takes only some durations, or needs an input image, is never chosen for a request outside them', () => {
  const limited: RouterOptions['catalog'] = {
    fam: [C('fal', 1, 0.1, { durationsSeconds: [5, 10], supportsImageInput: false }), C('runway', 2, 0.5, { requiresImageInput: true }), C('kling', 3, 0.9)],
  };
  const health = { fal: healthy, runway: healthy, kling: healthy };
  const pick = (over: Partial<RouteInput>) => routed(chooseRoute(input({ modelFamily: 'fam', health, ...over }), opts({ catalog: limited }))).provider;
  assert.equal(pick({ durationSeconds: 5 }), 'fal', 'the cheapest takes 5 s');
  assert.equal(pick({ durationSeconds: 4 }), 'kling', 'fal takes no 4 s, runway needs an image');
  assert.equal(pick({ durationSeconds: 4, hasImageInput: true }), 'runway');
});
