// The task routes' contracts (api/contract.ts): what app.ts mounts, what the handlers parse with,
// and what /openapi.json says.
import { z } from 'zod';
import { defineRoute, json } from './contract';
import { problemAnswers } from './problem';
import {
  acceptedTask,
  cancelAnswer,
  createTaskBody,
  createTaskHeaders,
  deletedTaskOutput,
  listTasksQuery,
  taskDetail,
  taskPage,
  taskPathParams,
} from './tasks.schemas';

const rateLimitRemaining = z.object({
  'RateLimit-Remaining': z
    .string()
    .regex(/^[0-9]+$/)
    .optional()
    .describe('Requests of this kind left in the current second'),
});

/**
 * Every /v1 route can answer these: a body that is not JSON (400, 413, 415, whatever the
 * method), no valid key (401), the tenant's rate (429), the mode or a dependency (503).
 */
const V1_PROBLEMS = [400, 401, 413, 415, 429, 500, 503] as const;
const v1Problems = (...more: number[]) =>
  problemAnswers(
    [...V1_PROBLEMS, ...more].sort((a, b) => a - b),
    { bearer: true },
  );

export const taskRoutes = {
  create: defineRoute({
    method: 'post',
    path: '/v1/tasks',
    operationId: 'createTask',
    summary: 'Create a generation task',
    description: 'The 202 means the task, its credit reservation and its start request are committed (docs/design.md §1).',
    tags: ['tasks'],
    auth: 'bearer',
    request: { headers: createTaskHeaders, body: { ...json(createTaskBody), required: true } },
    responses: {
      202: {
        description: 'Accepted: the task is stored and will converge',
        content: json(acceptedTask),
        headers: z.object({
          Location: z.string().optional().describe('The task (not sent on a replay)'),
          'Idempotent-Replayed': z.literal('true').optional().describe('This is the answer to an earlier request with this Idempotency-Key'),
          ...rateLimitRemaining.shape,
        }),
      },
      ...v1Problems(402, 422),
    },
  }),
  list: defineRoute({
    method: 'get',
    path: '/v1/tasks',
    operationId: 'listTasks',
    summary: 'List tasks (newest first)',
    tags: ['tasks'],
    auth: 'bearer',
    request: { query: listTasksQuery },
    responses: { 200: { description: 'A page of tasks', content: json(taskPage), headers: rateLimitRemaining }, ...v1Problems() },
  }),
  get: defineRoute({
    method: 'get',
    path: '/v1/tasks/:id',
    operationId: 'getTask',
    summary: 'A task with its attempts, transitions, ledger entries and output',
    tags: ['tasks'],
    auth: 'bearer',
    request: { params: taskPathParams },
    responses: { 200: { description: 'The task', content: json(taskDetail), headers: rateLimitRemaining }, ...v1Problems(404) },
  }),
  cancel: defineRoute({
    method: 'post',
    path: '/v1/tasks/:id/cancel',
    operationId: 'cancelTask',
    summary: 'Cancel a task',
    tags: ['tasks'],
    auth: 'bearer',
    request: { params: taskPathParams },
    responses: {
      202: { description: 'Cancelled, or cancel requested (the provider job is being cancelled)', content: json(cancelAnswer), headers: rateLimitRemaining },
      ...v1Problems(404, 409),
    },
  }),
  deleteOutput: defineRoute({
    method: 'delete',
    path: '/v1/tasks/:id/output',
    operationId: 'deleteTaskOutput',
    summary: "Delete a task's stored video and thumbnail (the task keeps its facts; GET shows output.deleted_at)",
    description:
      'Removed from whichever bucket holds them, audited; repeating it answers the same. A task still running, or without a stored video, is a 409; the stored video of a FAILED task can be deleted too.',
    tags: ['tasks'],
    auth: 'bearer',
    request: { params: taskPathParams },
    responses: { 200: { description: 'The objects are removed', content: json(deletedTaskOutput), headers: rateLimitRemaining }, ...v1Problems(404, 409) },
  }),
};
