// The registry: every route the API serves and every webhook it sends, in one list each.
// createApp() mounts exactly these routes (api/contract.ts mountRoute); /openapi.json, the
// committed openapi.json and the generated client (api/client/) are rendered from them.
// docs/api.md says how to add a route, a webhook event or a text/event-stream answer.
import { batchRoutes } from './batches.routes';
import { callbackRoutes } from './callbacks.routes';
import { eventRoutes } from './events.routes';
import { openApiDocument, type RouteContract, type WebhookContract } from './contract';
import { budgetRoutes } from './budget.routes';
import { modelRoutes } from './models.routes';
import { systemRoutes } from './system.routes';
import { taskRoutes } from './tasks.routes';
import { usageRoutes } from './usage.routes';
import { tokenRoutes } from './tokens.routes';
import { webhookEndpointRoutes, webhookEvents } from './webhooks.routes';

export const API_VERSION = '0.1.0';

export const API_ROUTES: readonly RouteContract[] = [
  ...Object.values(taskRoutes),
  ...Object.values(batchRoutes),
  ...Object.values(modelRoutes),
  ...Object.values(budgetRoutes),
  ...Object.values(webhookEndpointRoutes),
  ...Object.values(usageRoutes),
  ...Object.values(eventRoutes),
  ...Object.values(tokenRoutes),
  ...Object.values(callbackRoutes),
  ...Object.values(systemRoutes),
];

/** Events sent to tenants' endpoints (OpenAPI `webhooks`, docs/webhooks.md). */
export const API_WEBHOOKS: readonly WebhookContract[] = webhookEvents;

/** The document of this deployment: its server is `serverUrl` (PUBLIC_BASE_URL). */
export function apiDocument(serverUrl: string) {
  return openApiDocument({ serverUrl, version: API_VERSION, routes: API_ROUTES, webhooks: API_WEBHOOKS });
}
