// Models a tenant can order, what they cost, and which providers can serve them. A catalog
// entry is what the tenant orders and pays for; its routes are the providers able to run it,
// each with its own model id, limits and our cost there. An entry with one route pins its
// provider (the provider's own model id, e.g. "minimax/video-01"); an entry with several is a
// model family the router chooses a provider for (domain/router.ts). Prices are per second of
// output video, in credits, as decimal strings.
import { scaleMoney, toMicros, fromMicros } from './money';
import type { RouteCandidate } from './router';

export const RESOLUTIONS = ['480p', '720p', '1080p'] as const;
export type Resolution = (typeof RESOLUTIONS)[number];

export const PROVIDERS = ['replicate', 'fal', 'runway', 'kling'] as const;
export type ProviderName = (typeof PROVIDERS)[number];

/** One provider able to serve a catalog entry. */
export interface ProviderRoute {
  readonly provider: ProviderName;
  /** The provider's own model id. */
  readonly model: string;
  /** Static route order (the deterministic fallback): lower first. */
  readonly priority: number;
  /** What a second of output costs us at this provider (credits). */
  readonly costPerSecond: string;
  readonly maxDurationSeconds: number;
  readonly resolutions: readonly Resolution[];
  readonly supportsImageInput: boolean;
  /** The provider takes this model only with an input image (Runway gen4_turbo: image_to_video only). */
  readonly requiresImageInput?: boolean;
  /** The durations the provider takes, when not every whole second up to the maximum (Veo: 4, 6, 8). */
  readonly durationsSeconds?: readonly number[];
  /** The longest prompt the provider takes, in UTF-16 code units (Runway: 1000). */
  readonly maxPromptChars?: number;
}

/** What a route's limits are checked against: the create request's fields, by their API names. */
export interface RouteRequest {
  readonly prompt: string;
  readonly duration_seconds: number;
  readonly resolution: Resolution;
  readonly input_image_url?: string | undefined;
}

export interface Refusal {
  readonly field: keyof RouteRequest;
  readonly message: string;
}

export interface ModelEntry {
  /** What the tenant orders: a family name or a provider's model id. */
  readonly model: string;
  /** What the tenant pays per second at 480p. */
  readonly pricePerSecond: string;
  readonly maxDurationSeconds: number;
  readonly resolutions: readonly Resolution[];
  readonly routes: readonly ProviderRoute[];
}

type RouteLimits = Partial<Pick<ProviderRoute, 'supportsImageInput' | 'requiresImageInput' | 'durationsSeconds' | 'maxPromptChars'>>;

const pinned = (
  model: string,
  provider: ProviderName,
  pricePerSecond: string,
  costPerSecond: string,
  maxDurationSeconds: number,
  resolutions: readonly Resolution[],
  limits: RouteLimits = {},
): ModelEntry => ({
  model,
  pricePerSecond,
  maxDurationSeconds,
  resolutions,
  routes: [{ provider, model, priority: 0, costPerSecond, maxDurationSeconds, resolutions, supportsImageInput: true, ...limits }],
});

// Every route's limits are its model's published input (test/fixtures/provider-schemas/, sources
// and dates in docs/providers.md "Model input schemas"): a request a route admits is sent exactly as
// ordered, at the resolution and duration ordered, with the image when there is one
// (test/providers/catalog-schemas.test.ts holds every body the builders make to those schemas).

/** Kling 2.0 Master, at every provider: 720p only (no std/pro), 5 or 10 s (Kling's capability map). */
const KLING_V2_MASTER = { durationsSeconds: [5, 10] } as const;

/** fal's Kling text-to-video input: `duration` "5" or "10", no image, no resolution (720p, as Kling renders it). */
const FAL_KLING_TEXT = { ...KLING_V2_MASTER, supportsImageInput: false } as const;

/** Kling's own text2video endpoint takes no image (image to video is another endpoint, not sent). */
const KLING_TEXT = { ...KLING_V2_MASTER, supportsImageInput: false } as const;

/** Runway's documented limits (docs/providers.md "Documented evidence: Runway"; providers/runway.ts RUNWAY_MODELS). */
const RUNWAY_2_TO_10 = { durationsSeconds: [2, 3, 4, 5, 6, 7, 8, 9, 10], maxPromptChars: 1000 } as const;

