// GET /v1/usage: its query and answer (docs/billing.md "Usage"). The sums come from the ledger
// (db/usage.ts); the CSV download is the same rows.
import { z } from 'zod';
import { USAGE_GROUPS } from '../db/usage';

/** The longest window one request may ask for: a year and a day (group_by=day stays a few hundred rows). */
export const USAGE_MAX_DAYS = 366;
const DAY_MS = 86_400_000;

/** An RFC 3339 timestamp, or a date (midnight UTC). */
const instant = z.union([z.iso.datetime({ offset: true }), z.iso.date()]).transform((v) => new Date(v.length === 10 ? `${v}T00:00:00Z` : v));

export const usageQuery = z
  .strictObject({
    from: instant.describe('Start of the window, inclusive: an RFC 3339 timestamp or a date (midnight UTC)'),
    to: instant.describe('End of the window, exclusive: an RFC 3339 timestamp or a date (midnight UTC)'),
    group_by: z.enum(USAGE_GROUPS).default('day').describe('day (UTC), model (as ordered) or key (the API key that created the task)'),
  })
  .superRefine((q, ctx) => {
    if (q.to.getTime() <= q.from.getTime()) ctx.addIssue({ code: 'custom', path: ['to'], message: 'must be after from' });
    else if (q.to.getTime() - q.from.getTime() > USAGE_MAX_DAYS * DAY_MS) {
      ctx.addIssue({ code: 'custom', path: ['to'], message: `the window may span at most ${USAGE_MAX_DAYS} days` });
    }
  });

const credits = z
  .string()
  .regex(/^[0-9]+(\.[0-9]+)?$/)
  .describe('Credits, a decimal string');

const usageFigures = z.object({
  tasks: z.number().int().describe('Tasks whose reservation was closed (charged or released) in the window'),
  seconds: z.string().describe('Seconds of video delivered by those that succeeded (as measured), a decimal string'),
  charged: credits.describe('Credits charged'),
  refunded: credits.describe('Credits reserved and given back (released or refunded)'),
});

export const usageGroup = usageFigures
  .extend({
    group: z.string().nullable().describe('The day (YYYY-MM-DD, UTC), the model, or the API key id; null: a task created before keys were recorded'),
  })
  .meta({ id: 'UsageGroup' });

export const usageAnswer = z
  .object({
    from: z.iso.datetime(),
    to: z.iso.datetime(),
    group_by: z.enum(USAGE_GROUPS),
    groups: z.array(usageGroup),
    totals: usageFigures,
  })
  .meta({ id: 'Usage' });

export const usageCsv = z.string().describe('The groups as CSV (RFC 4180): a header row `group,tasks,seconds,charged,refunded`, then one row per group');
