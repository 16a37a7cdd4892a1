// The providers' published input schemas, one fixture per catalog model
// (test/fixtures/provider-schemas/<provider>/<model>.json; sources and dates in docs/providers.md
// "Model input schemas"), compiled with ajv: the simulator refuses, per model, what the model's
// published schema refuses, and test/providers/catalog-schemas.test.ts holds every body the product
// can send to the same fixtures. Dev and tests only: nothing the API or the worker runs imports
// this (ajv is a devDependency), so the product's own limits stay typed in domain/catalog.ts and
// the request builders.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';
import addFormats from 'ajv-formats';

export const PROVIDER_SCHEMAS_DIR = fileURLToPath(new URL('../../test/fixtures/provider-schemas/', import.meta.url));

/** How the model decides one property of its output: a fixed value, or an input (through `values` when named). */
export type Delivered<T> = { readonly fixed: T } | { readonly input: string; readonly default?: unknown; readonly values?: Readonly<Record<string, T>> };

export interface ProviderSchemaFixture {
  readonly provider: string;
  readonly model: string;
  /** Where each part was read, and when. */
  readonly sources: readonly { readonly url: string; readonly read: string; readonly what: string }[];
  /** What the model delivers for a request, read from its page where no input decides it. */
  readonly delivers: {
    readonly resolution: Delivered<string>;
    readonly durationSeconds: Delivered<number>;
    /** The input carrying the first frame, or null: the model takes no image. */
    readonly image: { readonly input: string } | null;
  };
  /** The request's JSON Schema by endpoint: `input` for Replicate's and fal's model input, else the path. */
  readonly schemas: Readonly<Record<string, object>>;
}

/** One refusal, as the schema states it. */
export interface InputIssue {
  /** JSON pointer into the body ('' for the body itself). */
  readonly path: string;
  readonly keyword: string;
  readonly message: string;
}

/** Every fixture under `dir`, read once. */
export function readProviderSchemas(dir = PROVIDER_SCHEMAS_DIR): ProviderSchemaFixture[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => JSON.parse(readFileSync(path.join(dir, f), 'utf8')) as ProviderSchemaFixture);
}

const issue = (e: ErrorObject): InputIssue => {
  const missing = e.keyword === 'required' ? `/${String((e.params as { missingProperty?: unknown }).missingProperty)}` : '';
  return { path: `${e.instancePath}${missing}`, keyword: e.keyword, message: e.message ?? e.keyword };
};

/** The fixtures compiled: built once per simulator (or test) and handed to whoever checks a body. */
export class InputSchemas {
  private readonly fixtures = new Map<string, ProviderSchemaFixture>();
  private readonly validators = new Map<string, ValidateFunction>();
  /** Schemas a test put in place of the published ones (`replace`), by `provider model endpoint`. */
  private readonly replaced = new Map<string, object>();
  private readonly revisions = new Map<string, number>();
  private readonly ajv: Ajv;

  constructor(fixtures: readonly ProviderSchemaFixture[] = readProviderSchemas()) {
    // strictRequired off: a conditional `required` (kling-v2.1's end_image needs mode pro) names properties defined beside it.
    this.ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false });
    // Replicate's OpenAPI extension (the form's field order): no constraint.
    this.ajv.addVocabulary(['x-order']);
    addFormats(this.ajv);
    for (const f of fixtures) this.fixtures.set(`${f.provider} ${f.model}`, f);
    this.compileAll();
  }

  private compileAll(): void {
    this.validators.clear();
    for (const f of this.fixtures.values()) {
      for (const endpoint of Object.keys(f.schemas)) {
        const key = `${f.provider} ${f.model} ${endpoint}`;
        this.validators.set(key, this.ajv.compile(this.schema(f.provider, f.model, endpoint) ?? {}));
      }
    }
  }

  /** The schema the model publishes (and is checked against) at `endpoint`: a replacement, else its fixture's. */
  schema(provider: string, model: string, endpoint: string): object | undefined {
    return this.replaced.get(`${provider} ${model} ${endpoint}`) ?? this.fixture(provider, model)?.schemas[endpoint];
  }

  /**
   * The model publishes `schema` at `endpoint` from now on, and refuses what it refuses: a
   * provider's schema change, for tests. The model needs a fixture (the catalog's models).
   */
  replace(provider: string, model: string, endpoint: string, schema: object): void {
    if (!this.fixture(provider, model)?.schemas[endpoint]) throw new Error(`no published schema for ${provider} ${model} at ${endpoint}`);
    const key = `${provider} ${model} ${endpoint}`;
    const validate = this.ajv.compile(schema);
    this.replaced.set(key, schema);
    this.validators.set(key, validate);
    this.revisions.set(`${provider} ${model}`, this.revision(provider, model) + 1);
  }

  /** How many replacements a model's schemas have had: its revision (0 while as published). */
  revision(provider: string, model: string): number {
    return this.revisions.get(`${provider} ${model}`) ?? 0;
  }

  /** Every model back to its published schemas. */
  restore(): void {
    if (this.replaced.size === 0) return;
    this.replaced.clear();
    this.revisions.clear();
    this.compileAll();
  }

  /** The fixture of a model, if one is kept. */
  fixture(provider: string, model: string): ProviderSchemaFixture | undefined {
    return this.fixtures.get(`${provider} ${model}`);
  }

  all(): ProviderSchemaFixture[] {
    return [...this.fixtures.values()];
  }

  /**
   * The body checked against the model's schema for `endpoint`: [] when it validates, the issues
   * when not (the first per field, as the providers' validators name a field once), null when no
   * fixture is kept for the model (the simulator then takes any body). A model whose fixture has no
   * schema for the endpoint refuses every body there.
   */
  check(provider: string, model: string, endpoint: string, body: unknown): readonly InputIssue[] | null {
    if (!this.fixture(provider, model)) return null;
    const validate = this.validators.get(`${provider} ${model} ${endpoint}`);
    if (!validate) return [{ path: '', keyword: 'endpoint', message: `${model} is not served at ${endpoint}` }];
    if (validate(body)) return [];
    const byField = new Map<string, InputIssue>();
    for (const i of (validate.errors ?? []).map(issue)) if (!byField.has(i.path)) byField.set(i.path, i);
    return [...byField.values()];
  }
}
