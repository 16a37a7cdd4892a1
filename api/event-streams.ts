// The open live event streams of one API process (docs/events.md): admission against the caps,
// and the loop each stream runs — subscribe to the hub first, then read Postgres from the
// stream's position, and read again on every wake. The rows are the truth, so a wake that never
// came (a NOTIFY lost with its connection) only delays an event until the next resync.
import type { Db } from '../db/client';
import {
  activeAttemptProgress,
  formatTenantCursor,
  laterCursor,
  taskTransitionsAfter,
  tenantTransitionsAfter,
  type TenantCursor,
  type TransitionEvent,
} from '../db/task-events';
import type { FenceState } from '../db/fence';
import { policyFor } from '../domain/modes';
import { isTerminal, type SystemMode } from '../domain/states';
import type { Logger } from '../observability/logger';
import type { EventHub, Wake } from './event-hub';
import type { DegradedEventData, ProgressEventData, ResyncEventData, TaskEventData } from './events.schemas';
import { HttpProblem } from './problem';
import type { SseWriter } from './sse';
import { presentActor, presentProgress } from './tasks.present';

export interface EventStreamSettings {
  readonly heartbeatMs: number;
  readonly progressIntervalMs: number;
  readonly maxPerTenant: number;
  readonly maxStreams: number;
  readonly pollAfterMs: number;
  /** The SSE `retry` every stream starts with. */
  readonly retryMs: number;
  /** How far back the tenant stream replays (EVENTS_RESUME_MAX_AGE_MS): an older Last-Event-ID gets `resync`. */
  readonly resumeMaxAgeMs: number;
  /** How old the mode read through `fence()` may be (the admission cache). */
  readonly fenceCacheMs: number;
  /** How soon a tenant stream reads again when a committed transition waits behind an open transaction. */
  readonly heldBackRetryMs?: number;
}

export interface EventStreams {
  readonly hub: EventHub;
  readonly settings: EventStreamSettings;
  /** Counts a new stream of the tenant, or throws 429 (tenant cap) / 503 (process cap). Returns the release. */
  admit(tenantId: string): () => void;
  /** Streams open now: in total and of one tenant. */
  open(tenantId?: string): number;
  /** The `degraded` event when `mode` sheds live events, else null. */
  degraded(mode: SystemMode): DegradedEventData | null;
  runTaskStream(w: SseWriter, taskId: string, afterVersion: number): void;
  /** `resync`: the client's Last-Event-ID was past the stream's retention; sent first, with `from` (now) as its id. */
  runTenantStream(w: SseWriter, tenantId: string, from: TenantCursor, statuses: readonly string[] | null, resync?: ResyncEventData): void;
  /** Ends every open stream and the hub's connection (server shutdown). */
  close(): Promise<void>;
}

export interface EventStreamsDeps {
  readonly db: Db;
  readonly hub: EventHub;
  readonly logger: Logger;
  readonly settings: EventStreamSettings;
  readonly fence: () => Promise<FenceState>;
  readonly onSent?: (event: string) => void;
}

const PAGE = 200;

export function transitionData(e: TransitionEvent): TaskEventData {
  return {
    task_id: e.taskId,
    status: e.toStatus,
    previous_status: e.fromStatus,
    status_version: e.version,
    at: e.at.toISOString(),
    reason: e.sourceEvent,
    actor: presentActor(e.actor),
    terminal: isTerminal(e.toStatus),
    failure: e.failure,
  };
}

