// Rows → API JSON, typed by the answers' schemas (api/tasks.schemas.ts, the route contracts).
// Money stays a decimal string; the provider's temporary URL is not exposed.
import type { LedgerEntryType } from '../domain/states';
import type { OutputStores } from '../storage/output-lifecycle';
import type { ObjectStorage } from '../storage/s3';
import type { getTaskDetail } from './tasks.service';
import type { AttemptRow, TaskRow } from '../db/schema';
import type { TaskProgress } from '../db/task-events';
import { redactText } from '../observability/redact';
import type { ProgressView } from './events.schemas';
import type { TaskDetail, TaskSummary } from './tasks.schemas';

type Detail = NonNullable<Awaited<ReturnType<typeof getTaskDetail>>>;

/**
 * The provider's latest progress of an attempt (docs/events.md "Progress"). A model's logs are
 * its own text: URL queries and credential-like strings in them are redacted before they leave.
 */
export function presentProgress(p: TaskProgress): ProgressView {
  return {
    attempt_id: p.attemptId,
    provider: p.provider,
    provider_status: p.providerStatus,
    fraction: p.progress?.fraction ?? null,
    queue_position: p.progress?.queue_position ?? null,
    logs: p.progress?.logs ? redactText(p.progress.logs) : null,
    at: p.at?.toISOString() ?? null,
  };
}

/**
 * Who made a transition, as a tenant sees it: an operator is `operator`, never the operator's
 * name (an OS user name: `ops` records `operator:<name>`, which stays in the database and in
 * ops output). The workflow, a schedule and the tenant itself are shown as recorded.
 */
export const presentActor = (actor: string): string => (actor === 'operator' || actor.startsWith('operator:') ? 'operator' : actor);

const attemptProgress = (a: AttemptRow): TaskProgress => ({
  attemptId: a.attempt_id,
  provider: a.provider,
  providerStatus: a.provider_status,
  progress: a.progress,
  at: a.progress_at,
});

export function presentTaskSummary(t: TaskRow): TaskSummary {
  return {
    task_id: t.task_id,
    status: t.status,
    /** What the tenant ordered; provider and provider_model say where it runs (or will, once routed). */
    model: t.request.model ?? t.provider_model,
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

const EXTENSIONS: Record<string, string> = { 'video/mp4': 'mp4', 'video/webm': 'webm', 'video/x-matroska': 'mkv', 'image/jpeg': 'jpg' };
/** How a stored object is served: its recorded type, and a file name with that type's extension. */
const servedAs = (contentType: string, name: string) => ({ contentType, filename: `${name}.${EXTENSIONS[contentType] ?? 'bin'}` });

export async function presentTask(d: Detail, stores: OutputStores, ttlSeconds: number): Promise<TaskDetail> {
  const video = d.assets.find((a) => a.kind === 'video');
  const thumb = d.assets.find((a) => a.kind === 'thumbnail');
  const deliverable = d.task.status === 'SUCCEEDED' && video;
  const live = deliverable && !video.deleted_at;
  const active = d.attempts.find((a) => a.attempt_id === d.task.active_attempt_id);
  return {
    ...presentTaskSummary(d.task),
    status_version: d.task.status_version,
    project_id: d.task.project_id,
    request: { ...d.task.request },
    failure: d.task.failure_code ? { code: d.task.failure_code, message: d.task.failure_message } : null,
    cancel_requested: d.task.cancel_requested_at !== null,
    /** The active attempt's latest provider progress; null when the provider has said none (or the job is finished). */
    progress: active?.progress ? presentProgress(attemptProgress(active)) : null,
    /** Waiting for a provider slot (the place in the provider's queue, 1 = next) or its daily allowance: how long, why, until when. */
    queue: d.queue
      ? {
          provider: d.queue.provider,
          position: d.queue.position,
          waiting: d.queue.waiting,
          since: d.queue.since.toISOString(),
          waited_seconds: Math.max(0, Math.round((Date.now() - d.queue.since.getTime()) / 1000)),
          // A grant dated ahead is a slot held until the task's moment in the provider's create pace.
          reason: d.queue.grantedAt ? (d.queue.grantedAt.getTime() > Date.now() ? 'paced' : 'granted') : (d.queue.reason ?? 'provider_full'),
          // When the submit may go: its moment in the pace, or the reset of the provider's daily allowance.
          until:
            'until' in d.queue
              ? d.queue.until.toISOString()
              : d.queue.grantedAt && d.queue.grantedAt.getTime() > Date.now()
                ? d.queue.grantedAt.toISOString()
                : null,
        }
      : null,
    output: deliverable
      ? {
          // A deleted output keeps its facts (checksum, size, media) and says when it went.
          // Served with the type the media check found (a WebM is stored under the same key name as an MP4).
          download_url: live
            ? await storeOf(stores, video.location).presignGet(video.object_key, ttlSeconds, servedAs(video.content_type, d.task.task_id))
            : null,
          thumbnail_url:
            live && thumb
              ? await storeOf(stores, thumb.location).presignGet(thumb.object_key, ttlSeconds, servedAs(thumb.content_type, `${d.task.task_id}-thumbnail`))
              : null,
          expires_in_seconds: live ? ttlSeconds : null,
          deleted_at: video.deleted_at?.toISOString() ?? null,
          sha256: video.sha256,
          size_bytes: video.size_bytes,
          content_type: video.content_type,
          media: video.media_info ?? null,
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
      // Why an outcome is unknown (or the attempt failed), as the provider call ended: a provider's
      // answer may echo a URL or a key, redacted like every error text that leaves (observability/redact.ts).
      last_error: a.last_error === null ? null : redactText(a.last_error),
      progress: a.progress ? presentProgress(attemptProgress(a)) : null,
    })),
    transitions: d.transitions.map((t) => ({
      from: t.from_status,
      to: t.to_status,
      version: t.to_version,
      source_event: t.source_event,
      actor: presentActor(t.actor),
      at: t.created_at.toISOString(),
    })),
    ledger: d.ledger.map((e) => ({
      business_key: e.business_key,
      type: e.entry_type as LedgerEntryType,
      amount: e.amount,
      at: e.created_at.toISOString(),
    })),
  };
}
