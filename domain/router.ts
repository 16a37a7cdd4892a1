// Choosing a provider for a task (docs/design.md §6): validate the request against the model family's
// candidates, score the compatible providers by health, cost and tenant preference within a
// strict time budget, and fall back to a deterministic static route whenever the scorer is
// late, throws, or answers nothing usable. The answer says which path produced it so a metric
// can count fallbacks. Pure and sandbox-safe: the clock is a parameter, no Node imports.
//
// The budget cannot pre-empt synchronous code: the default scorer checks the clock between
// candidates, and any scorer's answer that arrives after the deadline is discarded.
import type { AttemptState } from './states';

export type BreakerView = 'closed' | 'open' | 'half-open';

/** One provider able to serve a model family. */
export interface RouteCandidate {
  readonly provider: string;
  /** The provider's model id for this family. */
  readonly model: string;
  /** Static route order: lower first. */
  readonly priority: number;
  /** Our cost per output second at this provider (any unit, the same for all candidates). */
  readonly costPerSecond: number;
  readonly maxDurationSeconds: number;
  readonly resolutions: readonly string[];
  readonly supportsImageInput: boolean;
  /** Only these durations, when the provider takes not every whole second up to the maximum. */
  readonly durationsSeconds?: readonly number[];
  readonly requiresImageInput?: boolean;
  /** The longest prompt the provider takes (UTF-16 code units), when it has a limit. */
  readonly maxPromptChars?: number;
}

export interface ProviderHealth {
  /** Share of failed calls in the recent window, 0..1. */
  readonly errorRate: number;
  readonly p95LatencyMs: number;
  readonly breaker: BreakerView;
}

export interface RouteInput {
  /** Seeds the hash route: the same task always lands on the same provider when falling back. */
  readonly taskId: string;
  readonly modelFamily: string;
  readonly durationSeconds: number;
  readonly resolution: string;
  readonly hasImageInput: boolean;
  /** The prompt's length in UTF-16 code units (a route with a shorter limit cannot take it); absent: not checked. */
  readonly promptChars?: number;
  readonly tenantPreference?: string | null;
  /** Providers not to use (they provably rejected this task already). */
  readonly exclude?: readonly string[];
  readonly health: Readonly<Record<string, ProviderHealth | undefined>>;
}

export interface ScoreContext {
  readonly now: () => number;
  /** Absolute time (same clock as now) by which an answer must exist. */
  readonly deadline: number;
}

export interface ProviderScore {
  readonly provider: string;
  readonly score: number;
}

/** Higher is better. May be slow, may throw, may answer garbage: the router copes. */
export type Scorer = (candidates: readonly RouteCandidate[], input: RouteInput, ctx: ScoreContext) => readonly ProviderScore[];

export interface RouterOptions {
  /** Model family → its candidates. */
  readonly catalog: Readonly<Record<string, readonly RouteCandidate[]>>;
  /** Time budget of the scorer, ms (a few ms). */
  readonly budgetMs: number;
  readonly now: () => number;
  readonly scorer?: Scorer;
  /** The deterministic fallback: lowest priority first (default), or a stable hash of the task id. */
  readonly staticRoute?: 'priority' | 'hash';
}

export type RouteRejectionReason = 'unknown-model' | 'missing-feature' | 'out-of-range' | 'no-compatible-provider';
export type FallbackReason = 'budget-exceeded' | 'scorer-error' | 'empty-output' | 'invalid-output' | 'all-breakers-open';

export type RouteDecision =
  | {
      readonly kind: 'route';
      readonly provider: string;
      readonly model: string;
      readonly via: 'scored' | 'fallback';
      /** 'best-score' when scored; why it fell back otherwise. */
      readonly reason: 'best-score' | FallbackReason;
      /** True when every compatible provider's breaker is open: the caller should wait, not submit. */
      readonly allBreakersOpen: boolean;
    }
  | { readonly kind: 'rejected'; readonly reason: RouteRejectionReason; readonly detail: string };

