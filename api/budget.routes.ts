// GET /v1/budget (issue #52, docs/billing.md "Budgets"): the spend budgets that apply to the
// tenant's creates, with what was spent in the current period and what remains.
import type { Request, Response } from 'express';
import { z } from 'zod';
import { budgetsOf, remainingOf, type BudgetState } from '../db/budgets';
import { tenantOf } from './auth';
import type { ApiContext } from './context';
import { defineRoute, json } from './contract';
import { problemAnswers } from './problem';

const money = z
  .string()
  .regex(/^[0-9]+(\.[0-9]+)?$/)
  .describe('Credits, a decimal string');

const budgetView = z
  .object({
    scope: z.enum(['tenant', 'key']),
    key_id: z.uuid().nullable(),
    period: z.enum(['day', 'week', 'month']).describe('A calendar period in UTC'),
    period_start: z.iso.datetime(),
    period_end: z.iso.datetime(),
    limit: money,
    spent: money.describe("Reserved in the period by the scope's tasks, less what was released of those reservations"),
    remaining: money,
    thresholds_percent: z.array(z.int()).describe('Each emits tenant.budget_threshold once per period when crossed'),
  })
  .meta({ id: 'Budget' });

export const budgetAnswer = z.object({ budgets: z.array(budgetView) }).meta({ id: 'BudgetList' });

export const budgetRoutes = {
  get: defineRoute({
    method: 'get',
    path: '/v1/budget',
    operationId: 'getBudget',
    summary: "The tenant's spend budget and its API keys' (set by an operator), with the spend of the current period",
    tags: ['billing'],
    auth: 'bearer',
    responses: {
      200: { description: 'The budgets (empty: none set)', content: json(budgetAnswer) },
      ...problemAnswers([400, 401, 429, 500, 503], { bearer: true }),
    },
  }),
};

export function presentBudget(s: BudgetState): z.infer<typeof budgetView> {
  return {
    scope: s.budget.key_id === null ? 'tenant' : 'key',
    key_id: s.budget.key_id,
    period: s.budget.period,
    period_start: s.periodStart.toISOString(),
    period_end: s.periodEnd.toISOString(),
    limit: s.limit,
    spent: s.spent,
    remaining: remainingOf(s),
    thresholds_percent: [...s.budget.thresholds].sort((a, b) => a - b),
  };
}

export const budgetHandlers = (ctx: ApiContext) => ({
  async get(req: Request, res: Response) {
    const { tenantId } = tenantOf(req);
    res.json({ budgets: (await budgetsOf(ctx.db, tenantId)).map(presentBudget) });
  },
});
