// PROVIDER_SUCCEEDED → FETCHING_OUTPUT → PROCESSING_MEDIA: stream the provider's expiring
// output into our bucket while hashing it, publish it under a deterministic key, record the
// asset. A retry finds the published object (same key, sha256 in its metadata, in either
// bucket) and skips the download; an interrupted download resumes where its stored parts end
// (activities/output-download.ts). When the primary bucket fails, the output goes to the
// fallback bucket and the task goes on from there (docs/decisions/0029).
import { SpanKind } from '@opentelemetry/api';
import { Context } from '@temporalio/activity';
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import { eq } from 'drizzle-orm';
import type { Tx } from '../db/client';
import { holdFence, type FenceToken } from '../db/fence';
import { inTaskTransaction } from '../db/task-tx';
import { asset, outputDownload, taskAttempt, type StorageLocation, type TaskRow } from '../db/schema';
import { applyTaskEvent, casTaskStatus, newId } from '../db/tasks';
import { plusUpToHalf } from '../domain/backoff';
import { FailureType, OUTPUT_HOST_REFUSED_EVENT } from '../domain/errors';
import type { TaskFacts } from '../domain/facts';
import type { TaskStatus } from '../domain/states';
import { decide } from '../domain/task-machine';
import { inSpan } from '../observability/trace-context';
import { outputObjectKey } from '../storage/s3';
import { notFound, toActivityFailure, withHeartbeat, type TaskActivityDeps } from './deps';
import { createSafeDispatcher } from '../net/safe-fetch';
import { createOutputDownloader, OutputGoneError, StorageWriteError, type DownloadTarget, type OutputCheckpoint } from './output-download';
import { OutputHostNotAllowedError, validateOutputUrl, UnsafeUrlError } from './output-url';
import { failedUncharged, finishTask } from '../db/settlement';
import { readTaskFacts } from './task-facts';
import { STORED_VIDEO_COLUMNS, type StoredVideo } from './process-media';

const FETCHING: readonly TaskStatus[] = ['FETCHING_OUTPUT', 'OUTPUT_AT_RISK'];

/** How soon a rescue waiting for its output host to be allowed looks again (plus up to half as jitter). */
const HOST_POLICY_RETRY_MS = 30_000;

/** The output as stored: where, and what the rescue learnt about it. */
interface RescuedObject {
  readonly location: StorageLocation;
  readonly bucket: string;
  readonly sha256: string;
  readonly size: number;
  readonly contentType: string;
  readonly downloadMs: number | null;
}

type AttemptRow = typeof taskAttempt.$inferSelect;

/** What step 1 found to fetch. */
interface FetchTarget {
  readonly task: TaskRow;
  readonly attempt: AttemptRow;
  /** The attempt's download checkpoint, read in the same transaction (null: none). */
  readonly checkpoint: OutputCheckpoint | null;
}

/** What step 2 got: the stored object, or why the output is lost; and the URL it came from. */
interface FetchOutcome {
  readonly object: RescuedObject | null;
  readonly lostReason: string | null;
  readonly outputUrl: string | null;
}

/** The step after a stored output (activities/process-media.ts), run in the same activity; `video`: the asset just recorded. */
export interface NextMediaStep {
  processMedia(taskId: string, video?: StoredVideo): Promise<TaskFacts>;
}

/** The provider URL without its query and fragment: where the bytes came from, without the signature. */
export const sourceUrlOf = (raw: string): string => {
  const u = new URL(raw);
  return `${u.origin}${u.pathname}`;
};

