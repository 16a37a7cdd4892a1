// The catalog's and the quotes' contracts (api/contract.ts, issue #52): what app.ts mounts, what
// the handlers answer with, what /openapi.json says.
import { z } from 'zod';
import { PROVIDERS, RESOLUTIONS } from '../domain/catalog';
import { defineRoute, json } from './contract';
import { problemAnswers } from './problem';
import { quoteRequestBody } from './tasks.schemas';

const V1_PROBLEMS = [400, 401, 413, 415, 429, 500, 503] as const;
const v1Problems = () => problemAnswers(V1_PROBLEMS, { bearer: true });

const money = z
  .string()
  .regex(/^[0-9]+(\.[0-9]+)?$/)
  .describe('Credits, a decimal string');
const waitSeconds = z
  .int()
  .min(0)
  .nullable()
  .describe('Estimated seconds until a slot at the provider: the attempts waiting ahead over its slots, times its recent run time; null when unknown');

const modelInputs = z
  .object({
    resolutions: z.array(z.enum(RESOLUTIONS)),
    duration_seconds: z.array(z.int().min(1)).describe('The durations taken, ascending'),
    input_image: z.enum(['none', 'optional', 'required']).describe('input_image_url: not taken, optional, or required (image to video only)'),
    prompt_max_chars: z.int().min(1),
  })
  .meta({ id: 'ModelInputs' });

const modelRoute = z
  .object({
    provider: z.enum(PROVIDERS),
    provider_model: z.string(),
    inputs: modelInputs,
    open: z.boolean().describe('Takes new work now'),
    closed_reason: z.string().nullable(),
    waiting: z.int().min(0).describe('Attempts waiting for a slot at this provider now'),
    estimated_wait_seconds: waitSeconds,
  })
  .meta({ id: 'ModelRoute' });

const modelOffer = z
  .object({
    model: z.string().describe('What a create names as `model`'),
    kind: z.enum(['pinned', 'family']).describe('pinned: one provider; family: routed among several'),
    inputs: modelInputs.describe('What a create may ask for: what at least one route takes'),
    price_per_second: z.partialRecord(z.enum(RESOLUTIONS), money).describe('What a second of video costs at each resolution offered'),
    available: z.boolean().describe('New tasks are admitted and at least one route is open'),
    estimated_wait_seconds: waitSeconds,
    routes: z.array(modelRoute),
  })
  .meta({ id: 'Model' });

export const modelList = z
  .object({
    accepting_tasks: z.boolean().describe('This deployment admits new tasks now'),
    refused_reason: z.string().nullable(),
    models: z.array(modelOffer),
  })
  .meta({ id: 'ModelList' });

export const quoteAnswer = z
  .object({
    quote_id: z.uuid().describe('Cite it as quote_id in POST /v1/tasks with the same body before expires_at'),
    expires_at: z.iso.datetime(),
    model: z.string(),
    amount: money.describe('What the create reserves (and at most charges)'),
    price_per_second: money,
    route: z.object({
      provider: z.enum(PROVIDERS),
      provider_model: z.string(),
      open: z.boolean(),
      closed_reason: z.string().nullable(),
    }),
    estimated_wait_seconds: waitSeconds,
  })
  .meta({ id: 'Quote' });

export const modelRoutes = {
  list: defineRoute({
    method: 'get',
    path: '/v1/models',
    operationId: 'listModels',
    summary: 'Every model the tenant may order: inputs, price per second, availability now',
    tags: ['models'],
    auth: 'bearer',
    responses: { 200: { description: 'The models', content: json(modelList) }, ...v1Problems() },
  }),
  quote: defineRoute({
    method: 'post',
    path: '/v1/quotes',
    operationId: 'createQuote',
    summary: 'The price a create of this body would reserve, its likely route and wait',
    description:
      'Validated exactly as POST /v1/tasks validates (the same 400 problems). Writes nothing but the quote: a create citing quote_id within QUOTE_TTL_SECONDS reserves at most its amount.',
    tags: ['models'],
    auth: 'bearer',
    request: { body: { ...json(quoteRequestBody), required: true } },
    responses: { 200: { description: 'The quote', content: json(quoteAnswer) }, ...v1Problems() },
  }),
};
