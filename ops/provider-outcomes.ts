// Operator views of what providers refused (docs/decisions/0070): models whose daily allowance of
// creates is spent, with the tasks waiting for its reset.
import type { Db } from '../db/client';
import { createCaps } from '../db/create-cap';
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
