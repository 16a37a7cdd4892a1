// Admission control: what this API process may do right now, decided by the system mode and
// active region (region_write_fence, the policy table in domain/modes.ts) and by automatic
// narrowing (the outbox backlog against its watermark; Postgres reachable at all). The fence
// and the backlog are read at most once per cache period (1 s in production), so a mode change
// reaches every API process within about a second.
import type { NextFunction, Request, Response } from 'express';
import { sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { readFence, type FenceState } from '../db/fence';
import { heldRoutes } from '../db/catalog-routes';
import type { HeldRoutes } from '../domain/catalog';
import { modeForbids, policyFor, type CallbackRoute, type ModeAction } from '../domain/modes';
import { reusedFor } from '../observability/reuse';
import { isDatabaseUnavailable, problems, RETRY_AFTER_MODE_S } from './problem';

export interface OutboxWatermark {
  /** More unpublished rows than this narrows admission. */
  readonly count: number;
  /** An unpublished row older than this narrows admission. */
  readonly ageMs: number;
}

export interface OutboxBacklog {
  /** Unpublished rows, counted up to the watermark + 1. */
  readonly count: number;
  readonly oldestAgeMs: number;
}

export interface Readiness {
  readonly ready: boolean;
  readonly region: string;
  readonly activeRegion: string | null;
  readonly mode: string | null;
  readonly epoch: number | null;
  /** What this instance admits now. */
  readonly admits: { readonly create: boolean; readonly read: boolean; readonly cancel: boolean; readonly callback: CallbackRoute };
  /** Why creates are not admitted (empty when ready). */
  readonly reasons: readonly string[];
  readonly outbox: OutboxBacklog | null;
}

export interface Admission {
  state(): Promise<FenceState>;
  /** Throws a 503 problem (with Retry-After) unless new tasks may be created here. */
  assertCanCreate(): Promise<FenceState>;
  /** Throws a 503 problem unless a cancel may be recorded here. */
  assertCanWrite(): Promise<FenceState>;
  /** Throws a 503 problem unless tasks may be read (not in MAINTENANCE). */
  assertCanRead(): Promise<FenceState>;
  /**
   * Where a verified callback goes now: the inbox, or the spool when the mode or Postgres rules
   * the inbox out (`why`, recorded with the spooled callback).
   */
  callbackRoute(): Promise<{ route: 'inbox' } | { route: 'spool'; why: 'mode' | 'database-unavailable' }>;
  readiness(): Promise<Readiness>;
  /** The catalog routes held off after a breaking schema change (docs/decisions/0072), read once per cache period. */
  heldRoutes(): Promise<HeldRoutes>;
}

const RETRY_AFTER_BACKLOG_S = 30;

export function createAdmission(db: Db, fence: { scope: string; region: string }, ttlMs = 1_000, opts: { watermark?: OutboxWatermark } = {}): Admission {
  const watermark = opts.watermark ?? { count: 10_000, ageMs: 10 * 60_000 };
  // One read per period however many requests ask at once (a readiness probe flood, a burst of
  // creates): callers within the period share the read in flight or its result.
  const state = reusedFor(ttlMs, async (): Promise<FenceState> => {
    const s = await readFence(db, fence.scope);
    if (!s) throw problems.unavailable(`no region fence for scope ${fence.scope}; run migrations`, RETRY_AFTER_MODE_S);
    return s;
  });

  const backlog = reusedFor(ttlMs, async (): Promise<OutboxBacklog> => {
    // Counted up to the watermark only: past it the exact number does not change the answer.
    const { rows } = await db.execute(sql`
      SELECT
        (SELECT count(*)::int FROM (SELECT 1 FROM outbox_event WHERE published_at IS NULL LIMIT ${watermark.count + 1}) x) AS n,
        (SELECT coalesce(extract(epoch FROM now() - min(created_at)) * 1000, 0)::float FROM outbox_event WHERE published_at IS NULL) AS age_ms`);
    const row = rows[0] as { n: number; age_ms: number };
    return { count: row.n, oldestAgeMs: Math.round(row.age_ms) };
  });

  const held = reusedFor(ttlMs, () => heldRoutes(db));

  function regionProblem(s: FenceState, what: string) {
    return s.activeRegion !== fence.region ? `region ${fence.region} is not the active region (${s.activeRegion}); ${what} go there` : null;
  }

  function backlogProblem(b: OutboxBacklog): string | null {
    if (b.count > watermark.count) return `outbox backlog over its watermark (${watermark.count} unpublished): new tasks are paused`;
    if (b.oldestAgeMs > watermark.ageMs) {
      return `the oldest unpublished task has waited ${Math.round(b.oldestAgeMs / 1000)} s (watermark ${Math.round(watermark.ageMs / 1000)} s): new tasks are paused`;
    }
    return null;
  }

  async function check(action: ModeAction, what: string, needsActiveRegion: boolean): Promise<FenceState> {
    const s = await state();
    const wrongRegion = needsActiveRegion ? regionProblem(s, what) : null;
    if (wrongRegion) throw problems.unavailable(wrongRegion, RETRY_AFTER_MODE_S);
    const forbidden = modeForbids(s.mode, action);
    if (forbidden) throw problems.unavailable(forbidden, RETRY_AFTER_MODE_S);
    return s;
  }

  return {
    state,
    async assertCanCreate() {
      const s = await check('create', 'new tasks', true);
      const narrowed = backlogProblem(await backlog());
      if (narrowed) throw problems.unavailable(narrowed, RETRY_AFTER_BACKLOG_S);
      return s;
    },
    assertCanWrite: () => check('cancel', 'changes', true),
    heldRoutes: held,
    assertCanRead: () => check('read', 'reads', false),
    async callbackRoute() {
      try {
        return policyFor((await state()).mode).callback === 'spool' ? { route: 'spool', why: 'mode' } : { route: 'inbox' };
      } catch (err) {
        if (isDatabaseUnavailable(err)) return { route: 'spool', why: 'database-unavailable' };
        throw err;
      }
    },
    async readiness() {
      const reasons: string[] = [];
      let s: FenceState | null = null;
      let b: OutboxBacklog | null = null;
      try {
        s = await state();
        b = await backlog();
      } catch (err) {
        if (!isDatabaseUnavailable(err)) throw err;
        reasons.push('the task database is unreachable');
      }
      const policy = s ? policyFor(s.mode) : null;
      if (s) {
        const wrongRegion = regionProblem(s, 'new tasks');
        if (wrongRegion) reasons.push(wrongRegion);
        const forbidden = modeForbids(s.mode, 'create');
        if (forbidden) reasons.push(forbidden);
      }
      const narrowed = b ? backlogProblem(b) : null;
      if (narrowed) reasons.push(narrowed);
      const active = s?.activeRegion === fence.region;
      return {
        ready: reasons.length === 0,
        region: fence.region,
        activeRegion: s?.activeRegion ?? null,
        mode: s?.mode ?? null,
        epoch: s?.epoch ?? null,
        admits: {
          create: reasons.length === 0,
          read: policy?.read ?? false,
          cancel: Boolean(policy?.cancel && active),
          callback: policy?.callback ?? 'spool',
        },
        reasons,
        outbox: b,
      };
    },
  };
}

/** The detailed readiness the operator listener serves (never the public port). */
export function readinessDetail(r: Readiness): Record<string, unknown> {
  return {
    region: r.region,
    active_region: r.activeRegion,
    mode: r.mode,
    epoch: r.epoch,
    admits: r.admits,
    reasons: r.reasons,
    outbox: r.outbox ? { backlog: r.outbox.count, oldest_age_seconds: Math.round(r.outbox.oldestAgeMs / 1000) } : null,
  };
}

/** Express middleware: GET requests answer 503 while the mode pauses reads (MAINTENANCE). */
export function readGate(admission: Admission) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    if (req.method === 'GET' || req.method === 'HEAD') await admission.assertCanRead();
    next();
  };
}
