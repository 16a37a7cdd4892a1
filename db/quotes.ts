// Quotes (issue #52, docs/api.md "Quotes"): the price `POST /v1/quotes` answered, which a create
// may cite until it expires. This module owns task_quote's writes; a quote is the only thing a
// quote request writes.
import { randomUUID } from 'node:crypto';
import { and, eq, sql } from 'drizzle-orm';
import type { DbOrTx } from './client';
import { taskQuote, type TaskQuoteRow } from './schema';

/** Stores a quote valid for `ttlSeconds` on the database's clock; returns it. */
export async function insertQuote(
  db: DbOrTx,
  q: { tenantId: string; requestHash: string; model: string; amount: string; ttlSeconds: number },
): Promise<TaskQuoteRow> {
  const [row] = await db
    .insert(taskQuote)
    .values({
      quote_id: randomUUID(),
      tenant_id: q.tenantId,
      request_hash: q.requestHash,
      model: q.model,
      amount: q.amount,
      expires_at: sql`now() + make_interval(secs => ${q.ttlSeconds}::float8)`,
    })
    .returning();
  return row!;
}

export type CitedQuote = { kind: 'unknown' } | { kind: 'expired'; quote: TaskQuoteRow } | { kind: 'valid'; quote: TaskQuoteRow };

/** The tenant's quote `quoteId` and whether it is still valid (another tenant's quote is unknown). */
export async function citedQuote(db: DbOrTx, tenantId: string, quoteId: string): Promise<CitedQuote> {
  const [row] = await db
    .select({ quote: taskQuote, valid: sql<boolean>`${taskQuote.expires_at} > now()` })
    .from(taskQuote)
    .where(and(eq(taskQuote.quote_id, quoteId), eq(taskQuote.tenant_id, tenantId)));
  if (!row) return { kind: 'unknown' };
  return row.valid ? { kind: 'valid', quote: row.quote } : { kind: 'expired', quote: row.quote };
}
