// A real webhook receiver for tests and the webhooks drill: a node http server that verifies
// every request with standardwebhooks' Webhook.verify against the secrets it is given, records
// what it saw, and can be down (not listening: connections refused), failing (500) or up (200).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface ReceivedWebhook {
  readonly webhookId: string;
  readonly path: string;
  readonly body: any;
  readonly rawBody: string;
  /** Index (in secrets()) of each secret whose signature verified. */
  readonly verifiedBy: number[];
  readonly signatures: number;
  /** The status this receiver answered. */
  readonly answered: number;
  readonly at: number;
}

export type ReceiverState = 'up' | 'failing' | 'down';

export interface WebhookReceiver {
  readonly port: number;
  /** http://127.0.0.1:<port> */
  readonly baseUrl: string;
  readonly received: ReceivedWebhook[];
  /** The most requests it was answering at once. */
  maxConcurrent(): number;
  state(): ReceiverState;
  setState(state: ReceiverState): Promise<void>;
  close(): Promise<void>;
}

function verifiers(secrets: readonly string[], raw: string, headers: http.IncomingHttpHeaders): number[] {
  const h = {
    'webhook-id': String(headers['webhook-id'] ?? ''),
    'webhook-timestamp': String(headers['webhook-timestamp'] ?? ''),
    'webhook-signature': String(headers['webhook-signature'] ?? ''),
  };
  const ok: number[] = [];
  secrets.forEach((secret, i) => {
    try {
      new Webhook(secret).verify(raw, h);
      ok.push(i);
    } catch {
      /* not signed with this one */
    }
  });
  return ok;
}

/**
 * Starts a receiver on `port` (0: any) in `initial` state ('down' reserves the port without
 * listening). `secrets()` is read at each request (tests add the rotated secret).
 */
export async function startWebhookReceiver(opts: {
  port: number;
  secrets: () => readonly string[];
  initial?: ReceiverState;
  delayMs?: number;
}): Promise<WebhookReceiver> {
  const received: ReceivedWebhook[] = [];
  let state: ReceiverState = opts.initial ?? 'up';
  let open = 0;
  let maxOpen = 0;
  const server = http.createServer((req, res) => {
    open += 1;
    maxOpen = Math.max(maxOpen, open);
    res.on('close', () => {
      open -= 1;
    });
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks).toString('utf8');
      const answered = state === 'failing' ? 500 : 200;
      let body: unknown = null;
      try {
        body = JSON.parse(rawBody);
      } catch {
        /* recorded as null */
      }
      received.push({
        webhookId: String(req.headers['webhook-id'] ?? ''),
        path: req.url ?? '',
        body,
        rawBody,
        verifiedBy: verifiers(opts.secrets(), rawBody, req.headers),
        signatures: String(req.headers['webhook-signature'] ?? '')
          .split(' ')
          .filter(Boolean).length,
        answered,
        at: Date.now(),
      });
      const answer = () => res.writeHead(answered, { 'content-type': 'text/plain' }).end(answered === 200 ? 'ok' : 'receiver failing');
      if (opts.delayMs) setTimeout(answer, opts.delayMs);
      else answer();
    });
  });
  let port = opts.port;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        port = (server.address() as AddressInfo).port;
        resolve();
      });
    });
  const stop = () =>
    new Promise<void>((resolve) => {
      if (!server.listening) return resolve();
      server.close(() => resolve());
      server.closeAllConnections();
    });
  if (state !== 'down') await listen();
  return {
    get port() {
      return port;
    },
    get baseUrl() {
      return `http://127.0.0.1:${port}`;
    },
    received,
    maxConcurrent: () => maxOpen,
    state: () => state,
    async setState(next) {
      if (next === 'down' && state !== 'down') await stop();
      if (next !== 'down' && state === 'down') await listen();
      state = next;
    },
    close: stop,
  };
}
