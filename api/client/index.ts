// The typed vidorch client: openapi-fetch over the types openapi-typescript generates from the
// route contracts (schema.d.ts, `npm run openapi`). Every path, parameter, body and answer is
// typed from the document, so a client call that the API would refuse does not compile.
//
//   const vidorch = createVidorchClient({ baseUrl: 'http://127.0.0.1:3000', apiKey });
//   const { data, error, response } = await vidorch.POST('/v1/tasks', {
//     params: { header: { 'Idempotency-Key': 'order-42' } },
//     body: { model: 'minimax/video-01', prompt: 'a fox', duration_seconds: 6, resolution: '720p' },
//   });
import createClient, { type Client } from 'openapi-fetch';
import type { components, operations, paths } from './schema';

export type { components, operations, paths };
export type VidorchClient = Client<paths>;
export type Schemas = components['schemas'];
export type CreateTaskRequest = Schemas['CreateTaskRequest'];
export type Task = Schemas['Task'];
export type TaskSummary = Schemas['TaskSummary'];
export type Problem = Schemas['Problem'];

export interface VidorchClientOptions {
  readonly baseUrl: string;
  /** A tenant's API key, sent as `Authorization: Bearer …` (omit it for the public routes). */
  readonly apiKey?: string;
  /** The transport (default: the global fetch); benchmarks pass one over a bounded keep-alive pool (bench/lib/http.ts). */
  readonly fetch?: (request: Request) => Promise<Response>;
  /** The Request class openapi-fetch builds requests with (default: the global one), for such a transport. */
  readonly Request?: typeof Request;
}

export function createVidorchClient(opts: VidorchClientOptions): VidorchClient {
  return createClient<paths>({
    baseUrl: opts.baseUrl.replace(/\/+$/, ''),
    ...(opts.apiKey ? { headers: { authorization: `Bearer ${opts.apiKey}` } } : {}),
    ...(opts.fetch ? { fetch: opts.fetch } : {}),
    ...(opts.Request ? { Request: opts.Request } : {}),
  });
}