const reject = (reason: RouteRejectionReason, detail: string): RouteDecision => ({ kind: 'rejected', reason, detail });

/** Validation of the request against the family; the compatible candidates or a rejection. */
export function compatibleCandidates(input: RouteInput, catalog: RouterOptions['catalog']): readonly RouteCandidate[] | RouteDecision {
  const family = typeof input.modelFamily === 'string' ? catalog[input.modelFamily] : undefined;
  if (!family || family.length === 0) return reject('unknown-model', `unknown model family ${String(input.modelFamily)}`);
  if (typeof input.taskId !== 'string' || input.taskId.length === 0) return reject('missing-feature', 'taskId is required');
  const d = input.durationSeconds;
  if (typeof d !== 'number' || Number.isNaN(d)) return reject('missing-feature', 'durationSeconds is required');
  if (!Number.isInteger(d) || d < 1) return reject('out-of-range', `durationSeconds ${d} is not a whole number ≥ 1`);
  if (typeof input.resolution !== 'string' || input.resolution.length === 0) return reject('missing-feature', 'resolution is required');
  if (typeof input.hasImageInput !== 'boolean') return reject('missing-feature', 'hasImageInput is required');
  const maxD = Math.max(...family.map((c) => c.maxDurationSeconds));
  if (d > maxD) return reject('out-of-range', `durationSeconds ${d} is over the family's maximum ${maxD}`);
  if (!family.some((c) => c.resolutions.includes(input.resolution))) {
    return reject('out-of-range', `resolution ${input.resolution} is not offered for ${input.modelFamily}`);
  }
  const excluded = new Set(input.exclude ?? []);
  const ok = family.filter(
    (c) =>
      !excluded.has(c.provider) &&
      d <= c.maxDurationSeconds &&
      (!c.durationsSeconds || c.durationsSeconds.includes(d)) &&
      c.resolutions.includes(input.resolution) &&
      (input.hasImageInput ? c.supportsImageInput : !c.requiresImageInput) &&
      (c.maxPromptChars === undefined || input.promptChars === undefined || input.promptChars <= c.maxPromptChars),
  );
  if (ok.length === 0) return reject('no-compatible-provider', 'no remaining provider supports this combination of features');
  return ok;
}

/** FNV-1a, 32 bit: stable across processes and runtimes. */
export function stableHash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** The deterministic route: lowest priority (ties by name), or the task id's hash over the sorted providers. */
export function staticRoute(candidates: readonly RouteCandidate[], taskId: string, mode: 'priority' | 'hash' = 'priority'): RouteCandidate {
  const sorted = [...candidates].sort(
    (a, b) => (mode === 'hash' ? 0 : a.priority - b.priority) || (a.provider < b.provider ? -1 : a.provider > b.provider ? 1 : 0),
  );
  if (mode === 'hash') return sorted[stableHash(taskId) % sorted.length] as RouteCandidate;
  return sorted[0] as RouteCandidate;
}

const LATENCY_REF_MS = 120_000;

/** Health first, then latency, cost and the tenant's preference; half-open providers are penalised. */
export const defaultScorer: Scorer = (candidates, input, ctx) => {
  const maxCost = Math.max(...candidates.map((c) => c.costPerSecond), 1e-9);
  return candidates.map((c) => {
    if (ctx.now() > ctx.deadline) throw new Error('scoring budget exceeded');
    const h = input.health[c.provider];
    const errorRate = h ? Math.min(1, Math.max(0, h.errorRate)) : 0.1;
    const latency = h ? Math.min(1, Math.max(0, h.p95LatencyMs) / LATENCY_REF_MS) : 0.5;
    const score =
      3 * (1 - errorRate) -
      1 * latency -
      1 * (c.costPerSecond / maxCost) +
      (input.tenantPreference === c.provider ? 1.5 : 0) -
      (h?.breaker === 'half-open' ? 2 : 0);
    return { provider: c.provider, score };
  });
};

