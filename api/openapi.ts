// /openapi.json, generated from the same zod schemas that validate requests.
import { z } from 'zod';
import { acceptedTask, createTaskBody, deletedTaskOutput, listTasksQuery } from './tasks.schemas';

const problem = {
  description: 'Problem details (RFC 9457)',
  content: {
    'application/problem+json': {
      schema: {
        type: 'object',
        properties: {
          type: { type: 'string' },
          title: { type: 'string' },
          status: { type: 'integer' },
          detail: { type: 'string' },
          errors: { type: 'array', items: { type: 'object', properties: { field: { type: 'string' }, message: { type: 'string' } } } },
        },
      },
    },
  },
};

const json = (schema: z.ZodType, io: 'input' | 'output' = 'output') => ({
  'application/json': { schema: z.toJSONSchema(schema, { io, unrepresentable: 'any' }) },
});

export function openApiDocument(serverUrl: string) {
  const listQuery = z.toJSONSchema(listTasksQuery, { io: 'input' }) as { properties: Record<string, unknown> };
  return {
    openapi: '3.1.0',
    info: { title: 'vidorch', version: '0.1.0', description: 'Durable orchestrator for AI video generation' },
    servers: [{ url: serverUrl }],
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    security: [{ bearer: [] }],
    paths: {
      '/v1/tasks': {
        post: {
          summary: 'Create a generation task',
          parameters: [{ name: 'Idempotency-Key', in: 'header', required: true, schema: { type: 'string', maxLength: 255 } }],
          requestBody: { required: true, content: json(createTaskBody, 'input') },
          responses: {
            '202': { description: 'Accepted: the task is stored and will converge', content: json(acceptedTask) },
            '400': problem, '401': problem, '402': problem, '413': problem, '422': problem, '503': problem,
          },
        },
        get: {
          summary: 'List tasks (newest first)',
          parameters: Object.entries(listQuery.properties).map(([name, schema]) => ({ name, in: 'query', schema })),
          responses: { '200': { description: 'A page of tasks' }, '400': problem, '401': problem },
        },
      },
      '/v1/tasks/{id}': {
        get: {
          summary: 'A task with its attempts, transitions, ledger entries and output',
          parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } }],
          responses: { '200': { description: 'The task' }, '401': problem, '404': problem },
        },
      },
      '/v1/tasks/{id}/cancel': {
        post: {
          summary: 'Cancel a task',
          parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } }],
          responses: { '202': { description: 'Cancelled, or cancel requested' }, '401': problem, '404': problem, '409': problem },
        },
      },
      '/v1/tasks/{id}/output': {
        delete: {
          summary: "Delete a task's output objects (the task keeps its facts; GET shows output.deleted_at). Repeating it answers the same",
          parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } }],
          responses: { '200': { description: 'The objects are removed', content: json(deletedTaskOutput) }, '401': problem, '404': problem, '409': problem, '503': problem },
        },
      },
      '/v1/callbacks/{provider}/{token}': {
        post: {
          summary: 'Provider status callback (signed; the token is the keyed one of the callback URL, docs/security.md)',
          security: [],
          responses: {
            '200': { description: 'Stored (or a duplicate)' },
            '202': { description: 'Spooled (the inbox cannot be written now)' },
            '400': problem, '401': problem, '404': problem, '409': problem, '413': problem, '429': problem, '503': problem,
          },
        },
      },
      '/healthz': { get: { summary: 'Liveness', security: [], responses: { '200': { description: 'alive' } } } },
      '/readyz': { get: { summary: 'Can this instance admit new tasks (ready or not; the reasons are on the operator listener)', security: [], responses: { '200': { description: 'ready' }, '503': { description: 'not ready' } } } },
    },
  };
}
