// Rows → API JSON. Money stays a decimal string; the provider's temporary URL is not exposed.
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

export async function presentTask(d: Detail, storage: ObjectStorage, ttlSeconds: number) {
  const video = d.assets.find((a) => a.kind === 'video');
  const thumb = d.assets.find((a) => a.kind === 'thumbnail');
  const deliverable = d.task.status === 'SUCCEEDED' && video;
  return {
    ...presentTaskSummary(d.task),
    status_version: d.task.status_version,
    project_id: d.task.project_id,
    request: d.task.request,
    failure: d.task.failure_code ? { code: d.task.failure_code, message: d.task.failure_message } : null,
    cancel_requested: d.task.cancel_requested_at !== null,
    /** Waiting for a provider slot: the place in the provider's queue (1 = next), how long, and why. */
    queue: d.queue
      ? {
          provider: d.queue.provider,
          position: d.queue.position,
          waiting: d.queue.waiting,
          since: d.queue.since.toISOString(),
          waited_seconds: Math.max(0, Math.round((Date.now() - d.queue.since.getTime()) / 1000)),
          reason: d.queue.grantedAt ? 'granted' : (d.queue.reason ?? 'provider_full'),
        }
      : null,
    output: deliverable
      ? {
          download_url: await storage.presignGet(video.object_key, ttlSeconds),
          thumbnail_url: thumb ? await storage.presignGet(thumb.object_key, ttlSeconds) : null,
          expires_in_seconds: ttlSeconds,
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
