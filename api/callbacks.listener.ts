// POST /v1/callbacks/:provider/:token served on node:http in front of express
// (docs/decisions/0043-callback-route-outside-express.md). A provider's callbacks are the
// API's busiest route and need none of express: no router walk, no middleware chain, no
// prototype swap of the request and answer, no body-parser stream. Only a plain request takes
// this way — the exact path shape, a Content-Length within API_BODY_LIMIT, no Content-Encoding
// or Transfer-Encoding; anything else (percent-encoded or odd paths, chunked, compressed or
// oversized bodies) goes to the express route, which answers it as it always has. Both ways
// call the same handler (api/callbacks.handlers.ts) and write the same bytes (sendProblem,
// writeCallbackAnswer), and both record the same metrics and request span.
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { context } from '@opentelemetry/api';
import { callbackHandlers, writeCallbackAnswer, type CallbackRequest } from './callbacks.handlers';
import { callbackRoutes } from './callbacks.routes';
import type { ApiContext } from './context';
import { problemFor, sendProblem } from './problem';
import { startServerSpan } from './request-span';

const ROUTE = callbackRoutes.receive.path;
/** The callback URLs this API hands out (providers/callback-token.ts: base64url tokens). */
const PLAIN_PATH = /^\/v1\/callbacks\/([A-Za-z0-9_-]{1,64})\/([A-Za-z0-9_-]{1,128})$/;
const UNITS: Record<string, number> = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 };

/** API_BODY_LIMIT in bytes, read as express's body parsers read it (`256kb`: 1024-based units). */
export function bodyLimitBytes(limit: string): number {
  const m = /^(\d+(?:\.\d+)?) *(b|kb|mb|gb)?$/i.exec(limit.trim());
  if (!m) throw new Error(`API_BODY_LIMIT ${limit} is not a size (e.g. 256kb)`);
  return Math.floor(Number(m[1]) * UNITS[(m[2] ?? 'b').toLowerCase()]!);
}

/** The request's provider and token when it takes the plain way, else null (express serves it). */
function plainCallback(req: IncomingMessage, limit: number): { provider: string; token: string; length: number } | null {
  if (req.method !== 'POST' || !req.url?.startsWith('/v1/callbacks/')) return null;
  const m = PLAIN_PATH.exec(req.url);
  if (!m) return null;
  const h = req.headers;
  if (h['transfer-encoding'] !== undefined) return null;
  if (h['content-encoding'] !== undefined && h['content-encoding'].toLowerCase() !== 'identity') return null;
  const declared = h['content-length'];
  if (declared === undefined || !/^\d{1,12}$/.test(declared)) return null;
  const length = Number(declared);
  if (length > limit) return null;
  return { provider: m[1]!, token: m[2]!, length };
}

/** Reads a body of a known length (node's parser frames it); null when the request is aborted. */
function readBody(req: IncomingMessage, length: number): Promise<Buffer | null> {
  return new Promise((resolve) => {
    if (length === 0) {
      req.resume();
      req.once('end', () => resolve(Buffer.alloc(0)));
      req.once('close', () => resolve(null));
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.once('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    // 'close' after 'end' finds the promise settled already.
    req.once('close', () => resolve(null));
  });
}

/** The API's request listener: plain callbacks here, everything else to `app` (express). */
export function withCallbackRoute(ctx: ApiContext, app: RequestListener): RequestListener {
  const callbacks = callbackHandlers(ctx);
  const limit = bodyLimitBytes(ctx.settings.bodyLimit);
  const { httpDuration, httpRequests } = ctx.metrics;

  async function serve(req: IncomingMessage, res: ServerResponse, plain: { provider: string; token: string; length: number }): Promise<void> {
    const body = await readBody(req, plain.length);
    if (body === null) return;
    const input: CallbackRequest = { provider: plain.provider, token: plain.token, headers: req.headers, body, source: req.socket.remoteAddress ?? 'unknown' };
    try {
      writeCallbackAnswer(res, await callbacks.receive(input));
    } catch (err) {
      const { problem, instance } = problemFor(err, ctx.logger, req.url ?? ROUTE);
      sendProblem(res, problem, instance);
    }
  }

  return (req, res) => {
    const plain = plainCallback(req, limit);
    if (!plain) {
      app(req, res);
      return;
    }
    const end = httpDuration.startTimer({ method: 'POST' });
    const span = startServerSpan('POST');
    res.once('finish', () => {
      end({ route: ROUTE });
      httpRequests.inc({ method: 'POST', route: ROUTE, status: String(res.statusCode) });
      span?.end(ROUTE, res.statusCode, true);
    });
    if (span) res.once('close', () => span.end(ROUTE, res.statusCode, res.writableFinished));
    const run = () => serve(req, res, plain);
    // A failure past the answer (the socket went away) has no one to answer: destroy quietly.
    (span ? context.with(span.context, run) : run()).catch(() => res.destroy());
  };
}
