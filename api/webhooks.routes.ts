// The webhook endpoints' contracts (api/contract.ts) and the events sent to them (OpenAPI
// `webhooks`): what app.ts mounts, what the handlers parse with, what /openapi.json says.
// The tenant's guide is docs/webhooks.md.
import { z } from 'zod';
import { WEBHOOK_EVENT_TYPES } from '../db/schema';
import { defineRoute, defineWebhook, json, standardWebhookHeaders, type WebhookContract } from './contract';
import { problemAnswers } from './problem';
import {
  BudgetThresholdPayload,
  WebhookDeliveriesQuery,
  WebhookDeliveryListResponse,
  WebhookEndpointCreateBody,
  WebhookEndpointCreatedResponse,
  WebhookEndpointListResponse,
  WebhookEndpointResponse,
  WebhookEndpointUpdateBody,
  WebhookEventPayload,
  WebhookSecretRotatedResponse,
} from './webhooks.schemas';

const V1_PROBLEMS = [400, 401, 413, 415, 429, 500, 503] as const;
const v1Problems = (...more: number[]) =>
  problemAnswers(
    [...V1_PROBLEMS, ...more].sort((a, b) => a - b),
    { bearer: true },
  );

const endpointPath = z.object({ id: z.string().describe('The endpoint id (a malformed id is a 404, like an unknown one)') });
const deliveryPath = endpointPath.extend({ deliveryId: z.string().describe('The delivery id (a malformed id is a 404)') });
const redelivered = z.object({
  id: z.uuid(),
  state: z.string().describe('pending: it will be sent again now'),
  next_attempt_at: z.iso.datetime(),
});

export const webhookEndpointRoutes = {
  create: defineRoute({
    method: 'post',
    path: '/v1/webhook-endpoints',
    operationId: 'createWebhookEndpoint',
    summary: 'Register a webhook endpoint; the answer carries its signing secret, shown this once',
    tags: ['webhooks'],
    auth: 'bearer',
    request: { body: { ...json(WebhookEndpointCreateBody), required: true } },
    responses: {
      201: {
        description: 'Created, with the signing secret (`whsec_…`)',
        content: json(WebhookEndpointCreatedResponse),
        headers: z.object({ Location: z.string().describe('The endpoint') }),
      },
      ...v1Problems(409),
    },
  }),
  list: defineRoute({
    method: 'get',
    path: '/v1/webhook-endpoints',
    operationId: 'listWebhookEndpoints',
    summary: "The tenant's webhook endpoints",
    tags: ['webhooks'],
    auth: 'bearer',
    responses: { 200: { description: 'Every endpoint (at most 20)', content: json(WebhookEndpointListResponse) }, ...v1Problems() },
  }),
  get: defineRoute({
    method: 'get',
    path: '/v1/webhook-endpoints/:id',
    operationId: 'getWebhookEndpoint',
    summary: 'One webhook endpoint',
    tags: ['webhooks'],
    auth: 'bearer',
    request: { params: endpointPath },
    responses: { 200: { description: 'The endpoint', content: json(WebhookEndpointResponse) }, ...v1Problems(404) },
  }),
  update: defineRoute({
    method: 'patch',
    path: '/v1/webhook-endpoints/:id',
    operationId: 'updateWebhookEndpoint',
    summary: "Change an endpoint's URL, events, description or enabled flag",
    tags: ['webhooks'],
    auth: 'bearer',
    request: { params: endpointPath, body: { ...json(WebhookEndpointUpdateBody), required: true } },
    responses: { 200: { description: 'The endpoint as changed', content: json(WebhookEndpointResponse) }, ...v1Problems(404) },
  }),
  remove: defineRoute({
    method: 'delete',
    path: '/v1/webhook-endpoints/:id',
    operationId: 'deleteWebhookEndpoint',
    summary: 'Delete an endpoint (its pending deliveries are dropped)',
    tags: ['webhooks'],
    auth: 'bearer',
    request: { params: endpointPath },
    responses: { 204: { description: 'Deleted' }, ...v1Problems(404) },
  }),
  rotateSecret: defineRoute({
    method: 'post',
    path: '/v1/webhook-endpoints/:id/rotate-secret',
    operationId: 'rotateWebhookEndpointSecret',
    summary: 'A new signing secret; the old one keeps signing beside it for the overlap',
    tags: ['webhooks'],
    auth: 'bearer',
    request: { params: endpointPath },
    responses: { 200: { description: 'The new secret, shown this once', content: json(WebhookSecretRotatedResponse) }, ...v1Problems(404) },
  }),
  deliveries: defineRoute({
    method: 'get',
    path: '/v1/webhook-endpoints/:id/deliveries',
    operationId: 'listWebhookDeliveries',
    summary: "An endpoint's deliveries, newest first, each with every attempt (status, latency, error)",
    tags: ['webhooks'],
    auth: 'bearer',
    request: { params: endpointPath, query: WebhookDeliveriesQuery },
    responses: { 200: { description: 'A page of deliveries', content: json(WebhookDeliveryListResponse) }, ...v1Problems(404) },
  }),
  redeliver: defineRoute({
    method: 'post',
    path: '/v1/webhook-endpoints/:id/deliveries/:deliveryId/redeliver',
    operationId: 'redeliverWebhook',
    summary: 'Send a delivery again now (same webhook-id)',
    tags: ['webhooks'],
    auth: 'bearer',
    request: { params: deliveryPath },
    responses: { 202: { description: 'Queued to be sent now', content: json(redelivered) }, ...v1Problems(404, 409) },
  }),
};

