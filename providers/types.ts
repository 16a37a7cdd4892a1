// The contract between the orchestrator and a provider adapter. Workflows and activities
// read capabilities and typed outcomes; they never branch on a provider's name.
import type { ModerationRefusal, ProviderJob } from '../domain/provider-job';
import type { ProviderJobState } from '../domain/states';

export type { ProviderJobState };
// A job as the adapters read it is plain data (domain/provider-job.ts): db/inbox.ts stores it.
export type { ModerationRefusal, ProviderJob };

/** How an unknown submit outcome can be resolved (docs/design.md §5 "Unknown outcome"). */
export type UnknownOutcomeTier =
  /** The provider keeps our key and answers a get by it; look the job up by it. */
  | 'lookup-by-key'
  /**
   * The provider keeps no key of ours, but its listing returns what we sent (the exact input,
   * the model): a unique match inside the attempt's submit window binds the job.
   */
  | 'list-by-fingerprint'
  /** No handle at all: wait for a callback, else park for review. */
  | 'none';

/**
 * Whether a miss of the lookup can prove that the provider never created the job
 * (docs/providers.md "Proof of absence"):
 * - 'exact-lookup': the lookup asks for our own key and the provider documents a not-found
 *   answer to it that holds for a job created a moment ago (read-after-write), so a miss past
 *   UNKNOWN_PROOF_DELAY_MS is proof. No adapter qualifies today;
 * - 'none': the lookup cannot be complete and exact by the provider's published contract (a
 *   paginated listing, no key, or a get by key with no documented not-found answer and no
 *   read-after-write for new jobs), so a miss proves nothing; the attempt waits for a callback,
 *   a find or (`resendable`) the answer to a re-sent create, then parks in MANUAL_REVIEW at
 *   UNKNOWN_OUTCOME_DEADLINE_MS. It never makes a second attempt.
 */
export type AbsenceProof = 'exact-lookup' | 'none';

export interface ProviderCapabilities {
  readonly name: string;
  readonly unknownOutcomeTier: UnknownOutcomeTier;
  readonly absenceProof: AbsenceProof;
  /**
   * The documented request parameters and response fields findByCorrelationToken relies on
   * (e.g. `GET /v1/predictions` `input`, `model`, `created_at`); empty when it has no lookup.
   * docs/providers.md records where each is documented.
   */
  readonly lookupFields: readonly string[];
  readonly callbackSignature: 'standard-webhooks' | 'ed25519-jwks' | 'none';
  /** Terminal provider states that the provider bills us for. */
  readonly chargeableStates: readonly ProviderJobState[];
  /** How long the provider keeps an output URL valid, in ms. */
  readonly outputUrlTtlMs: number;
  readonly canRefreshOutputUrl: boolean;
  /**
   * How long a completed job's result can still be read, in ms; absent: as long as the job.
   * Polls of such a provider come at most RETENTION_POLL_SHARE of it apart
   * (providers/result-retention.ts), so the first read after completion falls well inside it.
   */
  readonly resultRetentionMs?: number;
  /** How far back a list of recent jobs reaches, in ms (for reconciling unknown outcomes); 0 = no listing. */
  readonly listingWindowMs: number;
  // ---- Limits and quirks (optional so older adapters and fakes stay valid; every real adapter sets them) ----
  /**
   * The account's query quota for status reads and lookups, requests per second: the provider's
   * poll queue holds it over any 10 s (domain/poll-quota.ts). Submits, cancels and callback
   * re-fetches are not on that queue; where the provider publishes no figure this is an assumption
   * (docs/providers.md, the capability table).
   */
  readonly requestsPerSecond?: number;
  /**
   * The account's create quota, creates per second, where the provider documents one: every
   * worker's submits share one pace below it (domain/create-pace.ts). Absent: not paced unless
   * configured (PROVIDER_CREATE_QUOTAS).
   */
  readonly createsPerSecond?: number;
  /** Jobs the account may have in flight at once; the bulkhead's ceiling. */
  readonly maxConcurrency?: number;
  /** True when the provider never calls back: progress comes from polling only. */
  readonly pollOnly?: boolean;
  /**
   * True when the provider accepts work over its concurrency limit and queues it (fal IN_QUEUE,
   * Runway THROTTLED) instead of answering 429: an accepted job may wait a long time before it runs.
   */
  readonly queuesExcessWork?: boolean;
  /**
   * True when the provider keeps our idempotency key and refuses a second create that carries it
   * (Kling's `external_task_id`, "unique per account"): an unknown outcome is then settled by
   * sending the very same create again, same attempt, same key (activities/resend-unknown.ts).
   * Accepted: the job is ours, whichever of the two creates made it. Refused as a duplicate
   * (`SubmitOutcome` unknown with `keyTaken`): a job with our key exists, and the lookup by key
   * waits for it to become readable. Anything else proves nothing.
   */
  readonly resendable?: boolean;
  /**
   * 'daily': the provider caps the account's creates per model per day and answers a create over it
   * with 429 (Runway's usage tiers); such a refusal waits for the reset as a fact of the model
   * (db/create-cap.ts), and every claim of a capped model waits with it (docs/decisions/0070).
   */
  readonly createCap?: 'daily';
  /** False when the provider has no cancel API (Kling): cancel() is then a no-op and the job runs to its end. */
  readonly canCancel?: boolean;
  /**
   * The longest a job can be queued or running at the provider. A job still reported in flight
   * (or unreadable) this long after our submit is not coming back: the task goes to MANUAL_REVIEW
   * with the evidence (activities/provider-reads.ts). Absent: no bound.
   */
  readonly maxRunMs?: number;
}