/** The best valid score among the candidates, or why the answer is unusable. */
function pickScored(answer: unknown, candidates: readonly RouteCandidate[]): RouteCandidate | 'empty-output' | 'invalid-output' {
  if (!Array.isArray(answer) || answer.length === 0) return 'empty-output';
  let best: { c: RouteCandidate; score: number } | null = null;
  for (const s of answer as unknown[]) {
    if (!s || typeof s !== 'object') return 'invalid-output';
    const { provider, score } = s as { provider?: unknown; score?: unknown };
    const c = candidates.find((x) => x.provider === provider);
    if (!c || typeof score !== 'number' || !Number.isFinite(score)) return 'invalid-output';
    if (!best || score > best.score || (score === best.score && c.priority < best.c.priority)) best = { c, score };
  }
  return best ? best.c : 'empty-output';
}

export function chooseRoute(input: RouteInput, options: RouterOptions): RouteDecision {
  const compatible = compatibleCandidates(input, options.catalog);
  if ('kind' in compatible) return compatible;
  const mode = options.staticRoute ?? 'priority';
  const fallback = (pool: readonly RouteCandidate[], reason: FallbackReason, allBreakersOpen = false): RouteDecision => {
    const c = staticRoute(pool, input.taskId, mode);
    return { kind: 'route', provider: c.provider, model: c.model, via: 'fallback', reason, allBreakersOpen };
  };
  const eligible = compatible.filter((c) => input.health[c.provider]?.breaker !== 'open');
  if (eligible.length === 0) return fallback(compatible, 'all-breakers-open', true);

  const start = options.now();
  const deadline = start + options.budgetMs;
  let answer: unknown;
  try {
    answer = (options.scorer ?? defaultScorer)(eligible, input, { now: options.now, deadline });
  } catch {
    return fallback(eligible, options.now() > deadline ? 'budget-exceeded' : 'scorer-error');
  }
  if (options.now() > deadline) return fallback(eligible, 'budget-exceeded');
  const picked = pickScored(answer, eligible);
  if (typeof picked === 'string') return fallback(eligible, picked);
  return { kind: 'route', provider: picked.provider, model: picked.model, via: 'scored', reason: 'best-score', allBreakersOpen: false };
}

/** One attempt of a task as the failover rule needs it. */
export interface AttemptSummary {
  readonly attemptNo: number;
  readonly provider: string;
  readonly state: AttemptState;
  /** A create the provider throttled (429): a rejection, but not one the attempt cap counts. */
  readonly throttled?: boolean;
}

export type FailoverVerdict =
  | { readonly allowed: true; readonly exclude: readonly string[] }
  | { readonly allowed: false; readonly reason: 'no-attempt' | 'outcome-unknown' | 'job-exists' | 'not-rejected' | 'attempts-exhausted' };

/**
 * Whether the task may be routed to another provider (docs/design.md §5): only after the latest
 * attempt was provably rejected, never while any attempt's outcome is unknown (SUBMITTING or
 * SUBMIT_UNKNOWN: a job may exist and would be paid twice), and never once a job exists.
 * `exclude` lists the providers that already rejected the task.
 */
export function mayFailOver(history: readonly AttemptSummary[], maxAttempts: number): FailoverVerdict {
  if (history.length === 0) return { allowed: false, reason: 'no-attempt' };
  if (history.some((a) => a.state === 'SUBMITTING' || a.state === 'SUBMIT_UNKNOWN')) return { allowed: false, reason: 'outcome-unknown' };
  if (history.some((a) => ['SUBMITTED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'].includes(a.state))) {
    return { allowed: false, reason: 'job-exists' };
  }
  const latest = [...history].sort((a, b) => b.attemptNo - a.attemptNo)[0] as AttemptSummary;
  if (latest.state !== 'REJECTED') return { allowed: false, reason: 'not-rejected' };
  if (history.filter((a) => !a.throttled).length >= maxAttempts) return { allowed: false, reason: 'attempts-exhausted' };
  return { allowed: true, exclude: [...new Set(history.filter((a) => a.state === 'REJECTED').map((a) => a.provider))] };
}
