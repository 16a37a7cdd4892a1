// The live event streams' contracts (api/contract.ts): Server-Sent Events (docs/events.md).
// A stream's events are declared as one parsed event each (sseEvent): `transition` and
// `progress` on a task stream, `transition` and `resync` (a Last-Event-ID past the stream's
// retention) on the tenant stream, `degraded` on both when the mode sheds pushed events
// (docs/modes.md).
import { z } from 'zod';
import { defineRoute, sse, sseEvent } from './contract';
import { DegradedEventData, ProgressEventData, ResyncEventData, TaskEventData, tenantEventsQuery } from './events.schemas';
import { problemAnswers } from './problem';
import { taskPathParams } from './tasks.schemas';

const V1_PROBLEMS = [400, 401, 413, 415, 429, 500, 503] as const;
const v1Problems = (...more: number[]) =>
  problemAnswers(
    [...V1_PROBLEMS, ...more].sort((a, b) => a - b),
    { bearer: true },
  );

const degraded = sseEvent(DegradedEventData, { event: z.literal('degraded') });

export const eventRoutes = {
  task: defineRoute({
    method: 'get',
    path: '/v1/tasks/:id/events',
    operationId: 'streamTaskEvents',
    summary: "A task's transitions and provider progress as they happen (Server-Sent Events)",
    description:
      'The SSE id of a transition is its status_version: reconnect with Last-Event-ID and nothing is missed or repeated. The stream closes after the terminal transition; a reconnect after it answers 204.',
    tags: ['events'],
    auth: 'bearer',
    request: {
      params: taskPathParams,
      headers: z.object({ 'Last-Event-ID': z.string().optional().describe('The last status_version this stream sent') }),
    },
    responses: {
      200: {
        description: 'The stream',
        content: sse(
          z.union([sseEvent(TaskEventData, { event: z.literal('transition') }), sseEvent(ProgressEventData, { event: z.literal('progress') }), degraded]),
        ),
      },
      204: { description: 'The task is terminal and its stream has sent everything (an EventSource stops)' },
      ...v1Problems(404),
    },
  }),
  tenant: defineRoute({
    method: 'get',
    path: '/v1/events',
    operationId: 'streamTenantEvents',
    summary: "Every task's transitions for the tenant as they happen (Server-Sent Events)",
    description:
      'The SSE id is `<xact>-<transition>`: reconnect with Last-Event-ID and nothing is missed or repeated. A Last-Event-ID older than the stream replays (EVENTS_RESUME_MAX_AGE_MS) is answered with `event: resync` first: re-read the tasks, then live events follow.',
    tags: ['events'],
    auth: 'bearer',
    request: {
      query: tenantEventsQuery,
      headers: z.object({ 'Last-Event-ID': z.string().optional().describe('The last id this stream sent') }),
    },
    responses: {
      200: {
        description: 'The stream',
        content: sse(
          z.union([sseEvent(TaskEventData, { event: z.literal('transition') }), sseEvent(ResyncEventData, { event: z.literal('resync') }), degraded]),
        ),
      },
      ...v1Problems(),
    },
  }),
};
