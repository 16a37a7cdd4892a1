// The API's wire shapes. zod validates requests; the same schemas, and those of the answers
// (which the presenter's types follow), are the route contracts of api/tasks.routes.ts.
import { z } from 'zod';
import { ACTOR_DESCRIPTION, ProgressView } from './events.schemas';
import { PROVIDERS, RESOLUTIONS } from '../domain/catalog';
import { ATTEMPT_STATES, LEDGER_ENTRY_TYPES, TASK_STATES } from '../domain/states';

export const createTaskBody = z
  .strictObject({
    model: z
      .string()
      .min(1)
      .max(100)
      .describe(
        'Model from the catalog: a provider\'s model id (e.g. "minimax/video-01", pinned to its provider) or a model family (e.g. "kling-v2", routed by provider health and cost)',
      ),
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
      .describe(
        "The task must be accepted by a provider within this many seconds of creation, or it fails (DEADLINE_EXCEEDED) and its credits are released. Default: the server's TASK_DEADLINE_SECONDS",
      ),
    metadata: z
      .record(z.string().min(1).max(64), z.string().max(512))
      .refine((m) => Object.keys(m).length <= 20, 'at most 20 keys')
      .optional(),
    project_id: z.uuid().optional().describe("Defaults to the tenant's default project"),
    webhook_url: z
      .string()
      .max(2048, 'at most 2048 characters')
      .optional()
      .describe(
        "Also send this task's events here (https, a public host), signed with the secret of the tenant's oldest enabled webhook endpoint (docs/webhooks.md)",
      ),
    quote_id: z
      .uuid()
      .optional()
      .describe(
        "A quote (POST /v1/quotes) of this same request, not expired: the task then reserves at most the quoted amount. An unknown, expired or other request's quote is a 400 naming quote_id",
      ),
  })
  .describe('A video generation request')
  .meta({ id: 'CreateTaskRequest' });
export type CreateTaskBody = z.infer<typeof createTaskBody>;

/** What a quote prices: a create's body without a quote of its own. */
export const quoteRequestBody = createTaskBody
  .omit({ quote_id: true })
  .describe('The body a create would send (without quote_id): validated as the create validates it')
  .meta({ id: 'QuoteRequest' });
export type QuoteRequestBody = z.infer<typeof quoteRequestBody>;

export const idempotencyKeyHeader = z
  .string()
  .min(1, 'must not be empty')
  .max(255, 'at most 255 characters')
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

export const taskIdParam = z.uuid();
export const taskPathParams = z.object({ id: taskIdParam.describe('The task id (a malformed id is a 404, like an unknown one)') });
export const createTaskHeaders = z.object({
  'Idempotency-Key': idempotencyKeyHeader.describe(
    'Stripe semantics: the same key and body answer the original 202 (Idempotent-Replayed: true); another body is a 422',
  ),
});

export const listTasksQuery = z.strictObject({
  status: z.enum(TASK_STATES).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  cursor: z.string().max(200).optional(),
});

export const taskStatus = z.enum(TASK_STATES).meta({ id: 'TaskStatus' });
/** Credits: a decimal string, never a float. */
const money = z
  .string()
  .regex(/^[0-9]+(\.[0-9]+)?$/)
  .describe('Credits, a decimal string');
const timestamp = z.iso.datetime();

export const acceptedTask = z.object({ task_id: z.uuid(), status: taskStatus }).meta({ id: 'AcceptedTask' });

/** DELETE /v1/tasks/:id/output: the objects are gone; the task keeps its facts (GET shows output.deleted_at). */
export const deletedTaskOutput = z
  .object({
    task_id: z.uuid(),
    deleted_at: z.iso.datetime({ offset: true }),
    objects_deleted: z.int().min(0).describe('Objects removed (video, thumbnail); 0 when repeated'),
  })
  .meta({ id: 'DeletedTaskOutput' });

export const taskSummary = z
  .object({
    task_id: z.uuid(),
    status: taskStatus,
    model: z.string().describe('What the tenant ordered; provider and provider_model say where it runs (or will, once routed)'),
    provider: z.string(),
    provider_model: z.string(),
    reserved_amount: money,
    settled_amount: money.nullable(),
    created_at: timestamp,
    updated_at: timestamp,
    terminal_at: timestamp.nullable(),
    deadline_at: timestamp.nullable(),
  })
  .meta({ id: 'TaskSummary' });
