// The catalog as a tenant sees it now (GET /v1/models) and the quote of a create (POST /v1/quotes),
// issue #52. Availability is read at most once per REUSE_MS however many ask (db/route-facts.ts);
// the quote runs the create's own validation and pricing (api/tasks.service.ts planCreate) and
// writes nothing but the quote.
import type { Db } from '../db/client';
import { insertQuote } from '../db/quotes';
import { providerFacts, type ProviderFacts } from '../db/route-facts';
import { MODEL_CATALOG, routeKey, routeRefusal, type ModelEntry, type ProviderRoute } from '../domain/catalog';
import { entryInputs, pricePerSecond, routeInputs, routeState, type RouteState } from '../domain/model-offer';
import { reusedFor } from '../observability/reuse';
import type { Admission } from './admission';
import { HttpProblem } from './problem';
import { planCreate, quotedRequestHash, type CreateRules } from './tasks.service';
import type { QuoteRequestBody } from './tasks.schemas';

/** Availability is shared this long between requests (one read of the facts per period). */
const REUSE_MS = 2_000;
/** Run times are measured over the jobs that ended this many hours ago at most. */
const RUN_WINDOW_HOURS = 24;

export interface RouteAvailabilityDeps {
  readonly db: Db;
  readonly admission: Admission;
  /** The adapters this deployment has, with their in-flight limits. */
  readonly providers: Readonly<Record<string, { readonly capabilities: { readonly maxConcurrency?: number } }>>;
}

export interface Availability {
  /** Null when new tasks are admitted here now; else why not (the mode, the region, the backlog). */
  readonly createsRefused: string | null;
  route(route: ProviderRoute): RouteState;
}

/** A function answering the availability of every route now, shared between callers for REUSE_MS. */
export function createRouteAvailability(deps: RouteAvailabilityDeps): () => Promise<Availability> {
  return reusedFor(REUSE_MS, async () => {
    const [facts, createsRefused, held] = await Promise.all([providerFacts(deps.db, RUN_WINDOW_HOURS), refusalOf(deps.admission), deps.admission.heldRoutes()]);
    const none: ProviderFacts = { breakerForce: null, slotLimit: null, inFlight: 0, waiting: 0, medianRunSeconds: null };
    return {
      createsRefused,
      route(route) {
        const f = facts[route.provider] ?? none;
        const adapter = deps.providers[route.provider];
        return routeState({
          configured: adapter !== undefined,
          breakerForce: f.breakerForce,
          slots: f.slotLimit ?? adapter?.capabilities.maxConcurrency ?? null,
          inFlight: f.inFlight,
          waiting: f.waiting,
          medianRunSeconds: f.medianRunSeconds,
          // Held after its model's published inputs changed in a way that breaks what we send (docs/decisions/0072).
          disabledReason: held.has(routeKey(route.provider, route.model))
            ? "held: its model's published inputs changed (ops catalog sync); an operator is reviewing it"
            : null,
        });
      },
    };
  });
}

async function refusalOf(admission: Admission): Promise<string | null> {
  try {
    await admission.assertCanCreate();
    return null;
  } catch (err) {
    if (err instanceof HttpProblem) return err.detail ?? err.title;
    throw err;
  }
}

const presentInputs = (i: ReturnType<typeof entryInputs>) => ({
  resolutions: i.resolutions,
  duration_seconds: i.durationsSeconds,
  input_image: i.imageInput,
  prompt_max_chars: i.maxPromptChars,
});

const presentRoute = (route: ProviderRoute, state: RouteState) => ({
  provider: route.provider,
  provider_model: route.model,
  inputs: presentInputs(routeInputs(route)),
  open: state.open,
  closed_reason: state.closedReason,
  waiting: state.waiting,
  estimated_wait_seconds: state.estimatedWaitSeconds,
});

/** The shortest estimate among open routes (null when none is open or none can be estimated). */
function bestWait(states: readonly RouteState[]): number | null {
  const waits = states.filter((s) => s.open && s.estimatedWaitSeconds !== null).map((s) => s.estimatedWaitSeconds!);
  return waits.length > 0 ? Math.min(...waits) : null;
}

export function presentModel(entry: ModelEntry, a: Availability) {
  const inputs = entryInputs(entry);
  const routes = [...entry.routes].sort((x, y) => x.priority - y.priority);
  const states = routes.map((r) => a.route(r));
  return {
    model: entry.model,
    kind: entry.routes.length > 1 ? ('family' as const) : ('pinned' as const),
    inputs: presentInputs(inputs),
    price_per_second: pricePerSecond(entry, inputs.resolutions),
    available: a.createsRefused === null && states.some((s) => s.open),
    estimated_wait_seconds: bestWait(states),
    routes: routes.map((r, i) => presentRoute(r, states[i]!)),
  };
}

/** Every model a tenant may order, with its availability now. */
export async function listModels(availability: () => Promise<Availability>) {
  const a = await availability();
  return { accepting_tasks: a.createsRefused === null, refused_reason: a.createsRefused, models: MODEL_CATALOG.map((m) => presentModel(m, a)) };
}

/**
 * The route a create would most likely run on: the tenant's preferred provider when it is open
 * and takes the request, else the first open route (by priority) that takes it, else the static
 * first choice. The router decides at the first attempt; the price does not depend on it.
 */
function likelyRoute(entry: ModelEntry, body: QuoteRequestBody, a: Availability, fallback: ProviderRoute): ProviderRoute {
  const takes = [...entry.routes].sort((x, y) => x.priority - y.priority).filter((r) => routeRefusal(r, body) === null && a.route(r).open);
  return takes.find((r) => r.provider === body.provider) ?? takes[0] ?? fallback;
}

/** Prices a create's body as the create would (same validation, same errors) and stores the quote. */
export async function quoteCreate(
  db: Db,
  availability: () => Promise<Availability>,
  args: CreateRules & { tenantId: string; body: QuoteRequestBody; ttlSeconds: number },
) {
  const plan = await planCreate(db, args.tenantId, args.body, args);
  const a = await availability();
  const route = likelyRoute(plan.entry, args.body, a, plan.first);
  const state = a.route(route);
  const quote = await insertQuote(db, {
    tenantId: args.tenantId,
    requestHash: quotedRequestHash(args.body),
    model: plan.entry.model,
    amount: plan.cost,
    ttlSeconds: args.ttlSeconds,
  });
  return {
    quote_id: quote.quote_id,
    expires_at: quote.expires_at.toISOString(),
    model: plan.entry.model,
    amount: quote.amount,
    price_per_second: pricePerSecond(plan.entry, [args.body.resolution])[args.body.resolution]!,
    route: { provider: route.provider, provider_model: route.model, open: state.open, closed_reason: state.closedReason },
    estimated_wait_seconds: state.estimatedWaitSeconds,
  };
}
