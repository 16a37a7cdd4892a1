// What GET /v1/models shows of a catalog entry (issue #52): the inputs its routes take together,
// the price of a second at each resolution, and whether each route is open now with an estimate
// of the wait for its provider's slot. Pure: the facts come from db/route-facts.ts.
import { priceFor, RESOLUTIONS, type ModelEntry, type ProviderRoute, type Resolution } from './catalog';

/** The create body's own limits (api/tasks.schemas.ts): a route without its own takes these. */
export const REQUEST_LIMITS = { promptChars: 2000, maxDurationSeconds: 20 } as const;

export type ImageInput = 'none' | 'optional' | 'required';

export interface OfferedInputs {
  readonly resolutions: readonly Resolution[];
  /** Every duration some route takes, ascending. */
  readonly durationsSeconds: readonly number[];
  readonly imageInput: ImageInput;
  /** The longest prompt some route takes. */
  readonly maxPromptChars: number;
}

const durationsOf = (r: Pick<ProviderRoute, 'durationsSeconds' | 'maxDurationSeconds'>): number[] =>
  r.durationsSeconds ? [...r.durationsSeconds] : Array.from({ length: Math.min(r.maxDurationSeconds, REQUEST_LIMITS.maxDurationSeconds) }, (_, i) => i + 1);

function imageOf(routes: readonly ProviderRoute[]): ImageInput {
  if (!routes.some((r) => r.supportsImageInput)) return 'none';
  return routes.every((r) => r.requiresImageInput) ? 'required' : 'optional';
}

/** The inputs one route takes. */
export function routeInputs(r: ProviderRoute): OfferedInputs {
  return {
    resolutions: RESOLUTIONS.filter((x) => r.resolutions.includes(x)),
    durationsSeconds: durationsOf(r),
    imageInput: imageOf([r]),
    maxPromptChars: r.maxPromptChars ?? REQUEST_LIMITS.promptChars,
  };
}

/** The inputs a create may name for the entry: what at least one of its routes takes. */
export function entryInputs(entry: ModelEntry): OfferedInputs {
  const each = entry.routes.map(routeInputs);
  return {
    resolutions: RESOLUTIONS.filter((x) => each.some((i) => i.resolutions.includes(x))),
    durationsSeconds: [...new Set(each.flatMap((i) => i.durationsSeconds))].sort((a, b) => a - b),
    imageInput: imageOf(entry.routes),
    maxPromptChars: Math.max(...each.map((i) => i.maxPromptChars)),
  };
}

/** The price of one second at each resolution the entry offers (credits, decimal strings). */
export function pricePerSecond(entry: ModelEntry, resolutions: readonly Resolution[]): Partial<Record<Resolution, string>> {
  return Object.fromEntries(resolutions.map((r) => [r, priceFor(entry, r, 1)]));
}

export interface SlotFacts {
  readonly waiting: number;
  readonly inFlight: number;
  /** Slots the provider has; null: unknown (no limit recorded or configured). */
  readonly slots: number | null;
  /** Median seconds a job held a slot recently; null: none measured. */
  readonly medianRunSeconds: number | null;
}

/**
 * Seconds a new attempt would wait for a slot: 0 when one is free and nobody waits; otherwise the
 * rounds of jobs ahead of it (those waiting and itself, over the slots) times the measured run
 * time. Null when that cannot be said (no measured run, or no known number of slots).
 */
export function estimateWaitSeconds(f: SlotFacts): number | null {
  const free = f.slots === null || f.inFlight < f.slots;
  if (f.waiting === 0 && free) return 0;
  if (f.slots === null || f.slots <= 0 || f.medianRunSeconds === null) return null;
  return Math.ceil(Math.ceil((f.waiting + 1) / f.slots) * f.medianRunSeconds);
}

export interface RouteState {
  readonly open: boolean;
  /** Why the route takes no new work now; null when open. */
  readonly closedReason: string | null;
  readonly waiting: number;
  readonly estimatedWaitSeconds: number | null;
}

/**
 * Whether a route is open now: its provider is configured here, the operator has not forced its
 * breaker open nor set its limit to 0, and nothing else (`disabledReason`, e.g. a catalog sync)
 * closed it.
 */
export function routeState(
  f: SlotFacts & { readonly configured: boolean; readonly breakerForce: 'open' | 'closed' | null; readonly disabledReason?: string | null },
): RouteState {
  const closedReason = !f.configured
    ? 'the provider is not configured in this deployment'
    : f.breakerForce === 'open'
      ? "the provider's breaker is forced open by an operator"
      : f.slots === 0
        ? "the provider's in-flight limit is 0"
        : (f.disabledReason ?? null);
  return { open: closedReason === null, closedReason, waiting: f.waiting, estimatedWaitSeconds: closedReason === null ? estimateWaitSeconds(f) : null };
}
