// Checks against the OpenAPI document (api/openapi.ts): the routes an express app really serves,
// and whether a real answer (status, headers, media type, body) is one the document declares.
// JSON Schema 2020-12 (OpenAPI 3.1's dialect) with ajv.
import type { Express, Router } from 'express';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';

export interface RouteKey {
  readonly method: string;
  /** OpenAPI syntax: `/v1/tasks/{id}`. */
  readonly path: string;
}

interface Layer {
  readonly rawPath?: unknown;
  readonly route?: { readonly path: unknown; readonly methods: Record<string, boolean> };
  readonly handle: { readonly stack?: readonly Layer[] };
}

/**
 * Every method and path an express 5 app routes to a handler, found by walking its router stack
 * (routes, and the routers mounted with app.use(path, router)).
 */
export function expressRoutes(app: Express): RouteKey[] {
  const out: RouteKey[] = [];
  const walk = (stack: readonly Layer[], prefix: string) => {
    for (const layer of stack) {
      if (layer.route) {
        const paths = Array.isArray(layer.route.path) ? layer.route.path : [layer.route.path];
        for (const p of paths) {
          if (typeof p !== 'string') throw new Error(`a route with a non-string path (${String(p)}) cannot be checked against the document`);
          for (const [method, on] of Object.entries(layer.route.methods)) {
            if (on && method !== '_all') out.push({ method, path: `${prefix}${p}`.replace(/:(\w+)/g, '{$1}') });
          }
        }
      } else if (layer.handle.stack) {
        // A mounted router: router 2.x keeps its mount path as rawPath (without it every path
        // under it would lose its prefix, and the comparison with the document fails loudly).
        const mount = typeof layer.rawPath === 'string' && layer.rawPath !== '/' ? layer.rawPath : '';
        walk(layer.handle.stack, `${prefix}${mount}`);
      }
    }
  };
  walk((app as unknown as { router: Router & { stack: readonly Layer[] } }).router.stack, '');
  return out;
}

interface HeaderObject {
  readonly required?: boolean;
  readonly schema?: object;
}
interface ResponseObject {
  readonly headers?: Record<string, HeaderObject>;
  readonly content?: Record<string, { readonly schema?: object }>;
}
interface OperationObject {
  readonly operationId: string;
  readonly responses: Record<string, ResponseObject>;
}
export interface OpenApiDoc {
  readonly paths: Record<string, Record<string, OperationObject>>;
  readonly webhooks?: Record<string, Record<string, OperationObject>>;
  readonly components?: object;
}

/** The operations of a document as route keys. */
export function documentedRoutes(doc: OpenApiDoc): RouteKey[] {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.keys(item)
      .filter((k) => k !== 'parameters')
      .map((method) => ({ method, path })),
  );
}

export interface RealAnswer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
}

/**
 * Parses a text/event-stream body into events ({ id?, event?, data }, data parsed as JSON).
 * Comments (heartbeats) are skipped, and so is a last event not yet ended by a blank line (a
 * stream read for a while, then aborted).
 */
export function parseEventStream(text: string): { id?: string; event?: string; data: unknown }[] {
  const events: { id?: string; event?: string; data: unknown }[] = [];
  const blocks = text.split(/\r?\n\r?\n/);
  blocks.pop(); // what follows the last blank line: empty, or an event still being written
  for (const block of blocks) {
    const fields: Record<string, string[]> = {};
    for (const line of block.split(/\r?\n/)) {
      if (!line || line.startsWith(':')) continue;
      const at = line.indexOf(':');
      const name = at < 0 ? line : line.slice(0, at);
      const value = at < 0 ? '' : line.slice(at + 1).replace(/^ /, '');
      (fields[name] ??= []).push(value);
    }
    if (!fields['data']) continue;
    events.push({
      ...(fields['id'] ? { id: fields['id'].at(-1)! } : {}),
      ...(fields['event'] ? { event: fields['event'].at(-1)! } : {}),
      data: JSON.parse(fields['data'].join('\n')) as unknown,
    });
  }
  return events;
}

const pointer = (...parts: string[]) => `#/${parts.map((p) => p.replace(/~/g, '~0').replace(/\//g, '~1')).join('/')}`;

