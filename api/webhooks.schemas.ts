// The webhook endpoints' wire shapes (docs/webhooks.md). Every request and response body is an
// exported zod object: handlers validate with them and the OpenAPI document registers them.
import { z } from 'zod';
import { TASK_STATES } from '../domain/states';
import { WEBHOOK_DELIVERY_STATES, WEBHOOK_EVENT_TYPES } from '../db/schema';

export const WebhookEventType = z.enum(WEBHOOK_EVENT_TYPES).describe('An event a webhook endpoint can subscribe to');

const url = z.string().max(2048, 'at most 2048 characters').describe('Where events are POSTed: https to a public host');
const events = z
  .array(WebhookEventType)
  .min(1, 'name at least one event type, or leave events out for all')
  .max(WEBHOOK_EVENT_TYPES.length)
  .refine((e) => new Set(e).size === e.length, 'each event type at most once')
  .describe('The event types sent to this endpoint; absent or null: all of them');
const description = z.string().trim().max(500);

export const WebhookEndpointCreateBody = z
  .strictObject({
    url,
    events: events.nullable().optional(),
    description: description.optional(),
  })
  .describe('A new webhook endpoint');
export type WebhookEndpointCreateBody = z.infer<typeof WebhookEndpointCreateBody>;

export const WebhookEndpointUpdateBody = z
  .strictObject({
    url: url.optional(),
    events: events.nullable().optional(),
    description: description.nullable().optional(),
    enabled: z.boolean().optional().describe('false stops deliveries; true re-enables an endpoint (also one disabled after failing)'),
  })
  .refine((b) => Object.keys(b).length > 0, 'name at least one field to change')
  .describe('Changes to a webhook endpoint');
export type WebhookEndpointUpdateBody = z.infer<typeof WebhookEndpointUpdateBody>;

export const webhookEndpointIdParam = z.uuid();
export const webhookDeliveryIdParam = z.uuid();

export const WebhookDeliveriesQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(100).default(20),
  cursor: z.string().max(200).optional(),
  state: z.enum(WEBHOOK_DELIVERY_STATES).optional(),
});

export const WebhookEndpointResponse = z
  .object({
    id: z.uuid(),
    url: z.string(),
    description: z.string().nullable(),
    events: z.array(WebhookEventType).nullable().describe('null: every event type'),
    enabled: z.boolean(),
    disabled_reason: z.string().nullable().describe('Why the endpoint is disabled (by the tenant, or after failing for days)'),
    disabled_at: z.iso.datetime().nullable(),
    failing_since: z.iso.datetime().nullable().describe('Every attempt has failed since then (null: the last attempt succeeded)'),
    created_at: z.iso.datetime(),
    updated_at: z.iso.datetime(),
  })
  .describe('A webhook endpoint (its secret is answered only by create and rotate-secret)');

export const WebhookEndpointCreatedResponse = WebhookEndpointResponse.extend({
  secret: z
    .string()
    .regex(/^whsec_/)
    .describe('The signing secret, shown this once'),
});

export const WebhookEndpointListResponse = z.object({ endpoints: z.array(WebhookEndpointResponse) });

export const WebhookSecretRotatedResponse = z.object({
  id: z.uuid(),
  secret: z
    .string()
    .regex(/^whsec_/)
    .describe('The new signing secret, shown this once'),
  previous_secret_expires_at: z.iso.datetime().describe('Until then deliveries carry a signature with the previous secret too'),
});

export const WebhookAttemptResponse = z.object({
  attempt_no: z.int().min(1),
  attempted_at: z.iso.datetime(),
  succeeded: z.boolean(),
  response_status: z.int().nullable().describe("The receiver's HTTP status; null when none was received"),
  latency_ms: z.int(),
  error: z.string().nullable(),
});

export const WebhookDeliveryResponse = z
  .object({
    id: z.uuid(),
    webhook_id: z.string().describe('The webhook-id header: the same on every attempt of this event'),
    event_type: WebhookEventType,
    task_id: z.uuid().nullable().describe("null for a tenant's own event (tenant.budget_threshold)"),
    status_version: z.int().nullable(),
    state: z.enum(WEBHOOK_DELIVERY_STATES),
    attempt_count: z.int().min(0),
    next_attempt_at: z.iso.datetime().nullable().describe('When the next attempt is due (pending only)'),
    delivered_at: z.iso.datetime().nullable(),
    created_at: z.iso.datetime(),
    attempts: z.array(WebhookAttemptResponse),
  })
  .describe('One event to one endpoint, with every attempt');

export const WebhookDeliveryListResponse = z.object({
  deliveries: z.array(WebhookDeliveryResponse),
  next_cursor: z.string().nullable(),
});

/** The body POSTed to an endpoint (Standard Webhooks: type, timestamp, data). */
export const WebhookEventPayload = z
  .object({
    type: WebhookEventType,
    timestamp: z.iso.datetime().describe('When the transition happened'),
    data: z.object({
      task_id: z.uuid(),
      status: z.enum(TASK_STATES),
      status_version: z.int().describe("Orders a task's events: a receiver keeps the highest it has seen"),
      previous_status: z.enum(TASK_STATES).nullable(),
      occurred_at: z.string(),
      model: z.string().nullable(),
      metadata: z.record(z.string(), z.string()),
      settled_amount: z.string().nullable(),
      failure: z.object({ code: z.string(), message: z.string().nullable() }).nullable(),
      output: z
        .object({ sha256: z.string(), size_bytes: z.number(), content_type: z.string(), media: z.unknown() })
        .nullable()
        .describe('The stored video (task.succeeded); download it through links.task'),
      thumbnail: z
        .object({ sha256: z.string(), size_bytes: z.number(), content_type: z.string() })
        .optional()
        .describe('The stored thumbnail (task.thumbnail_ready only); its URL is at links.task'),
      links: z.object({ task: z.url().describe('GET it (with your API key) for download URLs') }),
    }),
  })
  .describe('A webhook event as delivered');
export type WebhookEventPayload = z.infer<typeof WebhookEventPayload>;

/** The body POSTed for tenant.budget_threshold (db/budgets.ts): a budget crossed a threshold, once per period. */
export const BudgetThresholdPayload = z
  .object({
    type: z.literal('tenant.budget_threshold'),
    timestamp: z.iso.datetime().describe('When the create that crossed it was admitted'),
    data: z.object({
      scope: z.enum(['tenant', 'key']),
      key_id: z.uuid().nullable().describe('The API key whose budget it is (scope key)'),
      threshold_percent: z.int().min(1).max(100),
      limit: z.string(),
      spent: z.string().describe('Spent in the period with the create that crossed it'),
      remaining: z.string(),
      period: z.enum(['day', 'week', 'month']),
      period_start: z.iso.datetime(),
      period_end: z.iso.datetime(),
      links: z.object({ budget: z.url().describe('GET it (with your API key) for every budget and its spend') }),
    }),
  })
  .describe('A budget threshold crossed');
