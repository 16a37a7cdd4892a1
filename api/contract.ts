// The route-contract registry (docs/api.md, docs/decisions/0022). Each route declares its method,
// path, operation id, request schemas and every answer it can give, once, in a `*.routes.ts`
// file; app.ts mounts handlers by those contracts (mountRoute), the handlers parse with the same
// zod schemas, and openApiDocument() renders them with zod-openapi. So a route cannot be served
// without being documented, nor documented with a schema the handler does not use.
import type { RequestHandler, Router } from 'express';
import { z } from 'zod';
import { createDocument, type ZodOpenApiOperationObject, type ZodOpenApiPathsObject, type ZodOpenApiResponseObject } from 'zod-openapi';

export type HttpMethod = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** A media type and the zod schema of what it carries. */
export interface ContentContract {
  readonly mediaType: string;
  readonly schema: z.ZodType;
}

export interface ResponseContract {
  readonly description: string;
  readonly content?: ContentContract;
  /** The same answer in other media types, chosen by the request's Accept (e.g. text/csv). */
  readonly alternatives?: readonly ContentContract[];
  /** Response headers; an optional key is a header that is not always sent. */
  readonly headers?: z.ZodObject;
}

export interface RequestContract {
  readonly params?: z.ZodObject;
  readonly query?: z.ZodObject;
  readonly headers?: z.ZodObject;
  readonly body?: ContentContract & { readonly required: boolean };
}

export interface RouteContract {
  readonly method: HttpMethod;
  /** express syntax (`/v1/tasks/:id`); the document says `/v1/tasks/{id}`. */
  readonly path: string;
  readonly operationId: string;
  readonly summary: string;
  readonly description?: string;
  readonly tags: readonly string[];
  /** 'bearer': a tenant's API key (`Authorization: Bearer …`); 'none': public. */
  readonly auth: 'bearer' | 'none';
  readonly request?: RequestContract;
  readonly responses: Readonly<Record<number, ResponseContract>>;
}

/**
 * An event this API sends to a tenant's endpoint (OpenAPI 3.1's top-level `webhooks`): the
 * request it POSTs and the answers it understands.
 */
export interface WebhookContract {
  /** The event type, e.g. `task.succeeded`; the key under `webhooks`. */
  readonly event: string;
  readonly operationId: string;
  readonly summary: string;
  readonly description?: string;
  readonly headers?: z.ZodObject;
  readonly body: z.ZodType;
  readonly responses: Readonly<Record<number, ResponseContract>>;
}

/**
 * The headers every Standard Webhooks delivery carries (standardwebhooks.com): the id stays the
 * same across retries of one event, the signature covers `id.timestamp.body`.
 */
export const standardWebhookHeaders = z.object({
  'webhook-id': z.string().describe("The event's id: the same on every retry of it (dedupe on it)"),
  'webhook-timestamp': z
    .string()
    .regex(/^[0-9]+$/)
    .describe('Unix seconds when this attempt was signed'),
  'webhook-signature': z.string().describe('Space-separated `v1,<base64 HMAC-SHA256>` signatures (several while a secret rotates)'),
});

/** Keeps the literal types of a contract (its schemas) for the handler that parses with them. */
export const defineRoute = <const C extends RouteContract>(c: C): C => c;
export const defineWebhook = <const W extends WebhookContract>(w: W): W => w;

export const json = <S extends z.ZodType>(schema: S) => ({ mediaType: 'application/json', schema }) as const;

/**
 * A Server-Sent Events answer (`text/event-stream`). OpenAPI 3.1 has no schema for one event of
 * a stream, so `event` is the schema of one parsed event ({ id?, event?, data }, `data` parsed as
 * JSON) and the description says so; test/support/contract.ts validates a real stream event by
 * event against it.
 */
export function sseEvent<D extends z.ZodType>(data: D, opts: { event?: z.ZodType } = {}) {
  return z
    .object({
      id: z.string().optional().describe('The event id (send it back as Last-Event-ID to resume)'),
      event: (opts.event ?? z.string()).optional().describe('The event type (absent: "message")'),
      data,
    })
    .describe('One event of the stream, as a client parses it: the SSE fields id and event, and data parsed as JSON');
}
export const sse = <S extends z.ZodType>(event: S) => ({ mediaType: 'text/event-stream', schema: event }) as const;

