// Rows → API JSON. Money stays a decimal string; the provider's temporary URL is not exposed.
import type { OutputStores } from '../storage/output-lifecycle';
import type { ObjectStorage } from '../storage/s3';
import type { getTaskDetail } from './tasks.service';
import type { generationTask } from '../db/schema';

type Detail = NonNullable<Awaited<ReturnType<typeof getTaskDetail>>>;
type TaskRow = typeof generationTask.$inferSelect;

export function presentTaskSummary(t: TaskRow) {
  return {
    task_id: t.task_id,
    status: t.status,
    /** What the tenant ordered; provider and provider_model say where it runs (or will, once routed). */
    model: (t.request as { model?: string }).model ?? t.provider_model,
    provider: t.provider,
    provider_model: t.provider_model,
    reserved_amount: t.reserved_amount,
    settled_amount: t.settled_amount,
    created_at: t.created_at.toISOString(),
    updated_at: t.updated_at.toISOString(),
    terminal_at: t.terminal_at?.toISOString() ?? null,
    deadline_at: t.deadline_at?.toISOString() ?? null,
  };
}

/** Where an asset's object is now: download URLs always point there (docs/decisions/0029). */
const storeOf = (stores: OutputStores, location: string): ObjectStorage => {
  if (location === 'fallback' && stores.fallbackStorage) return stores.fallbackStorage;
  return stores.storage;
};

export async function presentTask(d: Detail, stores: OutputStores, ttlSeconds: number) {
  const video = d.assets.find((a) => a.kind === 'video');
  const thumb = d.assets.find((a) => a.kind === 'thumbnail');
  const deliverable = d.task.status === 'SUCCEEDED' && video;
  const live = deliverable && !video.deleted_at;
  return {
    ...presentTaskSummary(d.task),
    status_version: d.task.status_version,
    project_id: d.task.project_id,
    request: d.task.request,
    failure: d.task.failure_code ? { code: d.task.failure_code, message: d.task.failure_message } : null,
    cancel_requested: d.task.cancel_requested_at !== null,
    output: deliverable
      ? {
          // A deleted output keeps its facts (checksum, size, media) and says when it went.
          download_url: live ? await storeOf(stores, video.location).presignGet(video.object_key, ttlSeconds) : null,
          thumbnail_url: live && thumb ? await storeOf(stores, thumb.location).presignGet(thumb.object_key, ttlSeconds) : null,
          expires_in_seconds: live ? ttlSeconds : null,
          deleted_at: video.deleted_at?.toISOString() ?? null,
          sha256: video.sha256,
          size_bytes: video.size_bytes,
          content_type: video.content_type,
          media: video.media_info,
        }
      : null,
    attempts: d.attempts.map((a) => ({
      attempt_id: a.attempt_id,
      attempt_no: a.attempt_no,
      provider: a.provider,
      submit_state: a.submit_state,
      provider_job_id: a.provider_job_id,
      provider_status: a.provider_status,
      submit_started_at: a.submit_started_at?.toISOString() ?? null,
      submit_finished_at: a.submit_finished_at?.toISOString() ?? null,
      unknown_since: a.unknown_since?.toISOString() ?? null,
      last_error: a.last_error,
    })),
    transitions: d.transitions.map((t) => ({
      from: t.from_status,
      to: t.to_status,
      version: t.to_version,
      source_event: t.source_event,
      actor: t.actor,
      at: t.created_at.toISOString(),
    })),
    ledger: d.ledger.map((e) => ({
      business_key: e.business_key,
      type: e.entry_type,
      amount: e.amount,
      at: e.created_at.toISOString(),
    })),
  };
}