type TaskEventType = Exclude<(typeof WEBHOOK_EVENT_TYPES)[number], `tenant.${string}`>;
const TASK_EVENT_TYPES = WEBHOOK_EVENT_TYPES.filter((e): e is TaskEventType => e.startsWith('task.'));

const EVENT_SUMMARIES: Record<TaskEventType, string> = {
  'task.succeeded': 'A task succeeded: its video is stored (download it through links.task)',
  'task.failed': 'A task failed; its reserved credits were released',
  'task.cancelled': 'A task was cancelled',
  'task.needs_attention': 'A task is parked for an operator (MANUAL_REVIEW)',
  'task.output_at_risk': "A task's output may expire at the provider before it is stored",
  'task.thumbnail_ready': "A succeeded task's thumbnail is stored (made after task.succeeded; GET the task for its URL)",
};

/** The events POSTed to endpoints, one contract per type (docs/webhooks.md). */
export const webhookEvents: readonly WebhookContract[] = [
  ...TASK_EVENT_TYPES.map((event) =>
    defineWebhook({
      event,
      operationId: `webhook_${event.replace('.', '_')}`,
      summary: EVENT_SUMMARIES[event],
      description: 'Signed per Standard Webhooks; retried on a schedule until a 2xx; order by data.status_version.',
      headers: standardWebhookHeaders,
      body: WebhookEventPayload.extend({ type: z.literal(event) }),
      responses: {
        200: { description: 'Received (any 2xx ends the retries)' },
        500: { description: 'Any other answer, or none within the timeout, is retried' },
      },
    }),
  ),
  defineWebhook({
    event: 'tenant.budget_threshold',
    operationId: 'webhook_tenant_budget_threshold',
    summary: "A spend budget (the tenant's or an API key's) crossed one of its thresholds: sent once per threshold and period",
    description: 'Signed per Standard Webhooks; retried on a schedule until a 2xx (docs/billing.md "Budgets").',
    headers: standardWebhookHeaders,
    body: BudgetThresholdPayload,
    responses: {
      200: { description: 'Received (any 2xx ends the retries)' },
      500: { description: 'Any other answer, or none within the timeout, is retried' },
    },
  }),
];