export type TaskSummary = z.infer<typeof taskSummary>;

export const taskPage = z
  .object({ tasks: z.array(taskSummary), next_cursor: z.string().nullable().describe('Pass as `cursor` for the next page; null on the last') })
  .meta({ id: 'TaskPage' });

const taskOutput = z
  .object({
    download_url: z.url().nullable().describe('Presigned; valid for expires_in_seconds; null once the output is deleted'),
    thumbnail_url: z
      .url()
      .nullable()
      .describe(
        'Presigned, like download_url; null until the thumbnail exists (it is made just after SUCCEEDED: webhook task.thumbnail_ready) and once the output is deleted',
      ),
    expires_in_seconds: z.int().nullable(),
    deleted_at: timestamp.nullable().describe('When DELETE /v1/tasks/:id/output removed the objects (or the retention did); the facts stay'),
    sha256: z.string(),
    size_bytes: z.int(),
    content_type: z.string(),
    media: z
      .object({ container: z.string(), videoCodec: z.string(), width: z.number(), height: z.number(), durationSeconds: z.number() })
      .nullable()
      .describe('What the media check found'),
  })
  .describe('The playable video, once SUCCEEDED');

export const taskDetail = z
  .object({
    ...taskSummary.shape,
    status_version: z.int().describe('Increases with every transition'),
    project_id: z.uuid(),
    request: z.record(z.string(), z.unknown()).describe('The request as accepted'),
    failure: z.object({ code: z.string(), message: z.string().nullable() }).nullable(),
    cancel_requested: z.boolean(),
    progress: ProgressView.nullable().describe("The active attempt's latest provider progress (null when the provider said none, or the job is finished)"),
    queue: z
      .object({
        provider: z.string(),
        position: z
          .int()
          .min(1)
          .nullable()
          .describe("Place in the provider's slot queue, 1 = next (a prediction: priorities, fair shares and aging decide); null once granted"),
        waiting: z.int().min(0).describe('Attempts waiting for this provider'),
        since: timestamp,
        waited_seconds: z.int().min(0),
        reason: z
          .string()
          .describe(
            "Why it waits: provider_full, tenant_provider_cap, tenant_total_cap or queued_behind; granted: a slot is its own, the submit follows; paced: a slot is its own, the submit waits for its moment in the provider's create pace; daily_cap: the provider's daily allowance of generations for the model is spent, the submit waits unsent for its reset (bounded by the task's deadline)",
          ),
        until: timestamp.nullable().describe('paced: the moment the submit may go; daily_cap: when the allowance is asked again; null otherwise'),
      })
      .nullable()
      .describe('Waiting for a provider slot (docs/providers.md "The slot queue") or for its daily allowance (daily_cap); null otherwise'),
    output: taskOutput.nullable(),
    attempts: z.array(
      z.object({
        attempt_id: z.uuid(),
        attempt_no: z.int(),
        provider: z.string(),
        submit_state: z.enum(ATTEMPT_STATES),
        provider_job_id: z.string().nullable(),
        provider_status: z.string().nullable(),
        submit_started_at: timestamp.nullable(),
        submit_finished_at: timestamp.nullable(),
        unknown_since: timestamp.nullable(),
        last_error: z.string().nullable(),
        progress: ProgressView.nullable(),
      }),
    ),
    transitions: z.array(
      z.object({
        from: taskStatus.nullable(),
        to: taskStatus,
        version: z.int(),
        source_event: z.string(),
        actor: z.string().describe(ACTOR_DESCRIPTION),
        at: timestamp,
      }),
    ),
    ledger: z.array(z.object({ business_key: z.string(), type: z.enum(LEDGER_ENTRY_TYPES), amount: money, at: timestamp })),
  })
  .meta({ id: 'Task' });
export type TaskDetail = z.infer<typeof taskDetail>;

export const cancelAnswer = z
  .object({ task_id: z.uuid(), status: taskStatus, cancel_requested: z.boolean().describe('true: the provider job is being cancelled; the status follows') })
  .meta({ id: 'CancelAnswer' });
