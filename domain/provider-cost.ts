// What a provider job cost us (docs/decisions/0071-provider-cost-per-attempt.md): what the provider
// reported on the finished job, else what its published price and the job's own figures make it,
// else unknown. Recorded on the attempt in the transaction that applies the job's end
// (activities/apply-inbox.ts) and read by `ops usage` beside what the tenant was charged.
import { fromMicros, toMicros } from './money';
import type { ProviderJobState } from './states';

export const PROVIDER_COST_SOURCES = ['reported', 'computed', 'unknown'] as const;
export type ProviderCostSource = (typeof PROVIDER_COST_SOURCES)[number];

/** The units a provider's cost is stated in: US dollars, or Runway's API credits. */
export const PROVIDER_COST_UNITS = ['USD', 'runway_credit'] as const;
export type ProviderCostUnit = (typeof PROVIDER_COST_UNITS)[number];

export interface ProviderCost {
  /** Decimal string, 6 places; null when unknown. */
  readonly amount: string | null;
  readonly unit: ProviderCostUnit | null;
  readonly source: ProviderCostSource;
}

/** A model's published price, per second of output video, for a job that delivered one. */
interface PublishedPrice {
  readonly perOutputSecond: string;
  readonly unit: ProviderCostUnit;
  /** Where it is published and when it was read (docs/providers.md "Provider cost"). */
  readonly source: string;
}

/**
 * Published prices we compute a cost from, by provider and model. Only figures the provider
 * publishes for the model itself; a model missing here has an unknown cost unless the provider
 * reports one on the job.
 */
export const PUBLISHED_PRICES: Readonly<Record<string, Readonly<Record<string, PublishedPrice>>>> = {
  fal: {
    // "For 5s video your request will cost $1.40. For every additional second you will be charged $0.28."
    'fal-ai/kling-video/v2/master/text-to-video': {
      perOutputSecond: '0.280000',
      unit: 'USD',
      source: 'https://fal.ai/models/fal-ai/kling-video/v2/master/text-to-video/llms.txt (read 2026-12-07)',
    },
  },
};

export interface FinishedJob {
  readonly provider: string;
  readonly model: string;
  readonly state: ProviderJobState;
  /** The job's numeric figures as the adapter read them (ProviderJob.metrics). */
  readonly metrics: Readonly<Record<string, number>> | null;
  /** The seconds of video the job was asked for (what the attempt sent). */
  readonly requestedSeconds: number;
}

export const UNKNOWN_COST: ProviderCost = { amount: null, unit: null, source: 'unknown' };

/** A non-negative finite number as a 6-place decimal string, or null. */
function decimal(n: number | undefined): string | null {
  if (n === undefined || !Number.isFinite(n) || n < 0) return null;
  return fromMicros(BigInt(Math.round(n * 1_000_000)));
}

/**
 * The cost of a finished job:
 * - Runway reports `cost.credits` on every terminal task ("Fully refunded tasks report 0"),
 *   read by the adapter as the metric `cost_credits`: reported.
 * - fal bills "only for successful outputs" at the model's published price: a COMPLETED job costs
 *   its price per second × the seconds sent; a failed one is unknown (an input error may be billed).
 * - Replicate's and Kling's published figures for our models were not found (docs/decisions/0071):
 *   unknown, with the job's metrics (Replicate's `predict_time`) kept on the attempt.
 */
export function providerCost(job: FinishedJob, prices = PUBLISHED_PRICES): ProviderCost {
  if (job.provider === 'runway') {
    const credits = decimal(job.metrics?.['cost_credits']);
    return credits === null ? UNKNOWN_COST : { amount: credits, unit: 'runway_credit', source: 'reported' };
  }
  const price = prices[job.provider]?.[job.model];
  if (price && job.state === 'succeeded') {
    return { amount: fromMicros(toMicros(price.perOutputSecond) * BigInt(job.requestedSeconds)), unit: price.unit, source: 'computed' };
  }
  return UNKNOWN_COST;
}
