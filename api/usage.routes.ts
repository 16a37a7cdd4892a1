// The usage route's contract (api/contract.ts): what app.ts mounts, what the handler parses with,
// and what /openapi.json says.
import { defineRoute, json } from './contract';
import { problemAnswers } from './problem';
import { usageAnswer, usageCsv, usageQuery } from './usage.schemas';

export const usageRoutes = {
  get: defineRoute({
    method: 'get',
    path: '/v1/usage',
    operationId: 'getUsage',
    summary: "The tenant's usage in a window, per day, model or API key, from the ledger",
    description:
      'Tasks whose reservation was closed in [from, to), with the credits charged and given back and the seconds delivered. ' +
      'Send `Accept: text/csv` for the same groups as a CSV download.',
    tags: ['usage'],
    auth: 'bearer',
    request: { query: usageQuery },
    responses: {
      200: { description: 'The groups and their totals', content: json(usageAnswer), alternatives: [{ mediaType: 'text/csv', schema: usageCsv }] },
      ...problemAnswers([400, 401, 413, 415, 429, 500, 503], { bearer: true }),
    },
  }),
};
