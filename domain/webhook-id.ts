// The Standard Webhooks `webhook-id` of a tenant webhook event (docs/webhooks.md): the relay sends
// it (workers/webhook-relay.ts), the API and `ops webhooks` show it. Pure.

/** The webhook-id of an event: the same on every attempt and for every target. */
export const webhookIdOf = (eventId: string): string => `msg_${eventId}`;
