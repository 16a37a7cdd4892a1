// Which provider attempt N of a task goes to (docs/design.md §5–§6). The first attempt is
// routed by score (domain/router.ts) from this process's view of provider health; a later
// attempt may fail over to another provider only after the earlier ones were provably rejected,
// and an attempt whose outcome was ever unknown pins the task to its provider for good. The
// answer is written into the attempt row by the caller, so Postgres keeps the decision and a
// retried or reset step reads it instead of routing again.
import { findModel, routerCatalog, type HeldRoutes } from '../domain/catalog';
import { chooseRoute, mayFailOver, type AttemptSummary, type ProviderHealth, type RouteRejectionReason } from '../domain/router';
import type { AttemptState } from '../domain/states';
import { LatencyWindow } from '../domain/latency-window';
import type { ProviderGuard } from './provider-guard';

export interface RoutingSettings {
  /** Time budget of the scorer, ms (ROUTER_BUDGET_MS). */
  readonly budgetMs: number;
  /** The deterministic fallback route (ROUTER_STATIC_ROUTE). */
  readonly staticRoute: 'priority' | 'hash';
}

/** An attempt row as routing needs it. */
export interface AttemptRecord {
  readonly attempt_no: number;
  readonly provider: string;
  readonly submit_state: string;
  /** Set when the outcome was ever unknown (even if later proved absent). */
  readonly unknown_since: Date | null;
  /** The provider throttled it (429): not counted against the attempt cap (docs/decisions/0057). */
  readonly throttled?: boolean;
}

export interface TaskRouteInput {
  readonly taskId: string;
  /** The stored request (what the tenant ordered). */
  readonly request: unknown;
  /** The task's provider and model as stored (the static first choice, or the last route). */
  readonly provider: string;
  readonly providerModel: string;
}

export type AttemptRoute =
  | {
      readonly kind: 'route';
      readonly provider: string;
      readonly model: string;
      /** How it was chosen: by score, by the static fallback, or pinned (one route, or an unknown outcome). */
      readonly via: 'scored' | 'fallback' | 'pinned';
      readonly reason: string;
    }
  | { readonly kind: 'rejected'; readonly reason: RouteRejectionReason; readonly detail: string };

/**
 * What this process has seen of its providers' submits and of its route decisions. One per
 * worker process, built in its composition root (config/services.ts buildActivityDeps): the
 * submit activity records latencies, the router reads them, and /metrics reads the decisions.
 */
export class RouteStats {
  private readonly submitLatency = new Map<string, LatencyWindow>();
  private readonly decisions = new Map<string, number>();

  /** Records how long one provider submit took (the submit activity calls this). */
  recordSubmitLatency(provider: string, ms: number): void {
    let w = this.submitLatency.get(provider);
    if (!w) this.submitLatency.set(provider, (w = new LatencyWindow()));
    w.record(ms);
  }

  /** The p95 of this provider's recent submits, ms (0 before the first). */
  submitP95(provider: string): number {
    return this.submitLatency.get(provider)?.p95() ?? 0;
  }

  /** Counts one route decision (`vidorch_route_decisions_total`). */
  count(route: AttemptRoute): AttemptRoute {
    const key = route.kind === 'route' ? `${route.provider}|${route.via}|${route.reason}` : `none|rejected|${route.reason}`;
    this.decisions.set(key, (this.decisions.get(key) ?? 0) + 1);
    return route;
  }

  /** Route decisions of this process by provider, path and reason. */
  decisionCounts(): ReadonlyArray<{ provider: string; via: string; reason: string; count: number }> {
    return [...this.decisions].map(([k, count]) => {
      const [provider = '', via = '', reason = ''] = k.split('|');
      return { provider, via, reason, count };
    });
  }
}

