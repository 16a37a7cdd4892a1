// The API's wire shapes. zod validates requests; the same schemas feed /openapi.json.
import { z } from 'zod';
import { PROVIDERS, RESOLUTIONS } from '../domain/catalog';
import { TASK_STATES } from '../domain/states';

export const createTaskBody = z
  .strictObject({
    model: z.string().min(1).max(100).describe('Model from the catalog: a provider\'s model id (e.g. "minimax/video-01", pinned to its provider) or a model family (e.g. "kling-v2", routed by provider health and cost)'),
    provider: z.enum(PROVIDERS).optional().describe('A pinned model: must name its provider. A model family: the preferred provider (health still decides)'),
    prompt: z.string().trim().min(1).max(2000),
    duration_seconds: z.int().min(1).max(20),
    resolution: z.enum(RESOLUTIONS),
    input_image_url: z
      .url({ protocol: /^https$/, error: 'must be an https URL' })
      .max(2048)
      .optional(),
    priority: z.int().min(0).max(9).default(0),
    deadline_seconds: z
      .int()
      .min(10)
      .max(7 * 86_400)
      .optional()
      .describe('The task must be accepted by a provider within this many seconds of creation, or it fails (DEADLINE_EXCEEDED) and its credits are released. Default: the server\'s TASK_DEADLINE_SECONDS'),
    metadata: z
      .record(z.string().min(1).max(64), z.string().max(512))
      .refine((m) => Object.keys(m).length <= 20, 'at most 20 keys')
      .optional(),
    project_id: z.uuid().optional().describe('Defaults to the tenant\'s default project'),
  })
  .describe('A video generation request');
export type CreateTaskBody = z.infer<typeof createTaskBody>;

export const idempotencyKeyHeader = z
  .string()
  .min(1, 'must not be empty')
  .max(255, 'at most 255 characters')
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

export const taskIdParam = z.uuid();

export const listTasksQuery = z.strictObject({
  status: z.enum(TASK_STATES).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  cursor: z.string().max(200).optional(),
});

export const acceptedTask = z.object({
  task_id: z.uuid(),
  status: z.enum(TASK_STATES),
});

/** DELETE /v1/tasks/:id/output: the objects are gone; the task keeps its facts (GET shows output.deleted_at). */
export const deletedTaskOutput = z.object({
  task_id: z.uuid(),
  deleted_at: z.iso.datetime({ offset: true }),
  /** Objects removed (video, thumbnail). */
  objects_deleted: z.number().int().min(0),
});
