// The contract between the orchestrator and a provider adapter. Workflows and activities
// read capabilities and typed outcomes; they never branch on a provider's name.
import type { ProviderJobState } from '../domain/states';

/** How an unknown submit outcome can be resolved (DESIGN.md §5 "Unknown outcome"). */
export type UnknownOutcomeTier =
  /** The provider dedupes by our key; look the job up by it. */
  | 'lookup-by-key'
  /** Our correlation token rides on the job (webhook URL / metadata); list recent jobs to find it. */
  | 'list-by-token'
  /** No handle at all: list by time window, else park for review. */
  | 'none';

export interface ProviderCapabilities {
  readonly name: string;
  readonly unknownOutcomeTier: UnknownOutcomeTier;
  readonly callbackSignature: 'standard-webhooks' | 'ed25519-jwks' | 'none';
  /** Terminal provider states that the provider bills us for. */
  readonly chargeableStates: readonly ProviderJobState[];
  /** How long the provider keeps an output URL valid, in ms. */
  readonly outputUrlTtlMs: number;
  readonly canRefreshOutputUrl: boolean;
  /** How far back a list of recent jobs reaches, in ms (for reconciling unknown outcomes). */
  readonly listingWindowMs: number;
}

export interface SubmitRequest {
  /** Our attempt id: correlation token and idempotency key. Never a random or run-derived value. */
  readonly attemptId: string;
  readonly model: string;
  readonly input: Record<string, unknown>;
  /** Where the provider should POST status callbacks (already carries the token). */
  readonly webhookUrl: string;
  readonly signal?: AbortSignal;
}

/** A normalised view of a provider job. */
export interface ProviderJob {
  readonly jobId: string;
  readonly state: ProviderJobState;
  /** The provider's own status word, kept for operators. */
  readonly rawStatus: string;
  /** When the provider last changed the job (orders out-of-order events). */
  readonly updatedAt: Date | null;
  readonly outputUrl: string | null;
  readonly error: string | null;
  /** Correlation token we attached at submit, when the provider echoes it back. */
  readonly correlationToken: string | null;
  readonly metrics: Record<string, number> | null;
}

/** Seed 001 §2: every call that may create a job ends in exactly one of three outcomes. */
export type SubmitOutcome =
  | { readonly kind: 'accepted'; readonly job: ProviderJob }
  /** Proved not accepted: a 4xx/429 answer, or the request never left (refused, DNS, TLS). */
  | {
      readonly kind: 'rejected';
      readonly retryable: boolean;
      readonly status: number | null;
      readonly retryAfterMs: number | null;
      readonly reason: string;
    }
  /** The request may have reached the provider: timeout, reset after sending, 5xx after sending. */
  | { readonly kind: 'unknown'; readonly reason: string };

/** A callback after signature verification, normalised for the inbox. */
export interface VerifiedCallback {
  readonly providerEventId: string | null;
  readonly job: ProviderJob;
  readonly payload: unknown;
}

export class CallbackVerificationError extends Error {
  constructor(
    message: string,
    readonly reason: 'missing-headers' | 'bad-signature' | 'stale-timestamp' | 'bad-payload',
  ) {
    super(message);
    this.name = 'CallbackVerificationError';
  }
}

export interface ProviderAdapter {
  readonly capabilities: ProviderCapabilities;
  submit(req: SubmitRequest): Promise<SubmitOutcome>;
  /** Idempotent read; throws on transport errors (the caller retries). */
  getJob(jobId: string, signal?: AbortSignal): Promise<ProviderJob>;
  /** Best effort; resolves when the provider acknowledged the request. */
  cancel(jobId: string, signal?: AbortSignal): Promise<void>;
  /** Recent jobs carrying our correlation token (tier list-by-token), newest first. */
  findByCorrelationToken(token: string, since: Date, signal?: AbortSignal): Promise<ProviderJob | null>;
  /** Verify a callback on its raw bytes and headers; throws CallbackVerificationError. */
  verifyCallback(rawBody: Buffer, headers: Record<string, string | string[] | undefined>): VerifiedCallback;
}
