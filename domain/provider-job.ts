// A provider's job as an adapter reads it (providers/types.ts): plain data, recorded in the
// callback inbox (db/inbox.ts) and applied by the activities.
import type { ProviderProgress } from './progress';
import type { ProviderJobState } from './states';

/**
 * A provider's documented content-moderation refusal (docs/decisions/0070): which side it refused
 * where the provider says (its input, or the output it made), and the provider's own code.
 */
export interface ModerationRefusal {
  readonly side: 'input' | 'output' | null;
  /** e.g. Runway's `SAFETY.INPUT.TEXT`, fal's `content_policy_violation`, Kling's `1301`. */
  readonly code: string;
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
  /** Correlation token we attached at submit, when known (our own submit, or a key the provider echoes back). */
  readonly correlationToken: string | null;
  readonly metrics: Record<string, number> | null;
  /**
   * What the provider says about the job's progress, where its API gives it (domain/progress.ts);
   * absent or null when it says nothing. Stored on the attempt and streamed (docs/events.md).
   */
  readonly progress?: ProviderProgress | null;
  /** Set on a failed job the provider's content moderation refused: a final outcome of its own. */
  readonly moderation?: ModerationRefusal | null;
}
