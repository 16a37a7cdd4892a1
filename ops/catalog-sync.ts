// `ops catalog sync`: each catalog model's input schema read from its provider's API where the
// provider publishes one (Replicate's model endpoint, its latest version's `openapi_schema`; fal's
// OpenAPI document per endpoint), compared with the stored copy (catalog_schema_revision) and with
// what the catalog sends: every body the request builders make for a route's admitted requests is
// held to the published schema. A change those bodies no longer fit (a required input we do not
// send, an enum value we sell removed, a type change, an input we send no longer published) holds
// the route off until an operator re-enables it; any other change is recorded and needs nothing.
// Runway and Kling publish no machine-readable schema: their routes are skipped, said so.
// docs/decisions/0072-catalog-kept-current.md.
import { createHash } from 'node:crypto';
import Ajv, { type ErrorObject } from 'ajv';
import addFormats from 'ajv-formats';
import { z } from 'zod';
import { providerInput } from '../activities/provider-input';
import { recordAudit } from '../db/audit';
import { heldRoutes, holdRoute, latestRevisions, recordRevision, releaseRoute, type SchemaRevisionRow } from '../db/catalog-routes';
import type { Db } from '../db/client';
import { canonicalJson } from '../domain/canonical-json';
import { MODEL_CATALOG, RESOLUTIONS, routeKey, routeRefusal, type ProviderRoute } from '../domain/catalog';
import { diffInputSchemas, inlineRefs, type SchemaChange } from '../domain/schema-diff';
import { falInput } from '../providers/fal';
import { replicateInput } from '../providers/replicate-input';

/** Where the schemas are read (config/env.ts: the providers' base URLs and PROVIDER_FAL_OPENAPI_URL). */
export interface SchemaSources {
  readonly replicate: { readonly baseUrl: string; readonly apiToken: string };
  readonly falOpenApiUrl: string;
  readonly timeoutMs: number;
}

interface Published {
  readonly input: Record<string, unknown>;
  /** Replicate's version id; null where the provider names none. */
  readonly version: string | null;
  readonly sourceUrl: string;
}

export type SyncStatus = 'up-to-date' | 'unrecorded' | 'changed' | 'breaking' | 'skipped' | 'error';

export interface ModelSync {
  readonly provider: string;
  readonly model: string;
  /** The catalog entries this model serves. */
  readonly entries: readonly string[];
  readonly status: SyncStatus;
  /** Why skipped, or what failed. */
  readonly note?: string;
  readonly version?: string | null;
  readonly storedVersion?: string | null;
  readonly digest?: string;
  readonly sourceUrl?: string;
  /** Since the stored copy (every input when none is stored). */
  readonly changes?: readonly SchemaChange[];
  /** What the catalog sends that the published schema refuses: one line per problem. */
  readonly breaks?: readonly string[];
  readonly held?: { readonly since: Date; readonly reason: string } | null;
  readonly inputSchema?: Record<string, unknown>;
}

const NO_SCHEMA: Readonly<Record<string, string>> = {
  runway: 'Runway publishes no machine-readable model schema (its SDK types and API reference are read by hand: docs/providers.md)',
  kling: 'Kling publishes no machine-readable model schema (its capability map is read by hand: docs/providers.md)',
};

const IMAGE = 'https://example.com/first-frame.png';

/** Every body the product sends for the requests `route` admits (each resolution, 1–20 s, with and without an image). */
export function catalogBodies(route: ProviderRoute): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const resolution of RESOLUTIONS) {
    for (let seconds = 1; seconds <= 20; seconds++) {
      for (const image of [undefined, IMAGE]) {
        const req = { prompt: 'a heron at dawn', duration_seconds: seconds, resolution, input_image_url: image };
        if (routeRefusal(route, req)) continue;
        const input = providerInput(req);
        const built = route.provider === 'replicate' ? replicateInput(route.model, input) : route.provider === 'fal' ? falInput(route.model, input) : null;
        if (built && 'input' in built) out.push({ ...built.input });
      }
    }
  }
  return out;
}

const replicateModel = z.object({
  latest_version: z.object({ id: z.string(), openapi_schema: z.object({ components: z.object({ schemas: z.record(z.string(), z.unknown()) }) }) }).nullable(),
});
const falDocument = z.object({
  paths: z.record(
    z.string(),
    z.object({ post: z.object({ requestBody: z.object({ content: z.record(z.string(), z.object({ schema: z.unknown() })) }) }).optional() }),
  ),
  components: z.object({ schemas: z.record(z.string(), z.unknown()) }),
});

