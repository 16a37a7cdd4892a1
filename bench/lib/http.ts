// A small keep-alive HTTP/1.1 client for load generation (node:http with a bounded Agent: one
// socket per load lane, reused for every request). Lighter on the generator's CPU than fetch,
// which matters on a 2-core machine where the generator competes with what it measures.
// Refuses anything but loopback: benchmarks never send load elsewhere.
import http from 'node:http';

export interface HttpResponse {
  readonly status: number;
  readonly body: Buffer;
}

export interface HttpClient {
  request(
    method: string,
    path: string,
    opts?: { headers?: Record<string, string>; body?: string | Buffer; timeoutMs?: number },
  ): Promise<HttpResponse>;
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
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
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
