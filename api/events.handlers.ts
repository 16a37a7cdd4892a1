// GET /v1/tasks/:id/events and GET /v1/events: live events as Server-Sent Events
// (docs/events.md). Everything that can be refused is refused before the stream starts, as
// problem+json: another tenant's task (404), a Last-Event-ID the stream never sent (400), one
// stream too many (429 per tenant, 503 per process). A tenant stream's Last-Event-ID older than
// the stream replays (EVENTS_RESUME_MAX_AGE_MS) is not replayed: the stream starts now with
// `event: resync`. A stream ends when its API key is revoked (at once, or when the revocation's
// grace ends: api/api-keys.ts).
import type { Request, Response } from 'express';
import { findTenantTask, isFutureTenantCursor, parseTenantCursor, tenantCursorTooOld, tenantStreamStart } from '../db/task-events';
import { isTerminal } from '../domain/states';
import type { ApiContext } from './context';
import { tenantOf } from './auth';
import { taskLastEventId, tenantEventsQuery, type ResyncEventData } from './events.schemas';
import { problems, zodFieldErrors } from './problem';
import { openSse } from './sse';
import { taskIdParam } from './tasks.schemas';

const LAST_EVENT_ID = 'header:Last-Event-ID';

/** Opens the stream only to say the mode sheds live events, then closes it. Returns true when it did. */
async function sentDegraded(ctx: ApiContext, req: Request, res: Response): Promise<boolean> {
  const d = ctx.events.degraded((await ctx.admission.state()).mode);
  if (!d) return false;
  const w = openSse(req, res);
  w.send({ event: 'degraded', data: d, retry: d.poll_after_ms });
  w.end();
  return true;
}

export function eventHandlers(ctx: ApiContext) {
  return {
    async task(req: Request, res: Response) {
      const key = tenantOf(req);
      const { tenantId } = key;
      const id = taskIdParam.safeParse(req.params['id']);
      if (!id.success) throw problems.notFound('task');
      const task = await findTenantTask(ctx.db, tenantId, id.data);
      if (!task) throw problems.notFound('task');
      const rawLast = req.get('last-event-id');
      let after = -1;
      if (rawLast !== undefined) {
        const parsed = taskLastEventId.safeParse(rawLast.trim());
        if (!parsed.success) throw problems.validation(zodFieldErrors(parsed.error, LAST_EVENT_ID));
        if (parsed.data > task.statusVersion) {
          throw problems.validation([
            { field: LAST_EVENT_ID, message: `ahead of the task's status_version ${task.statusVersion}: not an id this stream sent` },
          ]);
        }
        after = parsed.data;
      }
      // Everything up to the terminal transition was seen: 204 tells an EventSource to stop reconnecting.
      if (isTerminal(task.status) && after >= task.statusVersion) {
        res.status(204).end();
        return;
      }
      if (await sentDegraded(ctx, req, res)) return;
      const release = ctx.events.admit(tenantId);
      const w = openSse(req, res, ctx.events.settings.retryMs);
      w.onClose(release);
      w.onClose(ctx.keys.onRevoked(key, () => w.end()));
      ctx.events.runTaskStream(w, task.taskId, after);
    },

    async tenant(req: Request, res: Response) {
      const key = tenantOf(req);
      const { tenantId } = key;
      const q = tenantEventsQuery.safeParse(req.query);
      if (!q.success) throw problems.validation(zodFieldErrors(q.error, 'query'));
      const rawLast = req.get('last-event-id');
      let from;
      if (rawLast !== undefined) {
        from = parseTenantCursor(rawLast.trim());
        if (!from) throw problems.validation([{ field: LAST_EVENT_ID, message: 'must be an id this stream sent (<xact>-<transition>)' }]);
        if (await isFutureTenantCursor(ctx.db, from))
          throw problems.validation([
            { field: LAST_EVENT_ID, message: 'is ahead of every transition this service has written: not an id this stream sent; reconnect without it' },
          ]);
      }
      if (await sentDegraded(ctx, req, res)) return;
      // Past the retention: one probe of the tenant's index, instead of a replay of everything since.
      const maxAgeMs = ctx.events.settings.resumeMaxAgeMs;
      let resync: ResyncEventData | undefined;
      if (from && (await tenantCursorTooOld(ctx.db, tenantId, from, maxAgeMs))) {
        from = undefined;
        resync = {
          reason: 'resume_point_too_old',
          resume_max_age_ms: maxAgeMs,
          detail: `Last-Event-ID is older than the ${maxAgeMs} ms this stream replays: re-read your tasks (GET /v1/tasks, GET /v1/tasks/:id); live events follow from now`,
        };
      }
      from ??= await tenantStreamStart(ctx.db);
      const release = ctx.events.admit(tenantId);
      const w = openSse(req, res, ctx.events.settings.retryMs);
      w.onClose(release);
      w.onClose(ctx.keys.onRevoked(key, () => w.end()));
      ctx.events.runTenantStream(w, tenantId, from, q.data.status ?? null, resync);
    },
  };
}
