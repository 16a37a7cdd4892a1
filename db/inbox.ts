// The callback inbox: callbacks and polls write the same normalised event here, deduped by
// (provider, dedupe_key); the workflow applies pending rows through one activity.
import { createHash, randomUUID } from 'node:crypto';
import { callbackInbox } from './schema';
import type { DbOrTx } from './client';
import type { ProviderProgress } from '../domain/progress';
import type { ProviderJob } from '../providers/types';

export interface ProviderEventInput {
  readonly provider: string;
  readonly job: ProviderJob;
  /** The provider's stable event id (e.g. Standard Webhooks `webhook-id`), when it has one. */
  readonly providerEventId: string | null;
  readonly source: 'callback' | 'poll' | 'reconcile';
  readonly attemptId: string | null;
  readonly taskId: string | null;
  readonly receivedRegion: string;
  readonly signatureValid: boolean;
  readonly raw: unknown;
  /** Set when the row needs no processing (e.g. an unknown correlation token). */
  readonly processError?: string;
}

/**
 * The dedupe key: the provider's event id when stable, else a hash of
 * provider + job + normalised status + provider time + payload.
 */
export function dedupeKeyFor(e: Pick<ProviderEventInput, 'provider' | 'job' | 'providerEventId' | 'raw'>): string {
  if (e.providerEventId) return `event:${e.providerEventId}`;
  const payloadHash = createHash('sha256').update(JSON.stringify(e.raw ?? null)).digest('hex').slice(0, 16);
  return `state:${e.job.jobId}:${e.job.state}:${e.job.updatedAt?.toISOString() ?? '-'}:${payloadHash}`;
}

/** Inserts the event unless it is a duplicate. Returns the new inbox id, or null for a duplicate. */
export async function recordProviderEvent(db: DbOrTx, e: ProviderEventInput): Promise<string | null> {
  const inboxId = randomUUID();
  const inserted = await db
    .insert(callbackInbox)
    .values({
      inbox_id: inboxId,
      provider: e.provider,
      provider_job_id: e.job.jobId,
      provider_event_id: e.providerEventId,
      dedupe_key: dedupeKeyFor(e),
      event_type: e.job.state,
      payload: { job: serializeJob(e.job), raw: e.raw },
      signature_valid: e.signatureValid,
      received_region: e.receivedRegion,
      attempt_id: e.attemptId,
      task_id: e.taskId,
      source: e.source,
      provider_updated_at: e.job.updatedAt,
      ...(e.processError ? { processed_at: new Date(), process_error: e.processError } : {}),
    })
    .onConflictDoNothing({ target: [callbackInbox.provider, callbackInbox.dedupe_key] })
    .returning({ id: callbackInbox.inbox_id });
  return inserted[0]?.id ?? null;
}

export interface StoredJob {
  jobId: string;
  state: ProviderJob['state'];
  rawStatus: string;
  updatedAt: string | null;
  outputUrl: string | null;
  error: string | null;
  correlationToken: string | null;
  metrics: Record<string, number> | null;
  progress?: ProviderProgress | null;
}

export function serializeJob(job: ProviderJob): StoredJob {
  return { ...job, updatedAt: job.updatedAt?.toISOString() ?? null };
}

export function deserializeJob(stored: StoredJob): ProviderJob {
  return { ...stored, updatedAt: stored.updatedAt ? new Date(stored.updatedAt) : null };
}