export function createRescueActivities(deps: TaskActivityDeps, media: NextMediaStep) {
  // Connects only to public addresses, checked at connect time (net/safe-fetch.ts).
  const dispatcher = createSafeDispatcher({ allowPrivate: deps.settings.outputAllowPrivate });
  const downloader = createOutputDownloader(deps);
  const targets: DownloadTarget[] = [
    { location: 'primary', storage: deps.storage },
    ...(deps.fallbackStorage ? [{ location: 'fallback' as const, storage: deps.fallbackStorage }] : []),
  ];
  const storageAt = (l: StorageLocation) => targets.find((t) => t.location === l)?.storage ?? null;

  /**
   * The published object wherever it is, else the bytes downloaded into the first target that
   * takes them: the primary bucket, or the fallback when the primary fails (docs/decisions/0029).
   */
  async function rescueBytes(
    token: FenceToken,
    taskId: string,
    attemptId: string,
    rawUrl: string | null,
    key: string,
    provider: string,
    checkpoint?: OutputCheckpoint | null,
  ): Promise<RescuedObject> {
    const reachable: DownloadTarget[] = [];
    let lastStorageError: StorageWriteError | null = null;
    // Both buckets at once: an unreachable one costs its connect timeout once, not per bucket.
    const heads = await Promise.allSettled(targets.map((t) => t.storage.head(key)));
    for (const [i, target] of targets.entries()) {
      const head = heads[i]!;
      if (head.status === 'rejected') {
        lastStorageError = new StorageWriteError(target.location, head.reason);
        continue;
      }
      const found = head.value;
      if (found?.sha256) {
        return {
          location: target.location,
          bucket: target.storage.bucket,
          sha256: found.sha256,
          size: found.size,
          contentType: found.contentType ?? 'video/mp4',
          downloadMs: null,
        };
      }
      reachable.push(target);
    }
    // A bucket that did not answer may hold the published object (an earlier run stored it and
    // stopped before recording it): while any is unknown, a gone provider URL is not a loss but
    // a retry, so an outage can never turn a stored output into OUTPUT_LOST.
    const unknown = targets.filter((_, i) => heads[i]!.status === 'rejected').map((t) => t.location);
    const notLostYet = (err: unknown): never => {
      if (err instanceof OutputGoneError && unknown.length > 0) {
        throw new StorageWriteError(
          unknown[0]!,
          new Error(`${err.message}; the ${unknown.join(' and ')} bucket did not answer and may hold the output, so it is not lost yet`),
        );
      }
      throw err;
    };
    if (!rawUrl) notLostYet(new OutputGoneError('provider reported success without an output URL'));
    const url = validateOutputUrl(rawUrl!, {
      allowedHosts: deps.settings.outputHosts[provider] ?? [],
      allowPrivate: deps.settings.outputAllowPrivate,
    });
    const ctx = Context.current();
    // Bytes already stored in a reachable bucket are resumed there, before any other is tried: a
    // retry that went back to the primary would discard them and need the provider's URL again,
    // which may have expired meanwhile (docs/decisions/0029). Otherwise the primary comes first.
    const resumeAt = checkpoint ? reachable.findIndex((t) => t.location === checkpoint.location) : -1;
    if (resumeAt > 0) reachable.unshift(...reachable.splice(resumeAt, 1));
    // Every byte stored there: only that bucket may finish the output. Any other would discard the
    // stored upload and need the provider's URL again; while the bucket does not answer (or fails
    // finishing), the rescue waits for it as for any storage outage.
    const complete =
      checkpoint &&
      checkpoint.total_bytes !== null &&
      checkpoint.bytes_stored === checkpoint.total_bytes &&
      checkpoint.parts.length > 0 &&
      targets.some((t) => t.location === checkpoint.location);
    if (complete && resumeAt < 0) {
      throw new StorageWriteError(checkpoint.location, new Error('every byte of the output is stored in this bucket; waiting for it to answer'));
    }
    if (complete) reachable.splice(1);
    // The checkpoint read with the task serves the first target tried; a later one reads its own.
    let known = checkpoint;
    for (const target of reachable) {
      const started = Date.now();
      const given = known;
      known = undefined;
      try {
        // One client span for the whole transfer (its S3 calls are children): the host, never the
        // URL, whose query is the provider's signature (docs/observability.md).
        const object = await inSpan(
          'GET output',
          { 'http.request.method': 'GET', 'url.template': '(provider output URL)', 'server.address': url.host, 'vidorch.storage_location': target.location },
          () =>
            downloader.download(
              {
                token,
                taskId,
                attemptId,
                url,
                key,
                target,
                dispatcher,
                signal: ctx.cancellationSignal,
                heartbeat: (d) => ctx.heartbeat(d),
                ...(given !== undefined ? { checkpoint: given } : {}),
              },
              storageAt,
            ),
          SpanKind.CLIENT,
        );
        return {
          location: target.location,
          bucket: target.storage.bucket,
          sha256: object.sha256,
          size: object.size,
          contentType: object.contentType,
          downloadMs: Date.now() - started,
        };
      } catch (err) {
        if (!(err instanceof StorageWriteError)) notLostYet(err);
        lastStorageError = err as StorageWriteError;
        ctx.log.warn('output storage failed; trying the next target', { taskId, location: target.location, error: lastStorageError.message });
      }
    }
    throw lastStorageError ?? new Error('no storage target reachable');
  }

  /**
   * A fresh output URL from a provider that reissues them (capabilities.canRefreshOutputUrl:
   * Runway answers new signed URLs on every read of the task), recorded on the attempt with its
   * new deadline. Null when the provider cannot, or its read gave no URL: the stored one stands.
   */
  async function refreshOutputUrl(token: FenceToken, attempt: AttemptRow): Promise<{ url: string; deadline: Date } | null> {
    const adapter = deps.providers[attempt.provider];
    if (!adapter?.capabilities.canRefreshOutputUrl || !attempt.provider_job_id) return null;
    const job = await adapter.getJob(attempt.provider_job_id, AbortSignal.timeout(deps.settings.providerCallTimeoutMs), { model: attempt.provider_model });
    if (job.state !== 'succeeded' || !job.outputUrl) return null;
    const deadline = new Date(deps.clock.now().getTime() + adapter.capabilities.outputUrlTtlMs);
    await deps.db.transaction(async (tx) => {
      await holdFence(tx, token);
      await tx.update(taskAttempt).set({ output_url: job.outputUrl, output_deadline_at: deadline }).where(eq(taskAttempt.attempt_id, attempt.attempt_id));
    });
    Context.current().log.info('output URL refreshed at the provider', {
      attemptId: attempt.attempt_id,
      provider: attempt.provider,
      outputDeadlineAt: deadline.toISOString(),
    });
    return { url: job.outputUrl, deadline };
  }

  const nearDeadline = (deadline: Date | null): boolean =>
    deadline !== null && deps.clock.now().getTime() >= deadline.getTime() - deps.settings.outputAtRiskMarginMs;

  /** FETCHING_OUTPUT → OUTPUT_AT_RISK when the provider URL expires within the margin; true if moved now. */
  async function markAtRisk(token: FenceToken, taskId: string, deadline: Date | null, reason: string): Promise<boolean> {
    if (!deadline || deps.clock.now().getTime() < deadline.getTime() - deps.settings.outputAtRiskMarginMs) return false;
    return moveAtRisk(token, taskId, 'workflow.output-at-risk', { output_deadline_at: deadline.toISOString(), reason: reason.slice(0, 500) });
  }

  /** FETCHING_OUTPUT → OUTPUT_AT_RISK with `detail` as the transition's evidence; true if moved now. */
  async function moveAtRisk(token: FenceToken, taskId: string, sourceEvent: string, detail: Record<string, unknown>): Promise<boolean> {
    const { value } = await inTaskTransaction(
      deps.db,
      deps.fence,
      taskId,
      async (tx, { task }) => {
        if (!task) return false;
        const moved = await applyTaskEvent(
          tx,
          token,
          task,
          { type: 'OUTPUT_DEADLINE_NEAR' },
          { sourceEvent, actor: 'workflow', attemptId: task.active_attempt_id, detail },
        );
        return moved !== null;
      },
      { token },
    );
    return value;
  }

  /**
   * Step 1: PROVIDER_SUCCEEDED → FETCHING_OUTPUT; the task and its attempt, or null when there is
   * nothing to fetch (then with the facts). Its token is the rescue's: every later write commits
   * under it or not at all.
   */
  async function startFetch(taskId: string): Promise<{ target: FetchTarget | null; token: FenceToken; facts: TaskFacts | null }> {
    const { value, facts } = await inTaskTransaction(
      deps.db,
      deps.fence,
      taskId,
      async (tx, { task, attempt, token }) => ({ target: await startLocked(tx, token, taskId, task, attempt), token }),
      { facts: () => deps.clock.now(), activeAttempt: true },
    );
    return { ...value, facts };
  }

  async function startLocked(tx: Tx, token: FenceToken, taskId: string, task: TaskRow | null, attempt: AttemptRow | null): Promise<FetchTarget | null> {
    if (!task) throw notFound(`task ${taskId}`);
    const d = decide(task.status, { type: 'OUTPUT_FETCH_STARTED' });
    if (d.kind === 'move') {
      await casTaskStatus(tx, token, {
        taskId,
        from: task.status,
        expectedVersion: task.status_version,
        to: d.to,
        sourceEvent: 'workflow.rescue-output',
        actor: 'workflow',
        attemptId: task.active_attempt_id,
      });
    } else if (!FETCHING.includes(task.status)) {
      return null;
    }
    if (!attempt) throw notFound(`attempt of task ${taskId}`);
    const [checkpoint] = await tx.select().from(outputDownload).where(eq(outputDownload.attempt_id, attempt.attempt_id));
    return { task, attempt, checkpoint: checkpoint ?? null };
  }

  /**
   * The output's host is not on the provider's allow-list (PROVIDER_<P>_OUTPUT_HOSTS) and its URL
   * is still valid: a policy refusal, not a loss. The task waits in OUTPUT_AT_RISK with the host
   * named in the transition (and counted by vidorch_output_host_refused_tasks), so an operator can
   * allow the host before the URL expires (docs/runbooks/providers.md "An output host is
   * refused"); the rescue looks again every HOST_POLICY_RETRY_MS and fetches once its worker runs
   * with the host allowed. Past the URL's expiry it parks in MANUAL_REVIEW as before. Null when
   * the task moved now (the workflow raises NeedsAttention and comes straight back); otherwise the
   * retry is thrown.
   */
  async function waitForHostPolicy(token: FenceToken, taskId: string, attempt: AttemptRow, deadline: Date, err: OutputHostNotAllowedError): Promise<null> {
    const moved = await moveAtRisk(token, taskId, OUTPUT_HOST_REFUSED_EVENT, {
      reason: `${err.message}: allow it in PROVIDER_${attempt.provider.toUpperCase()}_OUTPUT_HOSTS before the URL expires`,
      refused_host: err.host,
      provider: attempt.provider,
      output_deadline_at: deadline.toISOString(),
    });
    Context.current().log.warn('output host not allowed; the task waits in OUTPUT_AT_RISK', {
      taskId,
      provider: attempt.provider,
      host: err.host,
      outputDeadlineAt: deadline.toISOString(),
    });
    if (moved) return null;
    throw ApplicationFailure.create({
      type: FailureType.OutputHostRefused,
      message: `${err.message}; waiting for an operator until the URL expires at ${deadline.toISOString()}`,
      nextRetryDelay: plusUpToHalf(HOST_POLICY_RETRY_MS, Math.random),
      category: ApplicationFailureCategory.BENIGN,
    });
  }

  /**
   * Step 2: the bytes, skipped when the published object is already there (either bucket). A
   * provider that reissues URLs is asked for a fresh one near the expiry, and once more after a
   * refusal. Null when the task was marked OUTPUT_AT_RISK instead (the workflow raises
   * NeedsAttention and comes straight back); a lost output is an outcome, anything else throws.
   */
  async function fetchOutput(
    token: FenceToken,
    taskId: string,
    attempt: AttemptRow,
    key: string,
    checkpoint: OutputCheckpoint | null,
  ): Promise<FetchOutcome | null> {
    let outputUrl = attempt.output_url;
    let deadline = attempt.output_deadline_at;
    let refreshed = false;
    const refresh = async () => {
      refreshed = true;
      const fresh = await refreshOutputUrl(token, attempt).catch(() => null);
      if (fresh) ({ url: outputUrl, deadline } = fresh);
      return fresh !== null;
    };
    try {
      // Near its expiry, a provider that can reissue the URL is asked to first.
      if (nearDeadline(deadline)) await refresh();
      try {
        return { object: await rescueBytes(token, taskId, attempt.attempt_id, outputUrl, key, attempt.provider, checkpoint), lostReason: null, outputUrl };
      } catch (err) {
        // Refused (expired) but reissuable: once more with a fresh URL.
        if (!(err instanceof OutputGoneError) || refreshed || !(await refresh())) throw err;
        return { object: await rescueBytes(token, taskId, attempt.attempt_id, outputUrl, key, attempt.provider), lostReason: null, outputUrl };
      }
    } catch (err) {
      if (err instanceof OutputHostNotAllowedError && deadline !== null && deps.clock.now() < deadline) {
        return waitForHostPolicy(token, taskId, attempt, deadline, err);
      }
      // A refused scheme or address, or a host still refused once the URL has expired: parked for a person.
      if (err instanceof UnsafeUrlError) {
        throw ApplicationFailure.create({ type: FailureType.UnsafeOutputUrl, message: err.message, nonRetryable: true });
      }
      if (!(err instanceof OutputGoneError)) {
        // Storage or network trouble: retried. Near the URL's expiry, say so first (the
        // workflow raises NeedsAttention and comes straight back here).
        if (await markAtRisk(token, taskId, deadline, (err as Error).message)) return null;
        throw err;
      }
      return { object: null, lostReason: err.message, outputUrl };
    }
  }

  /**
   * Step 3: record the asset and move on to PROCESSING_MEDIA, or record the loss (FAILED
   * OUTPUT_LOST). The asset recorded now (null when none was), and the facts after.
   */
  async function recordOutcome(token: FenceToken, taskId: string, attempt: AttemptRow, key: string, outcome: FetchOutcome) {
    const { object, lostReason, outputUrl } = outcome;
    const assetId = newId();
    const { value, facts } = await inTaskTransaction(
      deps.db,
      deps.fence,
      taskId,
      async (tx, { task: current }): Promise<StoredVideo | null> => {
        if (!current || !FETCHING.includes(current.status)) return null;
        if (!object) {
          await finishTask(tx, token, current, failedUncharged('workflow.output-lost', 'OUTPUT_LOST', lostReason ?? 'output lost'));
          return null;
        }
        const [stored] = await tx
          .insert(asset)
          .values({
            asset_id: assetId,
            tenant_id: current.tenant_id,
            task_id: current.task_id,
            attempt_id: attempt.attempt_id,
            kind: 'video',
            bucket: object.bucket,
            region: deps.storage.region,
            location: object.location,
            object_key: key,
            sha256: object.sha256,
            size_bytes: object.size,
            content_type: object.contentType,
            source_url: outputUrl ? sourceUrlOf(outputUrl) : null,
            downloaded_at: deps.clock.now(),
            download_ms: object.downloadMs,
          })
          .onConflictDoNothing()
          .returning(STORED_VIDEO_COLUMNS);
        await casTaskStatus(tx, token, {
          taskId,
          from: current.status,
          expectedVersion: current.status_version,
          to: 'PROCESSING_MEDIA',
          sourceEvent: 'workflow.output-stored',
          actor: 'workflow',
          attemptId: attempt.attempt_id,
          detail: { object_key: key, sha256: object.sha256, size_bytes: object.size, location: object.location },
          // Each entry starts the media step's bound afresh (a review may send the task through again).
          set: { mediaFailures: 0 },
        });
        // Null when an asset row was there already (an earlier run's): the media step reads it.
        return stored ?? null;
      },
      { token, facts: () => deps.clock.now() },
    );
    return { video: value, facts };
  }

  /** The three steps under one token; the facts where the last step read them (null: read them after). */
  async function rescue(taskId: string): Promise<{ facts: TaskFacts | null; video: StoredVideo | null }> {
    const started = await startFetch(taskId);
    if (!started.target) return { facts: started.facts, video: null };
    const { token } = started;
    const { task, attempt } = started.target;
    const key = outputObjectKey(task.tenant_id, task.task_id, attempt.attempt_id, 'mp4');
    const outcome = await fetchOutput(token, taskId, attempt, key, started.target.checkpoint);
    if (!outcome) return { facts: null, video: null };
    return recordOutcome(token, taskId, attempt, key, outcome);
  }

  return {
    async rescueOutput(taskId: string): Promise<TaskFacts> {
      const rescued = await withHeartbeat(async () => {
        try {
          return await rescue(taskId);
        } catch (err) {
          throw toActivityFailure(err, deps.modePauseRetryMs);
        }
      });
      const after = rescued.facts ?? (await readTaskFacts(deps.db, taskId, deps.clock.now()));
      // The media step follows in the same activity (docs/decisions/0009): one dispatch and one
      // workflow task fewer between the callback and SUCCEEDED. It decides on the facts as its own
      // step would; if it fails, this activity's retry finds PROCESSING_MEDIA, skips the bytes
      // and runs it again (the workflow's processMedia step remains for runs that stop there).
      if (after.status === 'PROCESSING_MEDIA') return media.processMedia(taskId, rescued.video ?? undefined);
      return after;
    },
  };
}
