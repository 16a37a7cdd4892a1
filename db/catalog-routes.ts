// The catalog's record of its providers' published input schemas and the routes held off after a
// breaking change (docs/decisions/0072): the only writer of catalog_schema_revision and
// catalog_route_hold. Admission (api/tasks.service.ts) and the router (activities/dispatch.ts)
// read the holds through `heldRoutes`; GET /v1/models can too.
import { randomUUID } from 'node:crypto';
import { and, desc, eq, sql } from 'drizzle-orm';
import { routeKey } from '../domain/catalog';
import type { DbOrTx } from './client';
import { catalogRouteHold, catalogSchemaRevision, type CatalogSchemaChange } from './schema';

export type SchemaRevisionRow = typeof catalogSchemaRevision.$inferSelect;
export type RouteHoldRow = typeof catalogRouteHold.$inferSelect;

/** The routes held off now, by routeKey(provider, model): one small read (a handful of rows at most). */
export async function heldRoutes(db: DbOrTx): Promise<ReadonlyMap<string, RouteHoldRow>> {
  const rows = await db.select().from(catalogRouteHold);
  return new Map(rows.map((r) => [routeKey(r.provider, r.model), r]));
}

/** The latest recorded revision of each (provider, model). */
export async function latestRevisions(db: DbOrTx): Promise<ReadonlyMap<string, SchemaRevisionRow>> {
  const rows = await db
    .selectDistinctOn([catalogSchemaRevision.provider, catalogSchemaRevision.model])
    .from(catalogSchemaRevision)
    .orderBy(catalogSchemaRevision.provider, catalogSchemaRevision.model, desc(catalogSchemaRevision.recorded_at));
  return new Map(rows.map((r) => [routeKey(r.provider, r.model), r]));
}

export interface NewRevision {
  readonly provider: string;
  readonly model: string;
  readonly providerVersion: string | null;
  readonly digest: string;
  readonly inputSchema: Record<string, unknown>;
  readonly sourceUrl: string;
  readonly changes: readonly CatalogSchemaChange[];
  readonly breaking: boolean;
  readonly actor: string;
}

/** Appends one revision; returns its id. */
export async function recordRevision(tx: DbOrTx, r: NewRevision): Promise<string> {
  const revisionId = randomUUID();
  await tx.insert(catalogSchemaRevision).values({
    revision_id: revisionId,
    provider: r.provider,
    model: r.model,
    provider_version: r.providerVersion,
    digest: r.digest,
    input_schema: r.inputSchema,
    source_url: r.sourceUrl,
    changes: r.changes,
    breaking: r.breaking,
    recorded_by: r.actor,
  });
  return revisionId;
}

/** Holds the route off (or moves an existing hold to the newer revision). */
export async function holdRoute(tx: DbOrTx, h: { provider: string; model: string; revisionId: string; reason: string; actor: string }): Promise<void> {
  await tx
    .insert(catalogRouteHold)
    .values({ provider: h.provider, model: h.model, revision_id: h.revisionId, reason: h.reason, held_by: h.actor })
    .onConflictDoUpdate({
      target: [catalogRouteHold.provider, catalogRouteHold.model],
      set: { revision_id: h.revisionId, reason: h.reason, held_by: h.actor, held_at: sql`now()` },
    });
}

/** Releases the route's hold; returns the hold released, or null when it was not held. */
export async function releaseRoute(tx: DbOrTx, provider: string, model: string): Promise<RouteHoldRow | null> {
  const [row] = await tx
    .delete(catalogRouteHold)
    .where(and(eq(catalogRouteHold.provider, provider), eq(catalogRouteHold.model, model)))
    .returning();
  return row ?? null;
}