/**
 * Extra handle data some providers need to address a job besides its id (fal routes status and
 * result by the model's app id). Callers pass what they stored at submit; adapters that do not
 * need it ignore it.
 */
export interface JobRef {
  /** The model id the attempt was submitted with (SubmitRequest.model). */
  readonly model?: string;
}

export interface SubmitRequest {
  /** Our attempt id: correlation token and idempotency key. Never a random or run-derived value. */
  readonly attemptId: string;
  readonly model: string;
  readonly input: Record<string, unknown>;
  /** Where the provider should POST status callbacks (already carries the token). */
  readonly webhookUrl: string;
  /**
   * The task's deadline (generation_task.deadline_at), where the provider can bound a job that is
   * not started by then (Replicate's `Cancel-After`): an orphan of a lost answer costs as little
   * as the provider allows. Null or absent: no bound is sent.
   */
  readonly deadlineAt?: Date | null;
  readonly signal?: AbortSignal;
}

/** Every call that may create a job ends in exactly one of three outcomes (docs/design.md §5 "Submit"). */
export type SubmitOutcome =
  | { readonly kind: 'accepted'; readonly job: ProviderJob }
  /** Proved not accepted: a 4xx/429 answer, or the request never left (refused, DNS, TLS). */
  | {
      readonly kind: 'rejected';
      readonly retryable: boolean;
      readonly status: number | null;
      readonly retryAfterMs: number | null;
      readonly reason: string;
      /**
       * The account's allowance of creates for a period is spent (Runway: a 429 on create is the
       * tier's daily generation cap, `capabilities.createCap`): not a rejection of the request and
       * not one of the task's attempts; the attempt waits unsent for the reset (docs/decisions/0070).
       */
      readonly capped?: 'daily';
    }
  /**
   * The request may have reached the provider: timeout, reset after sending, 5xx after sending.
   * `keyTaken`: the provider refused the create because a job with our key already exists
   * (capabilities.resendable): evidence of a job, never of its absence.
   */
  | { readonly kind: 'unknown'; readonly reason: string; readonly keyTaken?: boolean };

/** A callback after signature verification, normalised for the inbox. */
export interface VerifiedCallback {
  readonly providerEventId: string | null;
  readonly job: ProviderJob;
  readonly payload: unknown;
  /**
   * True when the callback is unauthenticated (capabilities.callbackSignature 'none'): only
   * `job.jobId` (and the token in the URL) may be used, to trigger an authenticated re-fetch
   * with getJob. `job.state` is then 'queued' as a placeholder and must not be applied.
   */
  readonly needsRefetch?: boolean;
}

