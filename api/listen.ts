// The API's HTTP server and its operator listener, built the same way by `npm run api`, the
// tests and the benchmarks. The server bounds slow clients (API_HEADERS_TIMEOUT_MS,
// API_REQUEST_TIMEOUT_MS, API_KEEP_ALIVE_TIMEOUT_MS) instead of Node's 300 s default.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { startOpsListener, type OpsListener } from '../observability/ops-listener';
import { readinessDetail } from './admission';
import { createApp } from './app';
import type { ApiContext } from './context';

export function createApiServer(ctx: ApiContext): http.Server {
  const t = ctx.settings.http;
  const server = http.createServer(
    {
      headersTimeout: t.headersTimeoutMs,
      requestTimeout: t.requestTimeoutMs,
      // How often Node checks those timeouts (default 30 s, coarser than the timeouts themselves).
      connectionsCheckingInterval: Math.min(1_000, Math.ceil(t.headersTimeoutMs / 2)),
    },
    createApp(ctx),
  );
  server.keepAliveTimeout = t.keepAliveTimeoutMs;
  return server;
}

/** Listens on host:port (0: any free port); resolves with the port. */
export async function listen(server: http.Server, port: number, host?: string): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return (server.address() as AddressInfo).port;
}

/** The API's operator listener: its metrics and the detailed readiness (region, epoch, mode, backlog). */
export function startApiOpsListener(ctx: ApiContext, opts: { host: string; port: number; bearerToken?: string | undefined }): Promise<OpsListener> {
  return startOpsListener({
    ...opts,
    registry: ctx.metrics.registry,
    logger: ctx.logger,
    readiness: async () => {
      const r = await ctx.admission.readiness();
      return { ready: r.ready, detail: readinessDetail(r) };
    },
  });
}

export interface ServedApi {
  readonly url: string;
  /** The operator listener's base URL. */
  readonly opsUrl: string;
  /** Drops every connection and stops both listeners. */
  close(): Promise<void>;
}

/** Both listeners of an in-process API (tests, drills, benchmarks), on loopback by default. */
export async function serveApi(
  ctx: ApiContext,
  opts: { port?: number; host?: string; ops?: { host?: string; port?: number; bearerToken?: string } } = {},
): Promise<ServedApi> {
  const host = opts.host ?? '127.0.0.1';
  const ops = await startApiOpsListener(ctx, { host: opts.ops?.host ?? host, port: opts.ops?.port ?? 0, bearerToken: opts.ops?.bearerToken });
  const server = createApiServer(ctx);
  const port = await listen(server, opts.port ?? 0, host);
  return {
    url: `http://${host}:${port}`,
    opsUrl: ops.url,
    async close() {
      await ctx.events.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await ops.close();
    },
  };
}