export function createEventStreams(deps: EventStreamsDeps): EventStreams {
  const { db, hub, logger, settings } = deps;
  const perTenant = new Map<string, number>();
  const writers = new Set<SseWriter>();
  let total = 0;
  let closing = false;

  const degraded = (mode: SystemMode): DegradedEventData | null =>
    policyFor(mode).liveEvents
      ? null
      : {
          mode,
          poll_after_ms: settings.pollAfterMs,
          detail: `system mode is ${mode}: live events are paused; poll GET /v1/tasks/:id, or reconnect with Last-Event-ID after poll_after_ms`,
        };

  /** What every stream does besides its own reads: heartbeats, the mode, cleanup. */
  function frame(w: SseWriter, kind: string, watch: (onWake: (wake: Wake) => void) => () => void, onWake: (wake: Wake) => void, onEnd: () => void) {
    writers.add(w);
    const send: SseWriter['send'] = (e) => {
      w.send(e);
      deps.onSent?.(e.event);
    };
    const checkMode = async () => {
      try {
        const d = degraded((await deps.fence()).mode);
        if (d && !w.closed) {
          send({ event: 'degraded', data: d, retry: d.poll_after_ms });
          w.end();
        }
      } catch (err) {
        logger.debug({ err, kind }, 'event stream: mode read failed');
      }
    };
    let fenceTimer: NodeJS.Timeout | null = null;
    const unwatch = watch((wake) => {
      if (w.closed) return;
      if (wake.kind !== 'fence') return onWake(wake);
      void checkMode();
      // The mode is read through the admission cache (≤ 1 s old): look again once it has expired.
      if (!fenceTimer) {
        fenceTimer = setTimeout(() => {
          fenceTimer = null;
          void checkMode();
        }, settings.fenceCacheMs + 100);
      }
    });
    const heartbeat = setInterval(() => {
      w.comment('heartbeat');
      void checkMode();
    }, settings.heartbeatMs);
    w.onClose(() => {
      writers.delete(w);
      clearInterval(heartbeat);
      if (fenceTimer) clearTimeout(fenceTimer);
      unwatch();
      onEnd();
    });
    return { send };
  }

  /** Runs `read` one at a time; a wake during a read runs it once more after. */
  function serial(w: SseWriter, kind: string, read: () => Promise<void>) {
    let running = false;
    let again = false;
    return async function run(): Promise<void> {
      if (running) {
        again = true;
        return;
      }
      running = true;
      try {
        do {
          again = false;
          await read();
        } while (again && !w.closed);
      } catch (err) {
        // The client reconnects with its Last-Event-ID and misses nothing.
        logger.warn({ err, kind }, 'event stream read failed; closing the stream');
        w.end();
      } finally {
        running = false;
      }
    };
  }

  return {
    hub,
    settings,
    degraded,
    admit(tenantId) {
      const mine = perTenant.get(tenantId) ?? 0;
      if (closing || total >= settings.maxStreams) {
        throw new HttpProblem(
          503,
          'unavailable',
          'The service cannot take this request now',
          'this API process has all the event streams it can hold; retry',
          [],
          { 'Retry-After': '5' },
        );
      }
      if (mine >= settings.maxPerTenant) {
        throw new HttpProblem(
          429,
          'too-many-streams',
          'Too many open event streams',
          `at most ${settings.maxPerTenant} open event streams per tenant; close one first`,
          [],
          { 'Retry-After': '5' },
        );
      }
      perTenant.set(tenantId, mine + 1);
      total += 1;
      let released = false;
      return () => {
        if (released) return;
        released = true;
        total -= 1;
        const n = (perTenant.get(tenantId) ?? 1) - 1;
        if (n <= 0) perTenant.delete(tenantId);
        else perTenant.set(tenantId, n);
      };
    },
    open: (tenantId) => (tenantId === undefined ? total : (perTenant.get(tenantId) ?? 0)),

    runTaskStream(w, taskId, afterVersion) {
      let position = afterVersion;
      let progressTimer: NodeJS.Timeout | null = null;
      let lastProgressAt = 0;
      let lastProgress: string | null = null;
      const { send } = frame(
        w,
        'task',
        (l) => hub.watchTask(taskId, l),
        (wake) => {
          if (wake.kind === 'progress') progressDue();
          else void transitions();
        },
        () => {
          if (progressTimer) clearTimeout(progressTimer);
        },
      );
      const transitions = serial(w, 'task', async () => {
        for (;;) {
          const rows = await taskTransitionsAfter(db, taskId, position, PAGE);
          for (const e of rows) {
            if (w.closed) return;
            send({ event: 'transition', id: String(e.version), data: transitionData(e) });
            position = e.version;
            if (isTerminal(e.toStatus)) {
              w.end();
              return;
            }
          }
          if (rows.length < PAGE) return;
        }
      });
      const progress = serial(w, 'task-progress', async () => {
        const p = await activeAttemptProgress(db, taskId);
        if (!p?.progress || w.closed) return;
        const data: ProgressEventData = { task_id: taskId, ...presentProgress(p) };
        const key = JSON.stringify(data);
        if (key === lastProgress) return;
        lastProgress = key;
        send({ event: 'progress', data });
      });
      // At most one progress event per progressIntervalMs: a change inside the window is sent at its end (the latest value).
      function progressDue() {
        if (progressTimer || w.closed) return;
        const wait = Math.max(0, lastProgressAt + settings.progressIntervalMs - Date.now());
        progressTimer = setTimeout(() => {
          progressTimer = null;
          lastProgressAt = Date.now();
          void progress();
        }, wait);
      }
      void transitions().then(() => progressDue());
    },

    runTenantStream(w, tenantId, from, statuses, resync) {
      let position = from;
      let retryTimer: NodeJS.Timeout | null = null;
      const wanted = statuses ? new Set(statuses) : null;
      const { send } = frame(
        w,
        'tenant',
        (l) => hub.watchTenant(tenantId, l),
        (wake) => {
          if (wake.kind !== 'progress') void transitions();
        },
        () => {
          if (retryTimer) clearTimeout(retryTimer);
        },
      );
      // Its id is the position the stream goes on from: a reconnect resumes there, not from the old id.
      if (resync) send({ event: 'resync', id: formatTenantCursor(from), data: resync });
      const transitions = serial(w, 'tenant', async () => {
        for (;;) {
          const page = await tenantTransitionsAfter(db, tenantId, position, PAGE);
          for (const e of page.events) {
            if (w.closed) return;
            position = e.cursor;
            if (!wanted || wanted.has(e.toStatus)) send({ event: 'transition', id: formatTenantCursor(e.cursor), data: transitionData(e) });
          }
          if (page.through) position = laterCursor(position, page.through);
          if (page.heldBack && !retryTimer && !w.closed) {
            // A committed transition waits behind a transaction still open: read again soon.
            retryTimer = setTimeout(() => {
              retryTimer = null;
              void transitions();
            }, settings.heldBackRetryMs ?? 200);
          }
          if (!page.more) return;
        }
      });
      void transitions();
    },

    async close() {
      closing = true;
      for (const w of [...writers]) w.end();
      await hub.stop();
    },
  };
}