export class CallbackVerificationError extends Error {
  constructor(
    message: string,
    /** 'keys-unavailable': the verification keys could not be fetched; answer 503 so the provider retries. */
    readonly reason: 'missing-headers' | 'bad-signature' | 'stale-timestamp' | 'bad-payload' | 'keys-unavailable',
  ) {
    super(message);
    this.name = 'CallbackVerificationError';
  }
}

/** What an unknown-outcome lookup searches for: our key and what we sent, in the submit window. */
export interface LookupQuery {
  /** Our attempt id: the correlation token and, where the provider keeps one, the key. */
  readonly token: string;
  /** SubmitRequest.model as the attempt sent it. */
  readonly model: string;
  /** SubmitRequest.input exactly as the attempt sent it. */
  readonly input: Record<string, unknown>;
  /** The submit window (our clock, already widened for clock skew): a job created outside it is not ours. */
  readonly since: Date;
  readonly until: Date;
  readonly signal?: AbortSignal;
}

/** The answer of a lookup, never a bare null: absence is proved only by 'not-found-proven'. */
export type LookupResult =
  /** One job is ours: by our key ('key') or by a unique fingerprint match ('fingerprint'). */
  | { readonly kind: 'found'; readonly job: ProviderJob; readonly by: 'key' | 'fingerprint' }
  /** Several jobs fit and none is provably ours: park for an operator, never resubmit. */
  | { readonly kind: 'ambiguous'; readonly jobs: readonly ProviderJob[]; readonly evidence: string }
  /** The provider's documented answer says no job exists for our key (capability 'exact-lookup' only). */
  | { readonly kind: 'not-found-proven'; readonly evidence: string }
  /** Nothing found, and by the provider's contract that proves nothing. */
  | { readonly kind: 'not-found-unproven'; readonly reason: string };

/** The lookup of a provider that has none (absenceProof 'none', tier 'none'). */
export const NO_LOOKUP: LookupResult = { kind: 'not-found-unproven', reason: 'the provider offers no lookup for an unknown submit' };

export interface ProviderAdapter {
  readonly capabilities: ProviderCapabilities;
  submit(req: SubmitRequest): Promise<SubmitOutcome>;
  /** Idempotent read; throws on transport errors (the caller retries). Pass `ref` when you have it (fal needs the model). */
  getJob(jobId: string, signal?: AbortSignal, ref?: JobRef): Promise<ProviderJob>;
  /** Best effort; resolves when the provider acknowledged the request. */
  cancel(jobId: string, signal?: AbortSignal, ref?: JobRef): Promise<void>;
  /**
   * The job an unknown submit may have created: by asking the provider for our own key (tier
   * lookup-by-key) or by the fingerprint of what we sent (tier list-by-fingerprint). Throws on
   * transport errors (a failed lookup proves nothing). Only 'not-found-proven' proves absence,
   * and only an adapter whose capabilities say absenceProof 'exact-lookup' may answer it.
   */
  findByCorrelationToken(query: LookupQuery): Promise<LookupResult>;
  /** Verify a callback on its raw bytes and headers; throws CallbackVerificationError. */
  verifyCallback(rawBody: Buffer, headers: Record<string, string | string[] | undefined>): VerifiedCallback;
  /**
   * Present when verification may need I/O (fal fetches its JWKS, refetching on rotation).
   * Callers should prefer it; `verifyProviderCallback` does.
   */
  verifyCallbackAsync?(rawBody: Buffer, headers: Record<string, string | string[] | undefined>): Promise<VerifiedCallback>;
}

/** Verifies a callback with the adapter's async path when it has one, else the sync one. */
export async function verifyProviderCallback(
  adapter: ProviderAdapter,
  rawBody: Buffer,
  headers: Record<string, string | string[] | undefined>,
): Promise<VerifiedCallback> {
  return adapter.verifyCallbackAsync ? adapter.verifyCallbackAsync(rawBody, headers) : adapter.verifyCallback(rawBody, headers);
}