async function getJson(url: string, headers: Record<string, string>, timeoutMs: number): Promise<unknown> {
  const res = await fetch(url, { headers: { accept: 'application/json', ...headers }, signal: AbortSignal.timeout(timeoutMs) });
  // The URL names no secret (the token rides in a header): safe to show.
  if (!res.ok) throw new Error(`GET ${url}: HTTP ${res.status}`);
  return res.json();
}

const asObject = (v: unknown, what: string): Record<string, unknown> => {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error(`${what} is not a JSON Schema object`);
  return v as Record<string, unknown>;
};

/** The model's input schema as its provider publishes it now, or null when the provider publishes none. */
async function fetchPublished(provider: string, model: string, s: SchemaSources): Promise<Published | null> {
  if (provider === 'replicate') {
    const base = s.replicate.baseUrl.replace(/\/+$/, '');
    const url = `${base}/v1/models/${model}`;
    const m = replicateModel.parse(await getJson(url, { authorization: `Bearer ${s.replicate.apiToken}` }, s.timeoutMs));
    if (!m.latest_version) throw new Error(`${model} has no published version`);
    const { schemas } = m.latest_version.openapi_schema.components;
    const input = asObject(inlineRefs(schemas['Input'], schemas), `${model}'s components.schemas.Input`);
    return { input, version: m.latest_version.id, sourceUrl: `${url}/versions/${m.latest_version.id}` };
  }
  if (provider === 'fal') {
    const url = `${s.falOpenApiUrl}?endpoint_id=${encodeURIComponent(model)}`;
    const doc = falDocument.parse(await getJson(url, {}, s.timeoutMs));
    const body = doc.paths[`/${model}`]?.post?.requestBody.content['application/json']?.schema;
    if (body === undefined) throw new Error(`${url} names no JSON request body for POST /${model}`);
    return { input: asObject(inlineRefs(body, doc.components.schemas), `${model}'s request body`), version: null, sourceUrl: url };
  }
  return null;
}

/** The catalog's provider models (a model on several entries once), optionally of one provider. */
function catalogModels(provider?: string): { provider: string; model: string; entries: string[]; routes: ProviderRoute[] }[] {
  const byKey = new Map<string, { provider: string; model: string; entries: string[]; routes: ProviderRoute[] }>();
  for (const entry of MODEL_CATALOG) {
    for (const route of entry.routes) {
      if (provider && route.provider !== provider) continue;
      const key = routeKey(route.provider, route.model);
      const m = byKey.get(key) ?? { provider: route.provider, model: route.model, entries: [], routes: [] };
      m.entries.push(entry.model);
      m.routes.push(route);
      byKey.set(key, m);
    }
  }
  return [...byKey.values()];
}

const issueLine = (e: ErrorObject): string => {
  const missing = e.keyword === 'required' ? `/${String((e.params as { missingProperty?: unknown }).missingProperty)}` : '';
  return `input${`${e.instancePath}${missing}`.replace(/\//g, '.')}: ${e.message ?? e.keyword}`;
};

/** What of `bodies` the schema refuses or no longer publishes, one line per problem with how many bodies have it. */
export function breaksOf(schema: Record<string, unknown>, bodies: readonly Record<string, unknown>[]): string[] {
  // Provider schemas carry their own keywords (x-order, nullable): not strict.
  const ajv = new Ajv({ allErrors: true, strict: false });
  addFormats(ajv);
  const validate = ajv.compile(schema);
  const published = asObject(schema['properties'] ?? {}, 'properties');
  const counts = new Map<string, number>();
  const count = (line: string) => counts.set(line, (counts.get(line) ?? 0) + 1);
  for (const body of bodies) {
    const lines = new Set<string>();
    if (!validate(body)) for (const e of validate.errors ?? []) lines.add(issueLine(e));
    for (const k of Object.keys(body)) if (!(k in published)) lines.add(`input.${k}: sent, but no longer published (the model would ignore it)`);
    for (const l of lines) count(l);
  }
  return [...counts].map(([line, n]) => `${line} (${n} of ${bodies.length} bodies)`);
}

const digestOf = (schema: unknown): string => createHash('sha256').update(canonicalJson(schema)).digest('hex');

type CatalogModel = ReturnType<typeof catalogModels>[number];
type Base = Pick<ModelSync, 'provider' | 'model' | 'entries' | 'held'>;

