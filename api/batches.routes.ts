// POST /v1/tasks/batch's contract (api/contract.ts).
import { z } from 'zod';
import { defineRoute, json } from './contract';
import { problemAnswers } from './problem';
import { batchAnswer, createBatchBody } from './batches.schemas';
import { createTaskHeaders } from './tasks.schemas';

export const batchRoutes = {
  create: defineRoute({
    method: 'post',
    path: '/v1/tasks/batch',
    operationId: 'createTaskBatch',
    summary: 'Create up to 1,000 tasks, each under its own item key',
    description:
      'Each item is a create (the same validation, credits and limits), answered on its own in `items`. Items are admitted in chunks, one transaction each: a stored item result is final, and a retry of the request under the same Idempotency-Key answers it unchanged and creates nothing. Items answered 429 or 503 were not attempted: the same retry attempts them (docs/decisions/0076-task-batches.md).',
    tags: ['tasks'],
    auth: 'bearer',
    request: { headers: createTaskHeaders, body: { ...json(createBatchBody), required: true } },
    responses: {
      200: {
        description: 'Every item answered: accepted (202), refused (its problem) or not attempted (429/503, complete: false)',
        content: json(batchAnswer),
        headers: z.object({
          'Idempotent-Replayed': z.literal('true').optional().describe('Every item result was stored by an earlier request with this Idempotency-Key'),
          'Retry-After': z
            .string()
            .regex(/^[0-9]+$/)
            .optional()
            .describe('Sent when some items were not attempted: retry the request (same key) after this many seconds'),
        }),
      },
      ...problemAnswers([400, 401, 413, 415, 422, 429, 500, 503], { bearer: true }),
    },
  }),
};
