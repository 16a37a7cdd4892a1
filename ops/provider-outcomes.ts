// Operator views of what providers refused (docs/decisions/0070): models whose daily allowance of
// creates is spent, with the tasks waiting for its reset; and who sends what content moderation refuses.
import type { Db } from '../db/client';
import { createCaps } from '../db/create-cap';
import { moderatedSince } from '../db/moderation';
import { table } from './format';

export interface CapsReport {
  readonly caps: readonly {
    readonly provider: string;
    readonly model: string;
    readonly capped_until: string;
    readonly capped_at: string;
    readonly refusals: number;
    readonly waiting: number;
    readonly last_error: string | null;
  }[];
}

/** Every capped provider model: until when, since when, refusals in this spell and attempts waiting. */
export async function capsReport(db: Db): Promise<CapsReport> {
  const caps = await createCaps(db);
  return {
    caps: caps.map((c) => ({
      provider: c.provider,
      model: c.provider_model,
      capped_until: c.capped_until.toISOString(),
      capped_at: c.capped_at.toISOString(),
      refusals: c.refusals,
      waiting: c.waiting,
      last_error: c.last_error,
    })),
  };
}

export function printCaps(r: CapsReport): string {
  if (r.caps.length === 0) return 'no provider model has its daily allowance spent';
  return table(
    r.caps.map((c) => ({ provider: c.provider, model: c.model, until: c.capped_until, since: c.capped_at, refusals: c.refusals, waiting: c.waiting })),
    ['provider', 'model', 'until', 'since', 'refusals', 'waiting'],
  );
}

export interface ModerationReport {
  readonly since: string;
  readonly tenants: readonly {
    readonly tenant_id: string;
    readonly tenant: string | null;
    readonly provider: string;
    readonly tasks: number;
    readonly last: string;
  }[];
}

/** CONTENT_MODERATED tasks per tenant and provider since `since`: who keeps sending refused prompts. */
export async function moderationReport(db: Db, since: Date): Promise<ModerationReport> {
  const rows = await moderatedSince(db, since);
  return {
    since: since.toISOString(),
    tenants: rows.map((r) => ({ tenant_id: r.tenantId, tenant: r.tenantName, provider: r.provider, tasks: r.tasks, last: r.last.toISOString() })),
  };
}

export function printModeration(r: ModerationReport): string {
  if (r.tenants.length === 0) return `no task was refused by a provider's content moderation since ${r.since}`;
  return [
    `tasks refused by a provider's content moderation since ${r.since}:`,
    table([...r.tenants], ['tenant', 'tenant_id', 'provider', 'tasks', 'last']),
  ].join('\n');
}
