// The public probes and the document itself (api/contract.ts).
import { z } from 'zod';
import { defineRoute, json } from './contract';
import { problemAnswers } from './problem';

const retryAfter = z.object({ 'Retry-After': z.string().regex(/^[0-9]+$/) });

export const systemRoutes = {
  healthz: defineRoute({
    method: 'get',
    path: '/healthz',
    operationId: 'getHealth',
    summary: 'Liveness',
    tags: ['system'],
    auth: 'none',
    responses: { 200: { description: 'Alive', content: json(z.object({ status: z.literal('ok') })) } },
  }),
  readyz: defineRoute({
    method: 'get',
    path: '/readyz',
    operationId: 'getReadiness',
    summary: 'Can this instance admit new tasks (ready or not; the reasons are on the operator listener)',
    tags: ['system'],
    auth: 'none',
    responses: {
      200: { description: 'Ready', content: json(z.object({ status: z.literal('ready') })) },
      503: { description: 'Not ready', content: json(z.object({ status: z.literal('not_ready') })), headers: retryAfter },
      ...problemAnswers([500]),
    },
  }),
  openapi: defineRoute({
    method: 'get',
    path: '/openapi.json',
    operationId: 'getOpenApiDocument',
    summary: "This document (its server is PUBLIC_BASE_URL, never the request's Host)",
    tags: ['system'],
    auth: 'none',
    responses: {
      200: {
        description: 'The OpenAPI 3.1 document',
        content: json(z.looseObject({ openapi: z.literal('3.1.0'), info: z.looseObject({}), paths: z.looseObject({}) })),
      },
    },
  }),
  console: defineRoute({
    method: 'get',
    path: '/console',
    operationId: 'getConsole',
    summary: 'The tenant console: a static page that reads tasks and their live status with a browser token',
    tags: ['system'],
    auth: 'none',
    responses: { 200: { description: 'The page', content: { mediaType: 'text/html', schema: z.string() } } },
  }),
};
