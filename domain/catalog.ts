// Models a tenant can order, what they cost, and which provider serves them. Prices are
// per second of output video, in credits, as decimal strings.
import { scaleMoney, toMicros, fromMicros } from './money';

export const RESOLUTIONS = ['480p', '720p', '1080p'] as const;
export type Resolution = (typeof RESOLUTIONS)[number];

export const PROVIDERS = ['replicate', 'fal', 'runway', 'kling'] as const;
export type ProviderName = (typeof PROVIDERS)[number];

export interface ModelEntry {
  readonly model: string;
  readonly provider: ProviderName;
  readonly pricePerSecond: string;
  readonly maxDurationSeconds: number;
  readonly resolutions: readonly Resolution[];
}

export const MODEL_CATALOG: readonly ModelEntry[] = [
  { model: 'minimax/video-01', provider: 'replicate', pricePerSecond: '0.500000', maxDurationSeconds: 10, resolutions: ['480p', '720p'] },
  { model: 'kwaivgi/kling-v2.1', provider: 'replicate', pricePerSecond: '0.900000', maxDurationSeconds: 10, resolutions: ['480p', '720p', '1080p'] },
  { model: 'luma/ray-2-720p', provider: 'replicate', pricePerSecond: '0.700000', maxDurationSeconds: 9, resolutions: ['720p'] },
  { model: 'fal-ai/kling-video/v2/master/text-to-video', provider: 'fal', pricePerSecond: '0.850000', maxDurationSeconds: 10, resolutions: ['720p', '1080p'] },
  { model: 'gen4_turbo', provider: 'runway', pricePerSecond: '0.600000', maxDurationSeconds: 10, resolutions: ['720p'] },
  { model: 'kling-v2-master', provider: 'kling', pricePerSecond: '0.800000', maxDurationSeconds: 10, resolutions: ['720p', '1080p'] },
];

/** Resolution multipliers in percent. */
const RESOLUTION_FACTOR: Record<Resolution, bigint> = { '480p': 100n, '720p': 150n, '1080p': 200n };

export const findModel = (model: string): ModelEntry | undefined => MODEL_CATALOG.find((m) => m.model === model);

/** Price of `seconds` of output at `resolution`. */
export function priceFor(entry: ModelEntry, resolution: Resolution, seconds: number): string {
  if (!Number.isInteger(seconds) || seconds < 0) throw new RangeError('seconds must be a whole number ≥ 0');
  const perSecond = scaleMoney(entry.pricePerSecond, RESOLUTION_FACTOR[resolution], 100n);
  return fromMicros(toMicros(perSecond) * BigInt(seconds));
}
