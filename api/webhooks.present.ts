// Webhook rows → API JSON (api/webhooks.schemas.ts). Secrets never pass through here.
import type { DeliveryWithAttempts, WebhookEndpointRow } from '../db/webhooks';
import { redactText } from '../domain/redact-text';
import { webhookIdOf } from '../domain/webhook-id';

const iso = (d: Date | null) => d?.toISOString() ?? null;

export function presentEndpoint(e: WebhookEndpointRow) {
  return {
    id: e.endpoint_id,
    url: e.url,
    description: e.description,
    events: e.events,
    enabled: e.enabled,
    disabled_reason: e.disabled_reason,
    disabled_at: iso(e.disabled_at),
    failing_since: iso(e.failing_since),
    created_at: e.created_at.toISOString(),
    updated_at: e.updated_at.toISOString(),
  };
}

export function presentDelivery({ delivery: d, event, attempts }: DeliveryWithAttempts) {
  return {
    id: d.delivery_id,
    webhook_id: webhookIdOf(d.event_id),
    event_type: event.event_type,
    task_id: event.task_id,
    status_version: event.status_version,
    state: d.state,
    attempt_count: d.attempt_count,
    next_attempt_at: d.state === 'pending' ? d.next_attempt_at.toISOString() : null,
    delivered_at: iso(d.delivered_at),
    created_at: d.created_at.toISOString(),
    attempts: attempts.map((a) => ({
      attempt_no: a.attempt_no,
      attempted_at: a.started_at.toISOString(),
      succeeded: a.succeeded,
      response_status: a.response_status,
      latency_ms: a.latency_ms,
      // Written by the relay from a receiver's failure (net/webhook-send.ts), which may quote a URL
      // or a credential: redacted like every error text that leaves (observability/redact.ts).
      error: a.error === null ? null : redactText(a.error),
    })),
  };
}
