// A small keep-alive HTTP/1.1 client for load generation (node:http with a bounded Agent: one
// socket per load lane, reused for every request). Lighter on the generator's CPU than fetch,
// which matters on a 2-core machine where the generator competes with what it measures.
// Refuses anything but loopback: benchmarks never send load elsewhere. Task requests go through
// the typed client (api/client) over this same agent (createTaskClient).
import http from 'node:http';
import { createVidorchClient, type VidorchClient } from '../../api/client';

export interface HttpResponse {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: Buffer;
}

export interface HttpClient {
  request(method: string, path: string, opts?: { headers?: Record<string, string>; body?: string | Buffer; timeoutMs?: number }): Promise<HttpResponse>;
  close(): void;
}

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);

export function assertLoopback(url: string): URL {
  const u = new URL(url);
  if (!LOOPBACK.has(u.hostname)) throw new Error(`benchmarks only target loopback, not ${u.hostname}`);
  return u;
}

export function createHttpClient(baseUrl: string, connections: number): HttpClient {
  const base = assertLoopback(baseUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections, maxFreeSockets: connections });
  return {
    request(method, path, opts = {}) {
      return new Promise<HttpResponse>((resolve, reject) => {
        const body = opts.body === undefined ? undefined : Buffer.isBuffer(opts.body) ? opts.body : Buffer.from(opts.body);
        const req = http.request(
          {
            host: base.hostname.replace(/^\[|\]$/g, ''),
            port: base.port,
            method,
            path,
            agent,
            headers: { ...(opts.headers ?? {}), ...(body ? { 'content-length': String(body.length) } : {}) },
          },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
            res.on('error', reject);
          },
        );
        req.setTimeout(opts.timeoutMs ?? 10_000, () => req.destroy(new Error('timeout')));
        req.on('error', reject);
        req.end(body);
      });
    },
    close() {
      agent.destroy();
    },
  };
}

/** The typed client's requests, as openapi-fetch builds them: a plain record, no WHATWG body stream. */
class LoopbackRequest {
  readonly url: string;
  readonly method: string;
  readonly headers: Headers;
  readonly body: string | undefined;
  constructor(url: string, init: RequestInit) {
    this.url = url;
    this.method = init.method ?? 'GET';
    this.headers = init.headers instanceof Headers ? init.headers : new Headers(init.headers);
    this.body = typeof init.body === 'string' ? init.body : undefined;
  }
}

/** What openapi-fetch reads of an answer (status, headers, the body as text or JSON), over the buffered body. */
function answerOf(res: HttpResponse) {
  const header = (name: string) => {
    const v = res.headers[name.toLowerCase()];
    return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
  };
  return {
    status: res.status,
    ok: res.status >= 200 && res.status < 300,
    headers: { get: header },
    text: () => Promise.resolve(res.body.toString()),
    json: () => Promise.resolve(JSON.parse(res.body.toString()) as unknown),
  };
}

export interface TaskClient {
  /** The typed client (api/client) as this tenant. */
  as(apiKey: string): VidorchClient;
  close(): void;
}

/**
 * The typed API client over this module's bounded keep-alive agent: openapi-fetch builds and
 * reads the requests (paths, headers and bodies typed by the document), node:http carries them.
 * A lighter transport than global fetch (no Request/Response streams per request): about 15 µs
 * of generator CPU per request over hand-built ones (docs/api.md).
 */
export function createTaskClient(baseUrl: string, connections: number, opts: { timeoutMs?: number } = {}): TaskClient {
  const http = createHttpClient(baseUrl, connections);
  const base = new URL(baseUrl).origin;
  // openapi-fetch only reads what LoopbackRequest and answerOf() provide; the casts are the
  // boundary between its WHATWG types and this transport.
  const fetch = async (request: Request) => {
    const r = request as unknown as LoopbackRequest;
    const res = await http.request(r.method, r.url.slice(base.length), {
      headers: Object.fromEntries(r.headers),
      ...(r.body !== undefined ? { body: r.body } : {}),
      ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
    });
    return answerOf(res) as unknown as Response;
  };
  return {
    as: (apiKey) => createVidorchClient({ baseUrl: base, apiKey, fetch, Request: LoopbackRequest as unknown as typeof Request }),
    close: () => http.close(),
  };
}
