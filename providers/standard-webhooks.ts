// The Standard Webhooks check (standardwebhooks.com) on node:crypto: HMAC-SHA256 over
// `${webhook-id}.${webhook-timestamp}.${body}` with the secret's key, base64, compared in
// constant time with each `v1,` entry of the space-separated webhook-signature header, and the
// timestamp within five minutes of now either way. It answers what the `standardwebhooks`
// package's `Webhook#verify` answers for the same input (test/providers/standard-webhooks.test.ts
// holds the two side by side), at about a fifth of its CPU: the package computes the HMAC in
// JavaScript (docs/decisions/0048-standard-webhooks-on-node-crypto.md). Signing, and which
// secrets are valid, stay the package's (net/webhook-send.ts, the simulator).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

/** The window either side of now the package allows a webhook-timestamp (seconds). */
export const STANDARD_WEBHOOK_TOLERANCE_SECONDS = 5 * 60;

const PREFIX = 'whsec_';

/** 'ok', or why not: a header missing or not a time, the time outside the window, no entry matching. */
export type StandardWebhookCheck = 'ok' | 'missing-headers' | 'too-old' | 'too-new' | 'no-match';

export interface StandardWebhookHeaders {
  readonly id: string | undefined;
  readonly timestamp: string | undefined;
  readonly signature: string | undefined;
}

export interface StandardWebhookVerifier {
  /** Checks one delivery: its three headers' values and its body as text (what was signed). */
  verify(h: StandardWebhookHeaders, body: string, nowMs?: number): StandardWebhookCheck;
}

/**
 * The HMAC key of a `whsec_` + base64 secret (the prefix optional). Which secrets are accepted
 * is the package's answer (its constructor throws for the rest, once, at start); the key is the
 * same bytes it decodes (the tests sign with the package and verify here over random secrets).
 */
function standardWebhookKey(secret: string): Buffer {
  new Webhook(secret);
  return Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64');
}

export function createStandardWebhookVerifier(secret: string): StandardWebhookVerifier {
  const key = standardWebhookKey(secret);
  return {
    verify(h, body, nowMs = Date.now()) {
      if (!h.id || !h.timestamp || !h.signature) return 'missing-headers';
      // parseInt, as the package reads it: the signed text carries the number it reads.
      const ts = Number.parseInt(h.timestamp, 10);
      if (Number.isNaN(ts)) return 'missing-headers';
      const now = Math.floor(nowMs / 1000);
      if (now - ts > STANDARD_WEBHOOK_TOLERANCE_SECONDS) return 'too-old';
      if (ts > now + STANDARD_WEBHOOK_TOLERANCE_SECONDS) return 'too-new';
      const expected = Buffer.from(createHmac('sha256', key).update(`${h.id}.${ts}.`).update(body, 'utf8').digest('base64'), 'latin1');
      for (const entry of h.signature.split(' ')) {
        // "v1,<base64>": anything after a second comma is not the signature (the package's split).
        const comma = entry.indexOf(',');
        if (comma < 0 || entry.slice(0, comma) !== 'v1') continue;
        const end = entry.indexOf(',', comma + 1);
        const given = Buffer.from(end < 0 ? entry.slice(comma + 1) : entry.slice(comma + 1, end), 'utf8');
        if (given.length === expected.length && timingSafeEqual(given, expected)) return 'ok';
      }
      return 'no-match';
    },
  };
}
