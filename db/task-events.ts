// Reads behind the live event streams (docs/events.md). The task_transition rows are the truth;
// a NOTIFY only says "read again". A task's stream resumes by status_version (one writer at a
// time per task: version n+1 is written by a transaction that saw n committed). The tenant-wide
// stream resumes by (xact_id, transition_id): a row becomes readable only once every transaction
// that started before it has ended, so no later commit can land behind a cursor already handed
// out (docs/decisions/0020-event-stream-resume.md).
import { and, asc, eq, gt, sql, type SQL } from 'drizzle-orm';
import type { ProviderProgress } from '../domain/progress';
import type { TaskStatus } from '../domain/states';
import type { Db } from './client';
import { generationTask, taskAttempt, taskTransition } from './schema';

export interface TransitionEvent {
  readonly transitionId: number;
  readonly taskId: string;
  readonly fromStatus: TaskStatus | null;
  readonly toStatus: TaskStatus;
  readonly version: number;
  readonly sourceEvent: string;
  readonly actor: string;
  readonly at: Date;
  /** The task's failure (set with FAILED, the only transition that carries it). */
  readonly failure: { readonly code: string; readonly message: string | null } | null;
}

/** A position in the tenant-wide stream: after the transition (xactId, transitionId). */
export interface TenantCursor {
  readonly xactId: string;
  readonly transitionId: number;
}

// No leading zeros: Postgres reads a leading 0 in an xid8 as octal (and stops at an 8 or 9), so
// `0999-1` would mean one place here and another in SQL.
const CURSOR_RE = /^(0|[1-9]\d{0,19})-(0|[1-9]\d{0,15})$/;

export const formatTenantCursor = (c: TenantCursor): string => `${c.xactId}-${c.transitionId}`;

/** Parses a tenant-stream event id; null when it is not one. */
export function parseTenantCursor(s: string): TenantCursor | null {
  const m = CURSOR_RE.exec(s);
  if (!m) return null;
  const transitionId = Number(m[2]);
  // xid8 is unsigned 64-bit: compare as BigInt to reject an overflow.
  if (!Number.isSafeInteger(transitionId) || BigInt(m[1]!) > 18_446_744_073_709_551_615n) return null;
  return { xactId: m[1]!, transitionId };
}

const failureOf = (to: string, code: string | null, message: string | null) => (to === 'FAILED' && code ? { code, message } : null);

/** The tenant's task (status and version), or null: another tenant's task is not found. */
export async function findTenantTask(db: Db, tenantId: string, taskId: string) {
  const [row] = await db
    .select({ taskId: generationTask.task_id, status: generationTask.status, statusVersion: generationTask.status_version })
    .from(generationTask)
    .where(and(eq(generationTask.task_id, taskId), eq(generationTask.tenant_id, tenantId)));
  return row ?? null;
}

/** The task's transitions after `afterVersion`, oldest first. */
export async function taskTransitionsAfter(db: Db, taskId: string, afterVersion: number, limit: number): Promise<TransitionEvent[]> {
  const rows = await db
    .select({ t: taskTransition, failureCode: generationTask.failure_code, failureMessage: generationTask.failure_message })
    .from(taskTransition)
    .innerJoin(generationTask, eq(generationTask.task_id, taskTransition.task_id))
    .where(and(eq(taskTransition.task_id, taskId), gt(taskTransition.to_version, afterVersion)))
    .orderBy(asc(taskTransition.to_version))
    .limit(limit);
  return rows.map(({ t, failureCode, failureMessage }) => ({
    transitionId: t.transition_id,
    taskId: t.task_id,
    fromStatus: t.from_status,
    toStatus: t.to_status,
    version: t.to_version,
    sourceEvent: t.source_event,
    actor: t.actor,
    at: t.created_at,
    failure: failureOf(t.to_status, failureCode, failureMessage),
  }));
}

/**
 * Whether a tenant cursor lies past every transaction this database has begun: not an id any
 * stream of ours sent (those name transactions that had ended), or one from before the database
 * was restored to an earlier moment. Going on from it would skip whatever is written next.
 */
export async function isFutureTenantCursor(db: Db, cursor: TenantCursor): Promise<boolean> {
  const { rows } = await db.execute(sql`SELECT ${cursor.xactId}::xid8 > pg_snapshot_xmax(pg_current_snapshot()) AS ahead`);
  return (rows[0] as { ahead: boolean }).ahead;
}

/** Where a tenant stream without Last-Event-ID starts: every transition not yet final (about "now"). */
export async function tenantStreamStart(db: Db): Promise<TenantCursor> {
  const { rows } = await db.execute(sql`SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS xmin`);
  return { xactId: (rows[0] as { xmin: string }).xmin, transitionId: 0 };
}

export interface TenantPage {
  /** Final transitions after the cursor, in stream order, each with its own cursor. */
  readonly events: readonly (TransitionEvent & { readonly cursor: TenantCursor })[];
  /** True when a committed transition waits behind a transaction still open (read again shortly). */
  readonly heldBack: boolean;
  /** True when the page was full (read again at once). */
  readonly more: boolean;
  /**
   * When the page was not full: a cursor past every row of the tenant's this read could see and
   * before any it could not (the snapshot's xmin). A stream that goes on from it instead of its
   * last event no longer reads the other tenants' transitions since then again on every wake.
   */
  readonly through: TenantCursor | null;
}

