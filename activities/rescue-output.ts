// PROVIDER_SUCCEEDED → FETCHING_OUTPUT → PROCESSING_MEDIA: stream the provider's expiring
// output into our bucket while hashing it, publish it under a deterministic key, record the
// asset. A retry finds the published object (same key, sha256 in its metadata) and skips the
// download.
import { createHash } from 'node:crypto';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { SpanKind, type Span } from '@opentelemetry/api';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { eq } from 'drizzle-orm';
import { holdFence, type FenceToken } from '../db/fence';
import { asset, taskAttempt } from '../db/schema';
import { applyTaskEvent, casTaskStatus, lockTask, newId } from '../db/tasks';
import { FailureType } from '../domain/errors';
import type { TaskFacts } from '../domain/facts';
import type { TaskStatus } from '../domain/states';
import { decide } from '../domain/task-machine';
import { inSpan } from '../observability/trace-context';
import { outputObjectKey } from '../storage/s3';
import { fenced, notFound, withHeartbeat, type TaskActivityDeps } from './deps';
import { createSafeDispatcher, unsafeAddressIn } from '../net/safe-fetch';
import { validateOutputUrl, UnsafeUrlError } from './output-url';
import { failedUncharged, finishTask } from './settlement';
import { readTaskFacts } from './task-facts';

const FETCHING: readonly TaskStatus[] = ['FETCHING_OUTPUT', 'OUTPUT_AT_RISK'];

class OutputGoneError extends Error {}

/** The step after a stored output (activities/process-media.ts), run in the same activity. */
export interface NextMediaStep {
  processMedia(taskId: string): Promise<TaskFacts>;
}

