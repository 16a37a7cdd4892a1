// Whether a provider's callbacks are healthy, from facts: a callback of that provider reached
// the inbox within the window. Polls of such a provider slow down (domain/backoff.ts
// pollInterval); as soon as the window passes without a callback they speed up again. Read at
// most once per `cacheMs` per provider and process: polls are frequent, the answer changes slowly.
import { and, eq, gt, sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { callbackInbox } from '../db/schema';
import { cachedPerKey } from './cached';
import type { Clock } from './deps';

export interface CallbackHealth {
  healthy(provider: string): Promise<boolean>;
}

export function createCallbackHealth(opts: { db: Db; clock: Clock; windowMs: number; cacheMs?: number }): CallbackHealth {
  const read = cachedPerKey(opts.clock, opts.cacheMs ?? 10_000, async (provider) => {
    const now = opts.clock.now();
    const [row] = await opts.db
      .select({ one: sql<number>`1` })
      .from(callbackInbox)
      .where(
        and(eq(callbackInbox.provider, provider), eq(callbackInbox.source, 'callback'), gt(callbackInbox.received_at, new Date(now.getTime() - opts.windowMs))),
      )
      .limit(1);
    return row !== undefined;
  });
  return {
    healthy: (provider) => (opts.windowMs <= 0 ? Promise.resolve(false) : read(provider)),
  };
}