/** Provider health as the router reads it, from this process's breakers and submit timings. */
export function localProviderHealth(guard: ProviderGuard, stats: RouteStats): Record<string, ProviderHealth> {
  const out: Record<string, ProviderHealth> = {};
  for (const [provider, s] of Object.entries(guard.snapshots())) {
    out[provider] = { errorRate: s.breaker.failureRate, p95LatencyMs: stats.submitP95(provider), breaker: s.breaker.state };
  }
  return out;
}

/** An attempt that was ever unknown counts as unknown for failover, even once proved absent. */
function summarize(a: AttemptRecord): AttemptSummary {
  const state = (a.unknown_since ? 'SUBMIT_UNKNOWN' : a.submit_state) as AttemptState;
  return { attemptNo: a.attempt_no, provider: a.provider, state, ...(a.throttled ? { throttled: true } : {}) };
}

/**
 * The provider and model for the next attempt of a task. `history` is every earlier attempt;
 * `available` the providers configured in this process; `health` this process's view of them
 * (localProviderHealth); the decision is counted in `stats`.
 */
export function routeNextAttempt(
  task: TaskRouteInput,
  history: readonly AttemptRecord[],
  opts: {
    readonly available: readonly string[];
    /** Routes held off after a breaking change of their model's schema: never chosen. */
    readonly held?: HeldRoutes;
    readonly maxAttempts: number;
    readonly settings: RoutingSettings;
    readonly health: Readonly<Record<string, ProviderHealth | undefined>>;
    readonly stats: RouteStats;
    readonly now?: () => number;
  },
): AttemptRoute {
  const req = (task.request ?? {}) as {
    model?: unknown;
    prompt?: unknown;
    duration_seconds?: unknown;
    resolution?: unknown;
    input_image_url?: unknown;
    provider?: unknown;
  };
  const entry = typeof req.model === 'string' ? findModel(req.model) : undefined;
  // A model the catalog no longer lists keeps the provider it was created with.
  if (!entry) return opts.stats.count({ kind: 'route', provider: task.provider, model: task.providerModel, via: 'pinned', reason: 'not-in-catalog' });

  const earlier = history.map(summarize);
  let exclude: readonly string[] = [];
  if (earlier.length > 0) {
    const verdict = mayFailOver(earlier, opts.maxAttempts);
    if (!verdict.allowed) {
      // Never re-route once an outcome was unknown (a job may exist there) or a job existed.
      const latest = [...history].sort((a, b) => b.attempt_no - a.attempt_no)[0] as AttemptRecord;
      const route = entry.routes.find((r) => r.provider === latest.provider);
      return opts.stats.count({ kind: 'route', provider: latest.provider, model: route?.model ?? task.providerModel, via: 'pinned', reason: verdict.reason });
    }
    exclude = verdict.exclude;
  }

  const { settings } = opts;
  const catalog = routerCatalog(opts.available, opts.held);
  const choose = (excluded: readonly string[]) =>
    chooseRoute(
      {
        taskId: task.taskId,
        modelFamily: entry.model,
        durationSeconds: req.duration_seconds as number,
        resolution: req.resolution as string,
        hasImageInput: typeof req.input_image_url === 'string',
        ...(typeof req.prompt === 'string' ? { promptChars: req.prompt.length } : {}),
        tenantPreference: typeof req.provider === 'string' ? req.provider : null,
        exclude: excluded,
        health: opts.health,
      },
      { catalog, budgetMs: settings.budgetMs, now: opts.now ?? (() => performance.now()), staticRoute: settings.staticRoute },
    );
  let decision = choose(exclude);
  // Every compatible provider rejected once already: try them again rather than give up early.
  if (decision.kind === 'rejected' && decision.reason === 'no-compatible-provider' && exclude.length > 0) decision = choose([]);
  if (decision.kind === 'rejected') return opts.stats.count(decision);
  const single = (catalog[entry.model]?.length ?? 0) === 1;
  return opts.stats.count({
    kind: 'route',
    provider: decision.provider,
    model: decision.model,
    via: single ? 'pinned' : decision.via,
    reason: single ? 'single-route' : decision.reason,
  });
}
