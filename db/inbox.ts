// The callback inbox: callbacks and polls write the same normalised event here, deduped by
// (provider, dedupe_key); the workflow applies pending rows through one activity.
import { createHash, randomUUID } from 'node:crypto';
import type pg from 'pg';
import { sql } from 'drizzle-orm';
import { callbackInbox } from './schema';
import { storableJson, storableJsonText } from './storable';
import type { DbOrTx } from './client';
import type { ProviderProgress } from '../domain/progress';
import type { ModerationRefusal, ProviderJob } from '../domain/provider-job';

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
  const payloadHash = createHash('sha256')
    .update(JSON.stringify(e.raw ?? null))
    .digest('hex')
    .slice(0, 16);
  return `state:${e.job.jobId}:${e.job.state}:${e.job.updatedAt?.toISOString() ?? '-'}:${payloadHash}`;
}

/**
 * Holds the attempt row FOR SHARE until the caller's transaction ends: an inbox row stored under it
 * is serialised with every reader of the attempt's job evidence (db/job-evidence.ts).
 */
export async function lockAttemptForIngest(tx: DbOrTx, attemptId: string): Promise<void> {
  await tx.execute(sql`SELECT 1 FROM task_attempt WHERE attempt_id = ${attemptId} FOR SHARE`);
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
      payload: storableJson({ job: serializeJob(e.job), raw: e.raw }),
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

/** A signed callback for one attempt, checked against the attempt and stored in one statement. */
export interface AttemptCallbackInput {
  readonly provider: string;
  /** The attempt the callback URL's token stands for. */
  readonly attemptId: string;
  readonly job: ProviderJob;
  readonly providerEventId: string | null;
  /** The job echoes no correlation token, or ours (checked by the caller, which knows the token). */
  readonly echoesAttempt: boolean;
  readonly receivedRegion: string;
  readonly raw: unknown;
}

export type AttemptCallbackOutcome = { readonly outcome: 'unknown_token' | 'mismatch' } | { readonly outcome: 'stored' | 'duplicate'; readonly taskId: string };

// The attempt lookup, its checks (provider, bound job id, correlation token) and the deduped
// inbox insert as one statement and one round trip, prepared once per connection (a named
// statement). The insert happens only when every check holds; the outer SELECT reports which one
// failed, in the order ingestCallback() decides them. The attempt row is held FOR SHARE until the
// insert commits: whatever reads the attempt's evidence locks it FOR UPDATE first
// (db/job-evidence.ts), so the two are serialised by the row lock, never by timing.
const INGEST_FOR_ATTEMPT = {
  name: 'callback-inbox-ingest-for-attempt-v2',
  text: `WITH attempt AS (
      SELECT attempt_id, task_id, provider, provider_job_id FROM task_attempt WHERE attempt_id = $1::uuid FOR SHARE
    ), inserted AS (
      INSERT INTO callback_inbox (inbox_id, provider, provider_job_id, provider_event_id, dedupe_key, event_type, payload,
          signature_valid, received_region, attempt_id, task_id, source, provider_updated_at)
      SELECT $2::uuid, $3::text, $4::text, $5::text, $6::text, $7::text, $8::jsonb, true, $9::text, a.attempt_id, a.task_id, 'callback', $10::timestamptz
      FROM attempt a
      WHERE a.provider = $3::text AND (coalesce(a.provider_job_id, '') = '' OR a.provider_job_id = $4::text) AND $11::boolean
      ON CONFLICT (provider, dedupe_key) DO NOTHING
      RETURNING inbox_id
    )
    SELECT a.task_id, a.provider = $3::text AS same_provider,
      (coalesce(a.provider_job_id, '') = '' OR a.provider_job_id = $4::text) AS same_job,
      (SELECT inbox_id FROM inserted) AS inbox_id
    FROM attempt a`,
} as const;

/**
 * Stores a verified callback for the attempt its URL names, unless the attempt is unknown or of
 * another provider ('unknown_token'), or the job is not the attempt's ('mismatch': another job
 * id than the one bound, or a correlation token not ours). One round trip.
 */
export async function recordAttemptCallback(pool: Pick<pg.Pool, 'query'>, e: AttemptCallbackInput): Promise<AttemptCallbackOutcome> {
  const { rows } = await pool.query<{ task_id: string; same_provider: boolean; same_job: boolean; inbox_id: string | null }>({
    ...INGEST_FOR_ATTEMPT,
    values: [
      e.attemptId,
      randomUUID(),
      e.provider,
      e.job.jobId,
      e.providerEventId,
      dedupeKeyFor({ provider: e.provider, job: e.job, providerEventId: e.providerEventId, raw: e.raw }),
      e.job.state,
      storableJsonText({ job: serializeJob(e.job), raw: e.raw }),
      e.receivedRegion,
      e.job.updatedAt,
      e.echoesAttempt,
    ],
  });
  const row = rows[0];
  if (!row || !row.same_provider) return { outcome: 'unknown_token' };
  if (!row.same_job || !e.echoesAttempt) return { outcome: 'mismatch' };
  return { outcome: row.inbox_id ? 'stored' : 'duplicate', taskId: row.task_id };
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
  moderation?: ModerationRefusal | null;
}

export function serializeJob(job: ProviderJob): StoredJob {
  return { ...job, updatedAt: job.updatedAt?.toISOString() ?? null };
}

export function deserializeJob(stored: StoredJob): ProviderJob {
  return { ...stored, updatedAt: stored.updatedAt ? new Date(stored.updatedAt) : null };
}