/**
 * Validates real answers against `doc`: the status is declared for the operation, every
 * required header is present and every declared header matches its schema, the media type is a
 * declared one and the body matches its schema (JSON; a text/event-stream event by event).
 * Returns what is wrong (empty: the answer is one the document declares).
 */
export function contractValidator(doc: OpenApiDoc) {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
  addFormats(ajv);
  const ID = 'vidorch-openapi';
  ajv.addSchema(doc, ID);
  const validate = (ptr: string, value: unknown): string[] => {
    const v = ajv.getSchema(`${ID}${ptr}`);
    if (!v) return [`no schema at ${ptr}`];
    return v(value) ? [] : (v.errors ?? []).map((e) => `${e.instancePath || '(root)'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
  };
  const templates = Object.keys(doc.paths).map((t) => ({ t, re: new RegExp(`^${t.replace(/[.]/g, '\\.').replace(/\{\w+\}/g, '[^/]+')}$`) }));

  function check(where: { method: string; path: string } | { webhook: string }, answer: RealAnswer): string[] {
    let base: string[];
    let op: OperationObject | undefined;
    if ('webhook' in where) {
      base = ['webhooks', where.webhook, 'post'];
      op = doc.webhooks?.[where.webhook]?.['post'];
    } else {
      const path = where.path.split('?')[0]!;
      // A literal segment wins over a parameter (/v1/tasks/batch over /v1/tasks/{id}).
      const template = templates.filter((x) => x.re.test(path)).sort((a, b) => (a.t.match(/\{/g)?.length ?? 0) - (b.t.match(/\{/g)?.length ?? 0))[0]?.t;
      if (!template) return [`${where.method} ${path}: no path of the document matches`];
      base = ['paths', template, where.method.toLowerCase()];
      op = doc.paths[template]?.[where.method.toLowerCase()];
    }
    const name = base.join(' ');
    if (!op) return [`${name}: not in the document`];
    const status = String(answer.status);
    const res = op.responses[status] ?? op.responses[`${status[0]}XX`] ?? op.responses['default'];
    const key = op.responses[status] ? status : op.responses[`${status[0]}XX`] ? `${status[0]}XX` : 'default';
    if (!res) return [`${op.operationId}: status ${status} is not declared (declared: ${Object.keys(op.responses).join(', ')})`];
    const errors: string[] = [];
    for (const [header, h] of Object.entries(res.headers ?? {})) {
      const value = answer.headers.get(header);
      if (value === null) {
        if (h.required) errors.push(`${op.operationId} ${status}: header ${header} is required but absent`);
        continue;
      }
      errors.push(
        ...validate(pointer(...base, 'responses', key, 'headers', header, 'schema'), value).map(
          (e) => `${op.operationId} ${status} header ${header}=${value}: ${e}`,
        ),
      );
    }
    if (!res.content) return errors;
    const got = (answer.headers.get('content-type') ?? '').split(';')[0]!.trim();
    const media = res.content[got] ? got : res.content['*/*'] ? '*/*' : null;
    if (!media)
      return [...errors, `${op.operationId} ${status}: content type ${got || '(none)'} is not declared (declared: ${Object.keys(res.content).join(', ')})`];
    const schemaPtr = pointer(...base, 'responses', key, 'content', media, 'schema');
    const label = `${op.operationId} ${status} ${media}`;
    if (media === 'text/event-stream') {
      const events = parseEventStream(answer.text);
      if (events.length === 0) errors.push(`${label}: no events in the stream`);
      events.forEach((ev, i) => errors.push(...validate(schemaPtr, ev).map((e) => `${label} event ${i}: ${e}`)));
      return errors;
    }
    let body: unknown;
    try {
      body = JSON.parse(answer.text);
    } catch {
      return [...errors, `${label}: the body is not JSON: ${answer.text.slice(0, 200)}`];
    }
    return [...errors, ...validate(schemaPtr, body).map((e) => `${label}: ${e}`)];
  }
  /** Validates the body an event's webhook POSTs (its requestBody) against the document. */
  function webhookPayload(event: string, body: unknown): string[] {
    if (!doc.webhooks?.[event]?.['post']) return [`webhook ${event}: not in the document`];
    return validate(pointer('webhooks', event, 'post', 'requestBody', 'content', 'application/json', 'schema'), body).map((e) => `webhook ${event}: ${e}`);
  }
  return { check, webhookPayload };
}