/**
 * The tenant stream's read as one statement (exported so a test can EXPLAIN it). One snapshot:
 * pg_current_snapshot() is the snapshot the rows are read with, so every transaction below its
 * xmin has ended and its rows here are all there will ever be. The rows are the tenant's own,
 * in stream order from the cursor, through idx_task_transition_tenant_xact: the read costs the
 * tenant's transitions after the cursor, never the other tenants'. The outer join keeps the
 * xmin when the tenant has no row: `through` below.
 */
export function tenantPageQuery(tenantId: string, cursor: TenantCursor, limit: number): SQL {
  return sql`
    WITH h AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin),
    page AS (
      SELECT tt.transition_id, tt.task_id, tt.from_status, tt.to_status, tt.to_version, tt.source_event, tt.actor,
             tt.created_at, tt.xact_id, g.failure_code, g.failure_message, (tt.xact_id < h.xmin) AS final
      FROM task_transition tt JOIN generation_task g ON g.task_id = tt.task_id CROSS JOIN h
      WHERE tt.tenant_id = ${tenantId} AND (tt.xact_id, tt.transition_id) > (${cursor.xactId}::xid8, ${cursor.transitionId}::bigint)
      ORDER BY tt.xact_id, tt.transition_id
      LIMIT ${limit})
    SELECT h.xmin::text AS snapshot_xmin, page.transition_id, page.task_id, page.from_status, page.to_status, page.to_version,
           page.source_event, page.actor, page.created_at, page.xact_id::text AS xact_id, page.failure_code, page.failure_message, page.final
    FROM h LEFT JOIN page ON true
    ORDER BY page.xact_id, page.transition_id`;
}

/**
 * Whether resuming the tenant's stream from `cursor` would replay a transition written more than
 * `maxAgeMs` ago: the stream's retention (EVENTS_RESUME_MAX_AGE_MS, docs/events.md "Resync").
 * Such a resume is answered with `event: resync` instead of the replay. One probe of the
 * tenant's index: the tenant's first transition after the cursor, whatever the others wrote.
 */
export async function tenantCursorTooOld(db: Db, tenantId: string, cursor: TenantCursor, maxAgeMs: number): Promise<boolean> {
  const { rows } = await db.execute(sql`
    SELECT created_at < now() - make_interval(secs => ${maxAgeMs / 1000}) AS too_old
    FROM task_transition
    WHERE tenant_id = ${tenantId} AND (xact_id, transition_id) > (${cursor.xactId}::xid8, ${cursor.transitionId}::bigint)
    ORDER BY xact_id, transition_id
    LIMIT 1`);
  return (rows[0] as { too_old: boolean } | undefined)?.too_old === true;
}

/** The tenant's final transitions after `cursor`, in (xact_id, transition_id) order. */
export async function tenantTransitionsAfter(db: Db, tenantId: string, cursor: TenantCursor, limit: number): Promise<TenantPage> {
  const { rows } = await db.execute(tenantPageQuery(tenantId, cursor, limit));
  type Row = {
    snapshot_xmin: string;
    transition_id: string | number;
    task_id: string;
    from_status: TaskStatus | null;
    to_status: TaskStatus;
    to_version: string | number;
    source_event: string;
    actor: string;
    created_at: string | Date;
    xact_id: string;
    failure_code: string | null;
    failure_message: string | null;
    final: boolean;
  };
  const events: (TransitionEvent & { cursor: TenantCursor })[] = [];
  let heldBack = false;
  const found = (rows as Row[]).filter((r) => r.transition_id !== null);
  for (const r of found) {
    // Rows are in xact order: past the first one not yet final, none is.
    if (!r.final) {
      heldBack = true;
      break;
    }
    const transitionId = Number(r.transition_id);
    events.push({
      transitionId,
      taskId: r.task_id,
      fromStatus: r.from_status,
      toStatus: r.to_status,
      version: Number(r.to_version),
      sourceEvent: r.source_event,
      actor: r.actor,
      at: new Date(r.created_at),
      failure: failureOf(r.to_status, r.failure_code, r.failure_message),
      cursor: { xactId: r.xact_id, transitionId },
    });
  }
  const more = !heldBack && found.length === limit;
  // A page that was not full holds every row of the tenant's below the snapshot's xmin, and every
  // later row will have a larger xact id: nothing of the tenant's is left to read before
  // (xmin, 0), whoever else wrote there.
  const xmin = (rows as Row[])[0]?.snapshot_xmin;
  return { events, heldBack, more, through: !more && xmin ? { xactId: xmin, transitionId: 0 } : null };
}

/** The later of two tenant cursors. */
export function laterCursor(a: TenantCursor, b: TenantCursor): TenantCursor {
  const [x, y] = [BigInt(a.xactId), BigInt(b.xactId)];
  return x > y || (x === y && a.transitionId >= b.transitionId) ? a : b;
}

export interface TaskProgress {
  readonly attemptId: string;
  readonly provider: string;
  readonly providerStatus: string | null;
  readonly progress: ProviderProgress | null;
  readonly at: Date | null;
}

/** The active attempt's latest provider progress, or null when the task has no attempt yet. */
export async function activeAttemptProgress(db: Db, taskId: string): Promise<TaskProgress | null> {
  const [row] = await db
    .select({
      attemptId: taskAttempt.attempt_id,
      provider: taskAttempt.provider,
      providerStatus: taskAttempt.provider_status,
      progress: taskAttempt.progress,
      at: taskAttempt.progress_at,
    })
    .from(generationTask)
    .innerJoin(taskAttempt, eq(taskAttempt.attempt_id, generationTask.active_attempt_id))
    .where(eq(generationTask.task_id, taskId));
  return row ?? null;
}
