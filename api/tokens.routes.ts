// Browser tokens' contracts (docs/decisions/0077-browser-tokens.md).
import { z } from 'zod';
import { defineRoute, json } from './contract';
import { problemAnswers } from './problem';

export const mintTokenBody = z
  .strictObject({
    scope: z.literal('read').default('read').describe('read: task reads and event streams, nothing else'),
    task_ids: z
      .array(z.uuid())
      .min(1)
      .max(100)
      .optional()
      .describe("Only these tasks and their event streams (not the list, not the tenant's stream); absent: every task of the tenant"),
    ttl_seconds: z.int().min(60).optional().describe('Life of the token (default and most: BROWSER_TOKEN_MAX_TTL_SECONDS)'),
  })
  .meta({ id: 'MintTokenRequest' });

export const mintedToken = z
  .object({
    token: z.string().describe('Send as `Authorization: Bearer <token>`; shown once, never stored'),
    token_id: z.uuid().describe('DELETE /v1/tokens/{id} revokes it'),
    scope: z.literal('read'),
    task_ids: z.array(z.uuid()).nullable(),
    expires_at: z.iso.datetime(),
  })
  .meta({ id: 'BrowserToken' });

const tokenPath = z.object({ id: z.uuid().describe('The token id (token_id)') });

export const tokenRoutes = {
  mint: defineRoute({
    method: 'post',
    path: '/v1/tokens',
    operationId: 'mintBrowserToken',
    summary: 'Mint a short-lived, read-only token a browser may hold (with the secret API key only)',
    tags: ['tokens'],
    auth: 'bearer',
    request: { body: { ...json(mintTokenBody), required: true } },
    responses: { 201: { description: 'The token', content: json(mintedToken) }, ...problemAnswers([400, 401, 404, 413, 415, 429, 500, 503], { bearer: true }) },
  }),
  revoke: defineRoute({
    method: 'delete',
    path: '/v1/tokens/:id',
    operationId: 'revokeBrowserToken',
    summary: 'Revoke a browser token now (with the secret API key only; revoking the key that minted it ends its tokens too)',
    tags: ['tokens'],
    auth: 'bearer',
    request: { params: tokenPath },
    responses: { 204: { description: 'Revoked' }, ...problemAnswers([400, 401, 404, 429, 500, 503], { bearer: true }) },
  }),
};