/** Express `:name` parameters → OpenAPI `{name}`. */
export const openApiPath = (expressPath: string): string => expressPath.replace(/:(\w+)/g, '{$1}');

/**
 * Mounts `handlers` on `router` at the contract's method and path. `base` is where the router
 * itself is mounted (`/v1` for the v1 router, '' for the app); the contract's path must start
 * with it, so the path served is the path documented.
 */
export function mountRoute(router: Router, base: string, contract: RouteContract, ...handlers: RequestHandler[]): void {
  if (!contract.path.startsWith(`${base}/`)) throw new Error(`route ${contract.operationId}: ${contract.path} is not under ${base || '/'}`);
  router[contract.method](contract.path.slice(base.length), ...handlers);
}

function content(c: ContentContract | undefined) {
  return c ? { [c.mediaType]: { schema: c.schema } } : undefined;
}

function response(r: ResponseContract): ZodOpenApiResponseObject {
  const all = [...(r.content ? [r.content] : []), ...(r.alternatives ?? [])];
  const body = all.length ? { content: Object.assign({}, ...all.map(content)) as ReturnType<typeof content> } : {};
  return { description: r.description, ...body, ...(r.headers ? { headers: r.headers } : {}) };
}

function responses(rs: Readonly<Record<number, ResponseContract>>) {
  return Object.fromEntries(Object.entries(rs).map(([status, r]) => [status, response(r)]));
}

function operation(r: RouteContract): ZodOpenApiOperationObject {
  const req = r.request ?? {};
  const requestParams = {
    ...(req.params ? { path: req.params } : {}),
    ...(req.query ? { query: req.query } : {}),
    ...(req.headers ? { header: req.headers } : {}),
  };
  return {
    operationId: r.operationId,
    summary: r.summary,
    ...(r.description ? { description: r.description } : {}),
    tags: [...r.tags],
    ...(r.auth === 'none' ? { security: [] } : {}),
    ...(Object.keys(requestParams).length ? { requestParams } : {}),
    ...(req.body ? { requestBody: { required: req.body.required, content: content(req.body)! } } : {}),
    responses: responses(r.responses),
  };
}

export interface DocumentInput {
  readonly serverUrl: string;
  readonly version: string;
  readonly routes: readonly RouteContract[];
  readonly webhooks: readonly WebhookContract[];
}

/** The OpenAPI 3.1 document of these routes and webhooks. Throws on a duplicate operation. */
export function openApiDocument(input: DocumentInput) {
  const paths: ZodOpenApiPathsObject = {};
  const ids = new Set<string>();
  const once = (id: string) => {
    if (ids.has(id)) throw new Error(`duplicate operationId ${id}`);
    ids.add(id);
  };
  for (const r of input.routes) {
    once(r.operationId);
    const item = (paths[openApiPath(r.path)] ??= {});
    if (item[r.method]) throw new Error(`two contracts for ${r.method.toUpperCase()} ${r.path}`);
    item[r.method] = operation(r);
  }
  const webhooks: ZodOpenApiPathsObject = {};
  for (const w of input.webhooks) {
    once(w.operationId);
    webhooks[w.event] = {
      post: {
        operationId: w.operationId,
        summary: w.summary,
        ...(w.description ? { description: w.description } : {}),
        security: [],
        ...(w.headers ? { requestParams: { header: w.headers } } : {}),
        requestBody: { required: true, content: { 'application/json': { schema: w.body } } },
        responses: responses(w.responses),
      },
    };
  }
  return createDocument({
    openapi: '3.1.0',
    info: { title: 'vidorch', version: input.version, description: 'Durable orchestrator for AI video generation' },
    servers: [{ url: input.serverUrl }],
    security: [{ bearer: [] }],
    components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'A tenant API key (`ops tenant create`)' } } },
    paths,
    ...(input.webhooks.length ? { webhooks } : {}),
  });
}