/** One model's published schema against its stored copy and against what the catalog sends. */
async function compare(m: CatalogModel, base: Base, sources: SchemaSources, previous: SchemaRevisionRow | undefined): Promise<ModelSync> {
  const published = await fetchPublished(m.provider, m.model, sources);
  if (!published) return { ...base, status: 'skipped', note: NO_SCHEMA[m.provider] ?? `${m.provider} publishes no machine-readable schema` };
  const digest = digestOf(published.input);
  const same = previous?.digest === digest;
  const breaks = breaksOf(
    published.input,
    m.routes.flatMap((r) => catalogBodies(r)),
  );
  return {
    ...base,
    status: same ? 'up-to-date' : breaks.length > 0 ? 'breaking' : previous ? 'changed' : 'unrecorded',
    version: published.version,
    storedVersion: previous?.provider_version ?? null,
    digest,
    sourceUrl: published.sourceUrl,
    changes: same ? [] : diffInputSchemas(previous?.input_schema ?? null, published.input),
    breaks,
    inputSchema: published.input,
  };
}

/** Reads every catalog model's published schema and compares it (reads only). */
export async function syncCatalog(db: Db, sources: SchemaSources, opts: { provider?: string } = {}): Promise<ModelSync[]> {
  const [stored, held] = await Promise.all([latestRevisions(db), heldRoutes(db)]);
  const out: ModelSync[] = [];
  for (const m of catalogModels(opts.provider)) {
    const key = routeKey(m.provider, m.model);
    const hold = held.get(key);
    const base = { provider: m.provider, model: m.model, entries: m.entries, held: hold ? { since: hold.held_at, reason: hold.reason } : null };
    try {
      out.push(await compare(m, base, sources, stored.get(key)));
    } catch (err) {
      out.push({ ...base, status: 'error', note: (err as Error).message });
    }
  }
  return out;
}

export interface Applied {
  readonly provider: string;
  readonly model: string;
  readonly revisionId: string;
  readonly held: boolean;
  readonly auditIds: readonly string[];
}

/** Records each new revision (audited); a breaking one also holds its route (audited), each model in one transaction. */
export async function applySync(db: Db, results: readonly ModelSync[], actor: string): Promise<Applied[]> {
  const applied: Applied[] = [];
  for (const r of results) {
    if (!(r.status === 'changed' || r.status === 'breaking' || r.status === 'unrecorded') || !r.inputSchema || !r.digest || !r.sourceUrl) continue;
    const breaking = r.status === 'breaking';
    const done = await db.transaction(async (tx) => {
      const target = { targetType: 'catalog_route', targetId: routeKey(r.provider, r.model), actor };
      const revisionId = await recordRevision(tx, {
        provider: r.provider,
        model: r.model,
        providerVersion: r.version ?? null,
        digest: r.digest as string,
        inputSchema: r.inputSchema as Record<string, unknown>,
        sourceUrl: r.sourceUrl as string,
        changes: r.changes ?? [],
        breaking,
        actor,
      });
      const detail = {
        revision_id: revisionId,
        version: r.version ?? null,
        previous_version: r.storedVersion ?? null,
        changes: r.changes ?? [],
        breaks: r.breaks ?? [],
      };
      const auditIds = [await recordAudit(tx, { ...target, action: 'catalog.record', reason: `ops catalog sync: ${r.status}`, detail })];
      if (breaking) {
        const reason = `the published schema breaks what the catalog sends: ${(r.breaks ?? []).join('; ')}`;
        await holdRoute(tx, { provider: r.provider, model: r.model, revisionId, reason, actor });
        auditIds.push(await recordAudit(tx, { ...target, action: 'catalog.hold', reason, detail: { revision_id: revisionId } }));
      }
      return { provider: r.provider, model: r.model, revisionId, held: breaking, auditIds };
    });
    applied.push(done);
  }
  return applied;
}

/** Releases a held route after review (audited); throws when the route is not held. */
export async function enableRoute(db: Db, args: { provider: string; model: string; actor: string; reason: string }): Promise<{ auditId: string }> {
  return db.transaction(async (tx) => {
    const released = await releaseRoute(tx, args.provider, args.model);
    if (!released) throw new Error(`${args.provider} ${args.model} is not held`);
    const auditId = await recordAudit(tx, {
      actor: args.actor,
      action: 'catalog.enable',
      targetType: 'catalog_route',
      targetId: routeKey(args.provider, args.model),
      reason: args.reason,
      detail: { released_revision_id: released.revision_id, held_since: released.held_at.toISOString(), hold_reason: released.reason },
    });
    return { auditId };
  });
}
