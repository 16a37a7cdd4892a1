// Whether a provider's callbacks are healthy, from facts: a callback of that provider reached
// the inbox within the window. Polls of such a provider slow down (domain/backoff.ts
// pollInterval); as soon as the window passes without a callback they speed up again. Read at
// most once per `cacheMs` per provider and process: polls are frequent, the answer changes slowly.
import { and, eq, gt, sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { callbackInbox } from '../db/schema';
import type { Clock } from './deps';

export interface CallbackHealth {
  healthy(provider: string): Promise<boolean>;
}

export function createCallbackHealth(opts: { db: Db; clock: Clock; windowMs: number; cacheMs?: number }): CallbackHealth {
  const cacheMs = opts.cacheMs ?? 10_000;
  const cache = new Map<string, { at: number; healthy: boolean }>();
  return {
    async healthy(provider) {
      if (opts.windowMs <= 0) return false;
      const now = opts.clock.now();
      const hit = cache.get(provider);
      if (hit && now.getTime() - hit.at < cacheMs) return hit.healthy;
      const [row] = await opts.db
        .select({ one: sql<number>`1` })
        .from(callbackInbox)
        .where(
          and(
            eq(callbackInbox.provider, provider),
            eq(callbackInbox.source, 'callback'),
            gt(callbackInbox.received_at, new Date(now.getTime() - opts.windowMs)),
          ),
        )
        .limit(1);
      const healthy = row !== undefined;
      cache.set(provider, { at: now.getTime(), healthy });
      return healthy;
    },
  };
}
