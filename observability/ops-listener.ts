// The operator listener of a process (API: OPS_PORT, worker: WORKER_METRICS_PORT; both on
// OPS_LISTEN_HOST, loopback unless set): /metrics and the detailed /readyz, apart from the public
// port, so a scraper can neither starve the request pool nor read task counts, ledger state or
// breakers from outside. With OPS_BEARER_TOKEN every request must carry it.
import { createHash, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import type { Logger } from './logger';
import { reusedFor } from './reuse';

export interface OpsReadiness {
  readonly ready: boolean;
  readonly detail: Readonly<Record<string, unknown>>;
}

export interface OpsListenerOptions {
  readonly host: string;
  readonly port: number;
  readonly bearerToken?: string | undefined;
  readonly registry: Registry;
  readonly readiness: () => Promise<OpsReadiness>;
  readonly logger: Logger;
  /**
   * More exposition text served after the registry's (the worker: the Temporal SDK's own
   * exporter). Its names must not collide with the registry's; a failure serves ours alone.
   */
  readonly extraExposition?: () => Promise<string>;
}

export interface OpsListener {
  readonly url: string;
  close(): Promise<void>;
}

const digest = (s: string) => createHash('sha256').update(s, 'utf8').digest();

function authorized(req: http.IncomingMessage, token: string | undefined): boolean {
  if (!token) return true;
  const match = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
  return Boolean(match && timingSafeEqual(digest(match[1]!), digest(token)));
}

/** A scrape renders the registry at most once a second; scrapers within it share the text. */
const RENDER_REUSE_MS = 1_000;

export async function startOpsListener(opts: OpsListenerOptions): Promise<OpsListener> {
  const extra = opts.extraExposition;
  const exposition = reusedFor(RENDER_REUSE_MS, async () => {
    const ours = await opts.registry.metrics();
    if (!extra) return ours;
    const theirs = await extra().catch((err: unknown) => {
      opts.logger.warn({ err: (err as Error).message }, 'operator listener: extra metrics unavailable');
      return '';
    });
    return theirs ? `${ours.trimEnd()}\n${theirs}` : ours;
  });
  const send = (res: http.ServerResponse, status: number, type: string, body: string) =>
    res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store' }).end(body);
  const server = http.createServer((req, res) => {
    if (!authorized(req, opts.bearerToken)) {
      res.setHeader('WWW-Authenticate', 'Bearer');
      return send(res, 401, 'text/plain', 'unauthorized\n');
    }
    const path = (req.url ?? '').split('?')[0];
    if (req.method !== 'GET' || !['/metrics', '/readyz', '/healthz'].includes(path ?? '')) return send(res, 404, 'text/plain', 'not found\n');
    const answer =
      path === '/metrics'
        ? exposition().then((body) => send(res, 200, opts.registry.contentType, body))
        : path === '/readyz'
          ? opts
              .readiness()
              .then((r) => send(res, r.ready ? 200 : 503, 'application/json', JSON.stringify({ status: r.ready ? 'ready' : 'not_ready', ...r.detail })))
          : Promise.resolve(send(res, 200, 'application/json', '{"status":"ok"}'));
    answer.catch((err: unknown) => {
      opts.logger.warn({ err: (err as Error).message, path }, 'operator listener: request failed');
      if (!res.headersSent) send(res, 500, 'text/plain', 'error\n');
    });
  });
  server.requestTimeout = 10_000;
  server.headersTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const { address, port } = server.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  return {
    url: `http://${host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
