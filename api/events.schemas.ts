// The live event streams' wire shapes (docs/events.md): the `data` of each SSE event, as zod
// schemas the handlers build their payloads with (and /openapi.json can register).
import { z } from 'zod';
import { SYSTEM_MODES, TASK_STATES } from '../domain/states';

/** A transition's `actor`, as the task and its event streams show it (api/tasks.present.ts presentActor). */
export const ACTOR_DESCRIPTION = 'Who made the change: `tenant:<your tenant id>`, `workflow`, `schedule`, or `operator` (an operator of the service)';

/** `event: transition` — one per task_transition row; the SSE `id` is the resume id. */
export const TaskEventData = z
  .object({
    task_id: z.uuid(),
    status: z.enum(TASK_STATES),
    previous_status: z.enum(TASK_STATES).nullable().describe('null for the creation (version 0)'),
    status_version: z.int().min(0).describe("The task's status_version after this transition; on a task stream also the SSE id"),
    at: z.iso.datetime({ offset: true }),
    reason: z.string().describe('What caused it, as GET /v1/tasks/:id lists it in transitions[].source_event'),
    actor: z.string().describe(ACTOR_DESCRIPTION),
    terminal: z.boolean().describe('SUCCEEDED, FAILED or CANCELLED: the task stream closes after this event'),
    failure: z.object({ code: z.string(), message: z.string().nullable() }).nullable(),
  })
  .describe('A task changed status');
export type TaskEventData = z.infer<typeof TaskEventData>;

/** The provider's progress as GET /v1/tasks/:id shows it (`progress`). */
export const ProgressView = z.object({
  attempt_id: z.uuid(),
  provider: z.string(),
  provider_status: z.string().nullable(),
  fraction: z.number().min(0).max(1).nullable().describe("Runway: the task's progress"),
  queue_position: z.int().min(0).nullable().describe('fal: place in the queue, 0 = next'),
  logs: z.string().nullable().describe("fal and Replicate: the tail of the model's logs"),
  at: z.iso.datetime({ offset: true }).nullable(),
});
export type ProgressView = z.infer<typeof ProgressView>;

/** `event: progress` — no SSE id (progress is a latest value, not replayed), at most one per task per EVENTS_PROGRESS_INTERVAL_MS. */
export const ProgressEventData = ProgressView.extend({ task_id: z.uuid() }).describe('The provider reported progress');
export type ProgressEventData = z.infer<typeof ProgressEventData>;

/** `event: degraded` — the mode sheds pushed events: poll, or reconnect after `poll_after_ms` (the SSE `retry`). */
export const DegradedEventData = z
  .object({
    mode: z.enum(SYSTEM_MODES),
    poll_after_ms: z.int().min(0),
    detail: z.string(),
  })
  .describe('Live events are paused; the stream closes after this event');
export type DegradedEventData = z.infer<typeof DegradedEventData>;

/**
 * `event: resync` — the tenant stream's Last-Event-ID is older than the stream replays
 * (EVENTS_RESUME_MAX_AGE_MS): nothing is replayed; the client re-reads its tasks' state, and the
 * stream goes on live from now. Its SSE `id` is the stream's position now, so a reconnect
 * resumes from there.
 */
export const ResyncEventData = z
  .object({
    reason: z.literal('resume_point_too_old'),
    resume_max_age_ms: z.int().min(0).describe('How far back a Last-Event-ID is replayed (EVENTS_RESUME_MAX_AGE_MS)'),
    detail: z.string(),
  })
  .describe("Events were missed beyond what the stream replays: re-read the tasks' state (GET /v1/tasks, GET /v1/tasks/:id); live events follow");
export type ResyncEventData = z.infer<typeof ResyncEventData>;

/** The tenant stream's `?status=` filter: one or more task states, comma-separated. */
export const tenantEventsQuery = z.strictObject({
  status: z
    .string()
    .max(400)
    .transform((s) =>
      s
        .split(',')
        .map((x) => x.trim())
        .filter((x) => x.length > 0),
    )
    .pipe(z.array(z.enum(TASK_STATES)).min(1))
    .optional(),
});

/** A task stream's Last-Event-ID: a status_version it sent. */
export const taskLastEventId = z
  .string()
  .regex(/^\d{1,15}$/, 'must be a status_version the stream sent (a non-negative integer)')
  .transform(Number);
