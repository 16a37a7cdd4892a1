// The schema endpoints of the simulated providers, served from the same published schemas the
// simulator checks a create against (input-schemas.ts), so what `ops catalog sync` reads is what
// the simulator refuses:
// - Replicate: GET /v1/models/{owner}/{name} (with `latest_version`) and
//   GET /v1/models/{owner}/{name}/versions/{id}, the version's `openapi_schema` holding the model's
//   input as components.schemas.Input (https://replicate.com/docs/reference/http#models.get,
//   #models.versions.get);
// - fal: GET /api/openapi/queue/openapi.json?endpoint_id=<id>, the endpoint's OpenAPI document, its
//   queue submit (POST /<id>) taking components.schemas.<Name>Input.
// A test replaces a model's schema (InputSchemas.replace, POST /_sim/schemas): a new Replicate
// version, and a new fal document.
import { createHash } from 'node:crypto';
import type { Request, Response, Router } from 'express';
import type { InputSchemas } from './input-schemas';

/** A Replicate model's version id at a revision of its schema (revision 0: the one its predictions name). */
export function simVersionId(model: string, revision: number): string {
  return createHash('sha256')
    .update(revision === 0 ? model : `${model}#${revision}`)
    .digest('hex');
}

/** The version's creation time: fixed per revision, so a read is repeatable. */
const createdAt = (revision: number): string => new Date(Date.UTC(2026, 0, 1) + revision * 60_000).toISOString();

function replicateVersion(inputs: InputSchemas, model: string): Record<string, unknown> | null {
  const input = inputs.schema('replicate', model, 'input');
  if (!input) return null;
  const revision = inputs.revision('replicate', model);
  return {
    id: simVersionId(model, revision),
    created_at: createdAt(revision),
    cog_version: '0.14.0',
    openapi_schema: {
      openapi: '3.0.2',
      info: { title: 'Cog', version: '0.1.0' },
      paths: {},
      components: { schemas: { Input: input, Output: { type: 'string', title: 'Output', format: 'uri' } } },
    },
  };
}

const notFound = (res: Response): void =>
  void res
    .status(404)
    .type('application/problem+json')
    .send(JSON.stringify({ title: 'Not found', detail: 'Not found.', status: 404 }));

/** GET /v1/models/{owner}/{name} and its versions, on the Replicate router (behind its token check). */
export function mountReplicateModelRoutes(r: Router, inputs: InputSchemas): void {
  r.get('/v1/models/:owner/:name', (req: Request, res: Response) => {
    const { owner, name } = req.params as { owner: string; name: string };
    const version = replicateVersion(inputs, `${owner}/${name}`);
    if (!version) return notFound(res);
    res.json({
      url: `https://replicate.com/${owner}/${name}`,
      owner,
      name,
      description: null,
      visibility: 'public',
      github_url: null,
      paper_url: null,
      license_url: null,
      run_count: 0,
      cover_image_url: null,
      default_example: null,
      latest_version: version,
    });
  });
  r.get('/v1/models/:owner/:name/versions/:id', (req: Request, res: Response) => {
    const { owner, name, id } = req.params as { owner: string; name: string; id: string };
    const version = replicateVersion(inputs, `${owner}/${name}`);
    // Only the latest version is kept: an earlier one reads as gone.
    if (!version || version['id'] !== id) return notFound(res);
    res.json(version);
  });
}

/** `fal-ai/kling-video/v2/master/text-to-video` → `KlingVideoV2MasterTextToVideo`, as fal names its components. */
const componentName = (endpoint: string): string =>
  endpoint
    .split('/')
    .slice(1)
    .flatMap((s) => s.split(/[-_.]/))
    .map((w) => (w ? w[0]!.toUpperCase() + w.slice(1) : ''))
    .join('');

/** GET /api/openapi/queue/openapi.json?endpoint_id=…, fal's per-endpoint OpenAPI document (public: no key). */
export function falOpenApiHandler(inputs: InputSchemas) {
  return (req: Request, res: Response): void => {
    const endpoint = typeof req.query['endpoint_id'] === 'string' ? req.query['endpoint_id'] : '';
    const input = inputs.schema('fal', endpoint, 'input');
    if (!input) return void res.status(404).json({ detail: `Endpoint ${endpoint || '(none)'} not found` });
    const name = componentName(endpoint);
    res.json({
      openapi: '3.0.4',
      info: { title: 'Queue OpenAPI for ' + endpoint, version: '1.0.0', 'x-fal-metadata': { endpointId: endpoint } },
      servers: [{ url: 'https://queue.fal.run' }],
      paths: {
        [`/${endpoint}`]: {
          post: {
            requestBody: { required: true, content: { 'application/json': { schema: { $ref: `#/components/schemas/${name}Input` } } } },
            responses: {
              '200': { description: 'The request status.', content: { 'application/json': { schema: { $ref: '#/components/schemas/QueueStatus' } } } },
            },
          },
        },
      },
      components: {
        schemas: {
          QueueStatus: { type: 'object', required: ['status', 'request_id'], properties: { status: { type: 'string' }, request_id: { type: 'string' } } },
          [`${name}Input`]: { ...input, title: `${name}Input` },
          [`${name}Output`]: { type: 'object', required: ['video'], properties: { video: { type: 'object' } } },
        },
      },
    });
  };
}
