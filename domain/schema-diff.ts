// What changed between two revisions of a model's published input schema (a JSON Schema object,
// as Replicate's `openapi_schema` components.schemas.Input and fal's OpenAPI input component state
// it, with their `$ref`s resolved): inputs added or removed, required or not, their type, enum
// values, ranges and defaults. Whether a change breaks a route is not decided here: that is what
// the catalog sends, held to the new schema (ops/catalog-sync.ts).

export interface SchemaChange {
  /** `input.<name>`, or `input` for the object itself. */
  readonly path: string;
  readonly kind: 'input-added' | 'input-removed' | 'required-added' | 'required-removed' | 'type' | 'enum-added' | 'enum-removed' | 'range' | 'default';
  readonly detail: string;
}

type Json = null | boolean | number | string | readonly Json[] | { readonly [k: string]: Json };
type Schema = { readonly [k: string]: Json };

const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);
const show = (v: unknown): string => (v === undefined ? '(none)' : JSON.stringify(v));

/**
 * The schema's `$ref`s replaced by what they name: `#/components/schemas/<Name>` in `components`
 * (an OpenAPI document's), `#/definitions/<Name>` and `#/$defs/<Name>` in `root` when given (a
 * schema's own definitions; left as they are otherwise, for a validator to resolve). A cycle stops
 * at depth 20.
 */
export function inlineRefs(schema: unknown, components: Readonly<Record<string, unknown>>, root?: Schema, depth = 0): unknown {
  if (depth > 20) throw new RangeError('schema $ref nesting deeper than 20');
  if (Array.isArray(schema)) return schema.map((s) => inlineRefs(s, components, root, depth + 1));
  if (!isObject(schema)) return schema;
  const ref = schema['$ref'];
  const [, where, name] = typeof ref === 'string' ? (/^#\/(components\/schemas|definitions|\$defs)\/(.+)$/.exec(ref) ?? []) : [];
  const resolvable = where === 'components/schemas' || ((where === 'definitions' || where === '$defs') && root !== undefined);
  if (typeof ref === 'string' && resolvable) {
    const defs = where === 'components/schemas' ? components : root?.[where ?? ''];
    const target = name !== undefined && isObject(defs) ? defs[name] : undefined;
    if (target === undefined) throw new RangeError(`unresolved $ref ${ref}`);
    const { $ref: _ref, ...rest } = schema;
    const resolved = inlineRefs(target, components, root, depth + 1);
    return Object.keys(rest).length === 0 ? resolved : { ...(resolved as object), ...(inlineRefs(rest, components, root, depth + 1) as object) };
  }
  return Object.fromEntries(Object.entries(schema).map(([k, v]) => [k, inlineRefs(v, components, root, depth + 1)]));
}

/** A property's own constraints, with a single-entry `allOf` (Cog's way to name an enum) folded in. */
function flat(p: unknown): Schema {
  if (!isObject(p)) return {};
  const all = p['allOf'];
  if (Array.isArray(all) && all.length === 1 && isObject(all[0])) return { ...all[0], ...p };
  return p;
}

const properties = (s: Schema | null): Readonly<Record<string, Json>> => (s && isObject(s['properties']) ? s['properties'] : {});
const required = (s: Schema | null): readonly string[] =>
  s && Array.isArray(s['required']) ? s['required'].filter((r): r is string => typeof r === 'string') : [];

function typeOf(p: Schema): string {
  const t = p['type'];
  if (typeof t === 'string') return typeof p['format'] === 'string' ? `${t} (${p['format']})` : t;
  if (Array.isArray(t)) return t.join(' | ');
  return p['enum'] ? 'enum' : 'any';
}

function enumValues(p: Schema): readonly Json[] | null {
  const e = p['enum'] ?? (p['const'] !== undefined ? [p['const']] : undefined);
  return Array.isArray(e) ? e : null;
}

const RANGE_KEYS = ['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum', 'minLength', 'maxLength', 'minItems', 'maxItems'] as const;

function propertyChanges(name: string, before: Schema, after: Schema): SchemaChange[] {
  const path = `input.${name}`;
  const out: SchemaChange[] = [];
  if (typeOf(before) !== typeOf(after)) out.push({ path, kind: 'type', detail: `${typeOf(before)} → ${typeOf(after)}` });
  const [eb, ea] = [enumValues(before), enumValues(after)];
  if (eb || ea) {
    const key = (v: Json) => JSON.stringify(v);
    const had = new Set((eb ?? []).map(key));
    const has = new Set((ea ?? []).map(key));
    const added = [...has].filter((v) => !had.has(v));
    const removed = [...had].filter((v) => !has.has(v));
    // An enum dropped altogether takes any value: reported as its values removed.
    if (ea && added.length > 0) out.push({ path, kind: 'enum-added', detail: `now also ${added.join(', ')}` });
    if (removed.length > 0)
      out.push({ path, kind: 'enum-removed', detail: ea ? `no longer ${removed.join(', ')}` : `any value now (was ${removed.join(', ')})` });
  }
  for (const k of RANGE_KEYS) {
    if (JSON.stringify(before[k]) !== JSON.stringify(after[k])) out.push({ path, kind: 'range', detail: `${k} ${show(before[k])} → ${show(after[k])}` });
  }
  if (JSON.stringify(before['default']) !== JSON.stringify(after['default'])) {
    out.push({ path, kind: 'default', detail: `default ${show(before['default'])} → ${show(after['default'])}` });
  }
  return out;
}

/** Every change from `before` (null: none recorded yet, so every input is new) to `after`. */
export function diffInputSchemas(before: unknown, after: unknown): SchemaChange[] {
  // A schema's own definitions resolved, so an input named through one is compared by what it is.
  const own = (v: unknown): Schema | null => (isObject(v) ? (inlineRefs(v, {}, v) as Schema) : null);
  const b = own(before);
  const a = own(after) ?? {};
  const [pb, pa] = [properties(b), properties(a)];
  const [rb, ra] = [new Set(required(b)), new Set(required(a))];
  const out: SchemaChange[] = [];
  for (const name of [...new Set([...Object.keys(pb), ...Object.keys(pa)])].sort()) {
    const path = `input.${name}`;
    if (!(name in pb)) {
      out.push({ path, kind: 'input-added', detail: `${ra.has(name) ? 'required' : 'optional'} ${typeOf(flat(pa[name]))}` });
      continue;
    }
    if (!(name in pa)) {
      out.push({ path, kind: 'input-removed', detail: `was ${rb.has(name) ? 'required' : 'optional'} ${typeOf(flat(pb[name]))}` });
      continue;
    }
    if (!rb.has(name) && ra.has(name)) out.push({ path, kind: 'required-added', detail: 'now required' });
    if (rb.has(name) && !ra.has(name)) out.push({ path, kind: 'required-removed', detail: 'now optional' });
    out.push(...propertyChanges(name, flat(pb[name]), flat(pa[name])));
  }
  return out;
}