export const MODEL_CATALOG: readonly ModelEntry[] = [
  // No resolution or duration input: it renders 6 s at 720p, so that is all it is sold as.
  pinned('minimax/video-01', 'replicate', '0.500000', '0.350000', 6, ['720p'], { durationsSeconds: [6] }),
  // Image to video only (start_image required); mode standard is 720p, pro 1080p.
  pinned('kwaivgi/kling-v2.1', 'replicate', '0.900000', '0.630000', 10, ['720p', '1080p'], { durationsSeconds: [5, 10], requiresImageInput: true }),
  pinned('luma/ray-2-720p', 'replicate', '0.700000', '0.500000', 9, ['720p'], { durationsSeconds: [5, 9] }),
  pinned('fal-ai/kling-video/v2/master/text-to-video', 'fal', '0.850000', '0.600000', 10, ['720p'], FAL_KLING_TEXT),
  pinned('gen4_turbo', 'runway', '0.600000', '0.450000', 10, ['720p'], { ...RUNWAY_2_TO_10, requiresImageInput: true }),
  pinned('gen4.5', 'runway', '1.000000', '0.750000', 10, ['720p'], RUNWAY_2_TO_10),
  pinned('veo3.1', 'runway', '1.600000', '1.200000', 8, ['720p', '1080p'], { durationsSeconds: [4, 6, 8], maxPromptChars: 1000 }),
  pinned('kling-v2-master', 'kling', '0.800000', '0.560000', 10, ['720p'], KLING_TEXT),
  {
    // One model, Kling 2.0 Master, three ways to reach it: Kling's own API, fal's queue and
    // Replicate (kwaivgi/kling-v2.0, the one of them that also takes a first frame).
    model: 'kling-v2',
    pricePerSecond: '0.900000',
    maxDurationSeconds: 10,
    resolutions: ['720p'],
    routes: [
      { provider: 'kling', model: 'kling-v2-master', priority: 0, costPerSecond: '0.560000', maxDurationSeconds: 10, resolutions: ['720p'], ...KLING_TEXT },
      {
        provider: 'fal',
        model: 'fal-ai/kling-video/v2/master/text-to-video',
        priority: 1,
        costPerSecond: '0.600000',
        maxDurationSeconds: 10,
        resolutions: ['720p'],
        ...FAL_KLING_TEXT,
      },
      {
        provider: 'replicate',
        model: 'kwaivgi/kling-v2.0',
        priority: 2,
        costPerSecond: '0.630000',
        maxDurationSeconds: 10,
        resolutions: ['720p'],
        supportsImageInput: true,
        ...KLING_V2_MASTER,
      },
    ],
  },
];

/** Resolution multipliers in percent. */
const RESOLUTION_FACTOR: Record<Resolution, bigint> = { '480p': 100n, '720p': 150n, '1080p': 200n };

export const findModel = (model: string): ModelEntry | undefined => MODEL_CATALOG.find((m) => m.model === model);

/** The deterministic first choice of an entry (lowest priority), used until the router has run. */
export function primaryRoute(entry: ModelEntry): ProviderRoute {
  return [...entry.routes].sort((a, b) => a.priority - b.priority)[0] as ProviderRoute;
}

/** A route's key among the held routes (db/catalog-routes.ts): its provider and the provider's model id. */
export const routeKey = (provider: string, model: string): string => `${provider} ${model}`;

/** Held routes by routeKey: a route held after a breaking schema change is not chosen (docs/decisions/0072). */
export interface HeldRoutes {
  has(key: string): boolean;
}

const NONE_HELD: HeldRoutes = new Set<string>();

/** The entry with its held routes left out (the entry itself when none is held). */
export function withoutHeldRoutes(entry: ModelEntry, held: HeldRoutes): ModelEntry {
  const routes = entry.routes.filter((r) => !held.has(routeKey(r.provider, r.model)));
  return routes.length === entry.routes.length ? entry : { ...entry, routes };
}

/** The catalog as the router reads it: entry → its candidates, limited to the providers configured here and not held. */
export function routerCatalog(available: readonly string[] = PROVIDERS, held: HeldRoutes = NONE_HELD): Record<string, readonly RouteCandidate[]> {
  const have = new Set(available);
  return Object.fromEntries(
    MODEL_CATALOG.map((m) => [
      m.model,
      m.routes
        .filter((r) => have.has(r.provider) && !held.has(routeKey(r.provider, r.model)))
        .map((r) => ({
          provider: r.provider,
          model: r.model,
          priority: r.priority,
          costPerSecond: Number(r.costPerSecond),
          maxDurationSeconds: r.maxDurationSeconds,
          resolutions: r.resolutions,
          supportsImageInput: r.supportsImageInput,
          ...(r.durationsSeconds ? { durationsSeconds: r.durationsSeconds } : {}),
          ...(r.requiresImageInput ? { requiresImageInput: true } : {}),
          ...(r.maxPromptChars !== undefined ? { maxPromptChars: r.maxPromptChars } : {}),
        })),
    ]),
  );
}

