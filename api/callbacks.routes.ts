// The provider callback route's contract (api/contract.ts). Public: a provider authenticates by
// the keyed token in the URL and its own signature (docs/security.md "Callbacks").
import { z } from 'zod';
import { defineRoute } from './contract';
import { problemAnswers } from './problem';

export const callbackRoutes = {
  receive: defineRoute({
    method: 'post',
    path: '/v1/callbacks/:provider/:token',
    operationId: 'receiveProviderCallback',
    summary: 'Provider status callback (signed; the token is the keyed one of the callback URL, docs/security.md)',
    tags: ['callbacks'],
    auth: 'none',
    request: {
      params: z.object({ provider: z.string().describe('replicate, fal, runway or kling'), token: z.string().describe('The keyed callback token') }),
      // The provider's own bytes, verified as received (any media type).
      body: { mediaType: '*/*', schema: z.unknown(), required: false },
    },
    responses: {
      200: {
        description: 'Stored (or a duplicate)',
        content: { mediaType: 'application/json', schema: z.object({ received: z.literal(true), duplicate: z.boolean() }) },
      },
      202: {
        description: 'Spooled: the inbox cannot be written now; it is replayed later',
        content: { mediaType: 'application/json', schema: z.object({ received: z.literal(true), spooled: z.literal(true) }) },
      },
      ...problemAnswers([400, 401, 404, 409, 413, 415, 429, 500, 503], {
        describe: {
          401: 'The signature is not valid',
          404: 'Unknown provider or callback token',
          409: 'The callback is not about this attempt',
          503: "The callback cannot be checked or stored now (the provider's keys, the provider, the spool): redeliver after Retry-After",
        },
      }),
    },
  }),
};