export function createRescueActivities(deps: TaskActivityDeps, media: NextMediaStep) {
  // Connects only to public addresses, checked at connect time (net/safe-fetch.ts).
  const dispatcher = createSafeDispatcher({ allowPrivate: deps.settings.outputAllowPrivate });
  /**
   * Streams url → storage under key; returns sha256 and size. One client span for the whole
   * transfer (the S3 upload and publish are its children): the host and the status, never the
   * URL, whose query is the provider's signature (docs/observability.md).
   */
  function download(url: URL, key: string): Promise<{ sha256: string; size: number; contentType: string }> {
    return inSpan('GET output', { 'http.request.method': 'GET', 'url.template': '(provider output URL)', 'server.address': url.host }, (span) => transfer(url, key, span), SpanKind.CLIENT);
  }
  async function transfer(url: URL, key: string, span: Span): Promise<{ sha256: string; size: number; contentType: string }> {
    const ctx = Context.current();
    const res = await fetch(url, { signal: ctx.cancellationSignal, redirect: 'error', dispatcher }).catch((err: unknown) => {
      const unsafe = unsafeAddressIn(err);
      throw unsafe ? new UnsafeUrlError(`output host ${url.hostname}: ${unsafe.message}`) : err;
    });
    span.setAttribute('http.response.status_code', res.status);
    if (res.status === 403 || res.status === 404 || res.status === 410) {
      throw new OutputGoneError(`provider output answered ${res.status}`);
    }
    if (!res.ok || !res.body) throw new Error(`provider output answered ${res.status}`);
    const declared = Number(res.headers.get('content-length') ?? '0');
    if (declared > deps.settings.outputMaxBytes) throw new OutputGoneError(`output is ${declared} bytes, over the limit`);
    const contentType = (res.headers.get('content-type') ?? 'video/mp4').split(';')[0]!.trim();
    if (!contentType.startsWith('video/') && contentType !== 'application/octet-stream') {
      throw new OutputGoneError(`output content type ${contentType} is not a video`);
    }
    const hash = createHash('sha256');
    let size = 0;
    const meter = new Transform({
      transform(chunk: Buffer, _enc, done) {
        size += chunk.length;
        if (size > deps.settings.outputMaxBytes) return done(new OutputGoneError('output exceeds the size limit'));
        hash.update(chunk);
        done(null, chunk);
      },
    });
    const partial = `${key}.partial`;
    // pipeline, never .pipe(): a reset or an aborted body (activity cancelled) rejects here, a
    // retryable activity failure, instead of an unhandled 'error' event that ends the process.
    // A failed upload destroys the meter, which ends the download too.
    const copied = pipeline(Readable.fromWeb(res.body as WebReadableStream<Uint8Array>), meter);
    const stored = deps.storage
      .upload(partial, meter, { contentType: 'video/mp4', onProgress: (bytes) => ctx.heartbeat({ phase: 'uploading', bytes }) })
      .catch((err: unknown) => {
        meter.destroy();
        throw err;
      });
    const [copy, upload] = await Promise.allSettled([copied, stored]);
    // The download's own error (a reset, the size limit) says more than what it caused in the
    // upload; after a failed upload the download only reports the premature close.
    const closedByUpload = copy.status === 'rejected' && (copy.reason as { code?: string }).code === 'ERR_STREAM_PREMATURE_CLOSE';
    if (copy.status === 'rejected' && !(closedByUpload && upload.status === 'rejected')) throw copy.reason;
    if (upload.status === 'rejected') throw upload.reason;
    if (declared > 0 && size !== declared) throw new Error(`output truncated: ${size} of ${declared} bytes`);
    const sha256 = hash.digest('hex');
    await deps.storage.publish(partial, key, { contentType: 'video/mp4', sha256 });
    await deps.storage.delete(partial).catch(() => undefined);
    return { sha256, size, contentType: 'video/mp4' };
  }

  /** FETCHING_OUTPUT → OUTPUT_AT_RISK when the provider URL expires within the margin; true if moved now. */
  async function markAtRisk(token: FenceToken, taskId: string, deadline: Date | null, reason: string): Promise<boolean> {
    if (!deadline || deps.clock.now().getTime() < deadline.getTime() - deps.settings.outputAtRiskMarginMs) return false;
    return deps.db.transaction(async (tx) => {
      await holdFence(tx, token);
      const task = await lockTask(tx, taskId);
      if (!task) return false;
      const moved = await applyTaskEvent(tx, token, task, { type: 'OUTPUT_DEADLINE_NEAR' }, {
        sourceEvent: 'workflow.output-at-risk',
        actor: 'workflow',
        attemptId: task.active_attempt_id,
        detail: { output_deadline_at: deadline.toISOString(), reason: reason.slice(0, 500) },
      });
      return moved !== null;
    });
  }

  return {
    async rescueOutput(taskId: string): Promise<TaskFacts> {
      await withHeartbeat(() => fenced(deps, async (token) => {
        // Step 1: PROVIDER_SUCCEEDED → FETCHING_OUTPUT.
        const target = await deps.db.transaction(async (tx) => {
          await holdFence(tx, token);
          const task = await lockTask(tx, taskId);
          if (!task) throw notFound(`task ${taskId}`);
          const d = decide(task.status as TaskStatus, { type: 'OUTPUT_FETCH_STARTED' });
          if (d.kind === 'move') {
            await casTaskStatus(tx, token, {
              taskId,
              from: task.status as TaskStatus,
              expectedVersion: task.status_version,
              to: d.to,
              sourceEvent: 'workflow.rescue-output',
              actor: 'workflow',
              attemptId: task.active_attempt_id,
            });
          } else if (!FETCHING.includes(task.status as TaskStatus)) {
            return null;
          }
          const [attempt] = await tx.select().from(taskAttempt).where(eq(taskAttempt.attempt_id, task.active_attempt_id!));
          if (!attempt) throw notFound(`attempt of task ${taskId}`);
          return { task, attempt };
        });
        if (!target) return;
        const { task, attempt } = target;
        const key = outputObjectKey(task.tenant_id, task.task_id, attempt.attempt_id, 'mp4');

        // Step 2: the bytes. Skip when the published object is already there.
        let object: { sha256: string; size: number; contentType: string } | null = null;
        let lostReason: string | null = null;
        try {
          const stored = await deps.storage.head(key);
          if (stored?.sha256) object = { sha256: stored.sha256, size: stored.size, contentType: stored.contentType ?? 'video/mp4' };
          if (!object) {
            if (!attempt.output_url) throw new OutputGoneError('provider reported success without an output URL');
            const url = validateOutputUrl(attempt.output_url, {
              allowedHosts: deps.settings.outputHosts[attempt.provider] ?? [],
              allowPrivate: deps.settings.outputAllowPrivate,
            });
            object = await download(url, key);
          }
        } catch (err) {
          if (err instanceof UnsafeUrlError) {
            throw ApplicationFailure.create({ type: FailureType.UnsafeOutputUrl, message: err.message, nonRetryable: true });
          }
          if (!(err instanceof OutputGoneError)) {
            // Storage or network trouble: retried. Near the URL's expiry, say so first (the
            // workflow raises NeedsAttention and comes straight back here).
            if (await markAtRisk(token, taskId, attempt.output_deadline_at, (err as Error).message)) return;
            throw err;
          }
          lostReason = err.message;
        }

        // Step 3: record the asset and move on, or record the loss.
        await deps.db.transaction(async (tx) => {
          await holdFence(tx, token);
          const current = await lockTask(tx, taskId);
          if (!current || !FETCHING.includes(current.status as TaskStatus)) return;
          if (!object) {
            await finishTask(tx, token, current, failedUncharged('workflow.output-lost', 'OUTPUT_LOST', lostReason ?? 'output lost'));
            return;
          }
          await tx
            .insert(asset)
            .values({
              asset_id: newId(),
              tenant_id: current.tenant_id,
              task_id: current.task_id,
              attempt_id: attempt.attempt_id,
              kind: 'video',
              bucket: deps.storage.bucket,
              region: deps.storage.region,
              object_key: key,
              sha256: object.sha256,
              size_bytes: object.size,
              content_type: object.contentType,
            })
            .onConflictDoNothing();
          await casTaskStatus(tx, token, {
            taskId,
            from: current.status as TaskStatus,
            expectedVersion: current.status_version,
            to: 'PROCESSING_MEDIA',
            sourceEvent: 'workflow.output-stored',
            actor: 'workflow',
            attemptId: attempt.attempt_id,
            detail: { object_key: key, sha256: object.sha256, size_bytes: object.size },
          });
        });
      }));
      const after = await readTaskFacts(deps.db, taskId, deps.clock.now());
      // The media step follows in the same activity (docs/decisions/0009): one dispatch and one
      // workflow task fewer between the callback and SUCCEEDED. It decides on the facts as its own
      // step would; if it fails, this activity's retry finds PROCESSING_MEDIA, skips the bytes
      // and runs it again (the workflow's processMedia step remains for runs that stop there).
      if (after.status === 'PROCESSING_MEDIA') return media.processMedia(taskId);
      return after;
    },
  };
}