/** Why `route` cannot take `req`, or null when it can. */
export function routeRefusal(route: ProviderRoute, req: RouteRequest): Refusal | null {
  const at = `${route.model} at ${route.provider}`;
  if (!route.resolutions.includes(req.resolution)) return { field: 'resolution', message: `${at} supports ${route.resolutions.join(', ')}` };
  const durations = route.durationsSeconds;
  if (req.duration_seconds > route.maxDurationSeconds || (durations && !durations.includes(req.duration_seconds))) {
    return { field: 'duration_seconds', message: `${at} takes ${durations ? durations.join(', ') : `at most ${route.maxDurationSeconds}`} seconds` };
  }
  if (req.input_image_url && !route.supportsImageInput) return { field: 'input_image_url', message: `${at} does not take an input image` };
  if (!req.input_image_url && route.requiresImageInput) return { field: 'input_image_url', message: `${at} needs an input image (image to video only)` };
  if (route.maxPromptChars !== undefined && req.prompt.length > route.maxPromptChars) {
    return { field: 'prompt', message: `${at} takes at most ${route.maxPromptChars} characters` };
  }
  return null;
}

/**
 * Why no route of `entry` can take `req`, or null when one can. The fields are checked in order
 * (resolution, duration, image, prompt), each against the routes that passed the ones before, so
 * the refusal names the first field no route delivers and what the model does accept there.
 */
export function requestRefusal(entry: ModelEntry, req: RouteRequest): Refusal | null {
  const m = entry.model;
  const union = <T>(values: (r: ProviderRoute) => readonly T[], routes: readonly ProviderRoute[]): T[] => [...new Set(routes.flatMap(values))];
  const checks: readonly { readonly passes: (r: ProviderRoute) => boolean; readonly refusal: (left: readonly ProviderRoute[]) => Refusal }[] = [
    {
      passes: (r) => r.resolutions.includes(req.resolution),
      refusal: (left) => ({ field: 'resolution', message: `${m} supports ${union((r) => r.resolutions, left).join(', ')}` }),
    },
    {
      passes: (r) => req.duration_seconds <= r.maxDurationSeconds && (!r.durationsSeconds || r.durationsSeconds.includes(req.duration_seconds)),
      refusal: (left) => {
        const listed = left.every((r) => r.durationsSeconds);
        const durations = union((r) => r.durationsSeconds ?? [], left).sort((a, b) => a - b);
        const taken = listed ? durations.join(', ') : `at most ${Math.max(...left.map((r) => r.maxDurationSeconds))}`;
        return { field: 'duration_seconds', message: `${m} takes ${taken} seconds at ${req.resolution}` };
      },
    },
    {
      passes: (r) => (req.input_image_url ? r.supportsImageInput : !r.requiresImageInput),
      refusal: () => {
        if (!req.input_image_url) return { field: 'input_image_url', message: `${m} needs an input image (image to video only)` };
        const some = entry.routes.some((r) => r.supportsImageInput);
        return {
          field: 'input_image_url',
          message: `${m} does not take an input image${some ? ` at ${req.resolution}, ${req.duration_seconds} seconds` : ' (text to video only)'}`,
        };
      },
    },
    {
      passes: (r) => r.maxPromptChars === undefined || req.prompt.length <= r.maxPromptChars,
      refusal: (left) => ({ field: 'prompt', message: `${m} takes at most ${Math.max(...left.map((r) => r.maxPromptChars ?? 0))} characters` }),
    },
  ];
  let left: readonly ProviderRoute[] = entry.routes;
  if (left.length === 0) return { field: 'resolution', message: `${m} has no route` };
  for (const check of checks) {
    const passing = left.filter(check.passes);
    if (passing.length === 0) return check.refusal(left);
    left = passing;
  }
  return null;
}

/** Price of `seconds` of output at `resolution`. */
export function priceFor(entry: ModelEntry, resolution: Resolution, seconds: number): string {
  if (!Number.isInteger(seconds) || seconds < 0) throw new RangeError('seconds must be a whole number ≥ 0');
  const perSecond = scaleMoney(entry.pricePerSecond, RESOLUTION_FACTOR[resolution], 100n);
  return fromMicros(toMicros(perSecond) * BigInt(seconds));
}
