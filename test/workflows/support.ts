// Helpers shared by the workflow-level tests (reset, replay) and scripts/record-histories.ts:
// the real Temporal CLI, history inspection, and the per-task fact checks a reset must leave
// unchanged (one provider job, one ledger row per kind, one object per asset, gapless versions).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import type { Client } from '@temporalio/client';
import type { History } from '@temporalio/common/lib/proto-utils';
import { and, asc, eq } from 'drizzle-orm';
import { attemptIdFor } from '../../activities/dispatch';
import { buildStorage } from '../../config/services';
import { asset, creditLedger, generationTask, taskAttempt, taskTransition } from '../../db/schema';
import type { E2E } from '../support/e2e';
import { eventually } from '../support/stack';

const run = promisify(execFile);
type HistoryEvent = NonNullable<History['events']>[number];

export const HISTORIES_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'histories');

/** The reset point: one of the CLI's `--type` values, or an event id of the given run. */
export type ResetPoint = { readonly type: 'FirstWorkflowTask' | 'LastWorkflowTask' } | { readonly eventId: number; readonly runId: string };

/**
 * `temporal workflow reset` with the real CLI binary, as an operator does it from a terminal
 * (the UI's reset calls the same ResetWorkflowExecution API). Returns the new run id.
 */
export async function resetWithCli(workflowId: string, point: ResetPoint, reason: string): Promise<string> {
  const cli = process.env['TEMPORAL_CLI_PATH'];
  const address = process.env['TEMPORAL_ADDRESS'];
  if (!cli || !address) throw new Error('TEMPORAL_CLI_PATH and TEMPORAL_ADDRESS must be set (npm test sets both)');
  const args = ['workflow', 'reset', '--workflow-id', workflowId, '--address', address, '--namespace', 'default', '--reason', reason, '--output', 'json'];
  if ('type' in point) args.push('--type', point.type);
  else args.push('--run-id', point.runId, '--event-id', String(point.eventId));
  const { stdout } = await run(cli, args, { timeout: 30_000 });
  const { runId } = JSON.parse(stdout) as { runId?: string };
  assert.ok(runId, `reset printed no run id: ${stdout}`);
  return runId;
}

/** Events of a history that match, e.g. `(ev) => ev.workflowExecutionSignaledEventAttributes`. */
export const eventsWhere = (history: History, has: (ev: HistoryEvent) => unknown): HistoryEvent[] => (history.events ?? []).filter((ev) => Boolean(has(ev)));

/** Activity types scheduled in a history, in order. */
export function scheduledActivities(history: History): string[] {
  return (history.events ?? []).flatMap((ev) => {
    const name = ev.activityTaskScheduledEventAttributes?.activityType?.name;
    return name ? [name] : [];
  });
}

/**
 * Activity types run as local activities (a `core_local_activity` marker each, its result or
 * failure recorded; docs/decisions/0034-local-fact-steps.md), in order.
 */
export function localActivities(history: History): string[] {
  return (history.events ?? []).flatMap((ev) => {
    const marker = ev.markerRecordedEventAttributes;
    if (marker?.markerName !== 'core_local_activity') return [];
    const data = marker.details?.['data']?.payloads?.[0]?.data;
    if (!data) return [];
    const { activity_type: type } = JSON.parse(Buffer.from(data).toString('utf8')) as { activity_type?: string };
    return type ? [type] : [];
  });
}

/** Activity types a history ran, scheduled on a task queue or local. */
export const ranActivities = (history: History): Set<string> => new Set([...scheduledActivities(history), ...localActivities(history)]);

/**
 * The WorkflowTaskCompleted event whose commands scheduled the `nth` (0-based) `activityType`
 * activity: resetting to it re-runs that workflow task, so the activity is scheduled again.
 */
export function wftSchedulingActivity(history: History, activityType: string, nth = 0): number {
  const scheduled = (history.events ?? []).filter((ev) => ev.activityTaskScheduledEventAttributes?.activityType?.name === activityType);
  const ev = scheduled[nth];
  assert.ok(ev, `no ${activityType} #${nth} scheduled in the history (${scheduledActivities(history).join(', ')})`);
  return Number(ev.activityTaskScheduledEventAttributes!.workflowTaskCompletedEventId);
}

/** The WorkflowTaskCompleted event of the workflow task that accepted the first Update. */
export function wftAcceptingUpdate(history: History): number {
  let lastCompleted = 0;
  for (const ev of history.events ?? []) {
    if (ev.workflowTaskCompletedEventAttributes) lastCompleted = Number(ev.eventId);
    if (ev.workflowExecutionUpdateAcceptedEventAttributes) return lastCompleted;
  }
  throw new Error('no Update was accepted in this history');
}

/** Waits for a run to close and returns its result (it must complete, not fail). */
export async function resultOfRun(client: Client, workflowId: string, runId: string): Promise<{ taskId: string; status: string }> {
  return client.workflow.getHandle(workflowId, runId).result() as Promise<{ taskId: string; status: string }>;
}

export interface TaskFigures {
  readonly attemptIds: string[];
  readonly providerJobs: number;
  readonly ledger: Record<string, number>;
  readonly assets: Record<string, number>;
  readonly objects: string[];
  readonly versions: number[];
}

/** What a task left behind in Postgres, S3 and the provider. */
export async function figuresOf(e: E2E, taskId: string): Promise<TaskFigures> {
  const db = e.tdb.database.db;
  const [task] = await db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
  assert.ok(task, `task ${taskId} exists`);
  const attempts = await db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)).orderBy(asc(taskAttempt.attempt_no));
  const ledgerRows = await db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId));
  const assetRows = await db.select().from(asset).where(eq(asset.task_id, taskId));
  const transitions = await db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(asc(taskTransition.to_version));
  const storage = buildStorage(e.config);
  const listed = await storage.client.send(new ListObjectsV2Command({ Bucket: storage.bucket, Prefix: `tenants/${task.tenant_id}/tasks/${taskId}/` }));
  storage.client.destroy();
  const tally = (xs: string[]) => xs.reduce<Record<string, number>>((acc, x) => ({ ...acc, [x]: (acc[x] ?? 0) + 1 }), {});
  return {
    attemptIds: attempts.map((a) => a.attempt_id),
    providerJobs: attempts.reduce((n, a) => n + e.sim.jobsFor(a.attempt_id), 0),
    ledger: tally(ledgerRows.map((r) => r.entry_type)),
    assets: tally(assetRows.map((r) => r.kind)),
    objects: (listed.Contents ?? []).map((o) => o.Key!).sort(),
    versions: transitions.map((t) => t.to_version),
  };
}

/**
 * The facts a converged, successful task must show however often its workflow was reset:
 * one attempt whose id is derived from the task id (never the run id), one provider job for
 * it, one RESERVE/SETTLE/RELEASE row, one asset per kind and exactly those objects in S3,
 * transition versions 0..N without gaps or repeats, and no state entered twice.
 */
export async function assertConvergedOnce(e: E2E, taskId: string): Promise<TaskFigures> {
  const db = e.tdb.database.db;
  const [task] = await db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
  assert.equal(task?.status, 'SUCCEEDED');
  const attempts = await db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId));
  assert.equal(attempts.length, 1, 'one attempt');
  const [attempt] = attempts;
  assert.equal(attempt!.attempt_id, attemptIdFor(taskId, 1), 'attempt id derived from task id + attempt number');
  assert.equal(attempt!.provider_idempotency_key, attempt!.attempt_id, 'provider idempotency key is the attempt id');
  assert.equal(e.sim.jobsFor(attempt!.attempt_id), 1, 'one provider job for the correlation token');

  // The thumbnail follows SUCCEEDED in the worker (activities/thumbnail.ts): wait for it.
  await eventually(
    async () =>
      (
        await db
          .select()
          .from(asset)
          .where(and(eq(asset.task_id, taskId), eq(asset.kind, 'thumbnail')))
      ).length > 0
        ? true
        : undefined,
    20_000,
    100,
  );
  const f = await figuresOf(e, taskId);
  assert.deepEqual(f.ledger, { RESERVE: 1, SETTLE: 1, RELEASE: 1 }, 'one ledger row per kind');
  assert.deepEqual(f.assets, { video: 1, thumbnail: 1 }, 'one asset row per kind');
  const assetKeys = (await db.select().from(asset).where(eq(asset.task_id, taskId))).map((a) => a.object_key).sort();
  assert.deepEqual(f.objects, assetKeys, 'exactly one object per asset under the task prefix (no strays, no .partial)');

  assert.deepEqual(
    f.versions,
    f.versions.map((_, i) => i),
    'transition versions 0..N, unique and gapless',
  );
  assert.equal(f.versions.at(-1), task.status_version, 'the last transition is the task version');
  const transitions = await db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId));
  for (const t of transitions) if (t.from_version !== null) assert.equal(t.to_version, t.from_version + 1);
  const entered = transitions.map((t) => t.to_status);
  assert.equal(new Set(entered).size, entered.length, `no state entered twice: ${entered.join(' → ')}`);
  return f;
}

/**
 * The recorded histories (test/fixtures/histories/<name>.json), made by
 * scripts/record-histories.ts and replayed by test/workflows/replay.test.ts. Each names the
 * workflow paths it must exercise, so a re-recording that missed its path fails the replay test.
 */
export const RECORDED_SCENARIOS = {
  'happy-path': { about: 'callbacks on: submit, callback, rescue, media, settle', activities: ['submitAttempt', 'applyInbox', 'rescueOutput', 'processMedia'] },
  'polling-only': { about: 'callbacks off: the poll timer fires and polls find the result', activities: ['pollProvider', 'rescueOutput', 'processMedia'] },
  'polling-on-poll-queue': {
    about: "callbacks off, patch 'per-provider-poll-queues': polls on the provider's poll queue find the result",
    activities: ['pollProvider', 'rescueOutput', 'processMedia'],
  },
  'unknown-outcome-resolved': {
    about: 'accept then hang: SUBMIT_UNKNOWN, found by its correlation token',
    activities: ['submitAttempt', 'pollProvider', 'processMedia'],
  },
  'rejected-then-retried': { about: '429 with Retry-After: a workflow timer, then attempt 2', activities: ['submitAttempt', 'prepareAttempt', 'processMedia'] },
  'cancel-while-running': { about: 'cancel while RUNNING: provider cancel requested, CANCELLED', activities: ['requestProviderCancel'] },
  'manual-review-resolved': {
    about: 'deadline → MANUAL_REVIEW; a refused Update, then confirm-not-submitted; attempt 2 succeeds',
    activities: ['escalateTask', 'resolveReview', 'processMedia'],
  },
  'slot-queue-wait': {
    about: "patch 'slot-queue': the provider's one slot is taken, the task waits for a grant, is woken and succeeds",
    activities: ['submitAttempt', 'applyInbox', 'rescueOutput'],
  },
  'review-late-webhook': {
    about: "deadline → MANUAL_REVIEW, patch 'review-applies-inbox': the late webhook is applied in review, the task succeeds",
    activities: ['escalateTask', 'applyInbox', 'rescueOutput'],
  },
  'lean-happy-path': {
    about: "patch 'lean-steps': fact steps local, one dispatch-and-prepare step, the callbacks applied after each wait",
    activities: ['getTaskFacts', 'dispatchAndPrepare', 'submitAttempt', 'applyInbox', 'rescueOutput'],
  },
  'lean-polling': {
    about: "callbacks off, patch 'lean-steps': each wait cycle is a timer, a poll and one local applyInbox",
    activities: ['pollProvider', 'applyInbox', 'rescueOutput'],
  },
  'local-step-falls-back': {
    about: "QUEUE_ONLY, patch 'lean-steps': the local prepareAttempt fails ModePaused and the regular one waits for the mode, then the task succeeds",
    activities: ['dispatchAndPrepare', 'prepareAttempt', 'submitAttempt', 'rescueOutput'],
  },
  'waits-in-retries': {
    about:
      "callbacks off, patch 'waits-in-retries': a wait's polls are the attempts of one awaitProviderChange, retried by Temporal, until the job moves the task",
    activities: ['awaitProviderChange', 'applyInbox', 'rescueOutput'],
  },
  'wait-ended-by-wake': {
    about:
      "patch 'waits-in-retries': a tenant's cancel wakes a wait whose reads are in Temporal's backoff; the wait is cancelled, the provider cancel follows, CANCELLED",
    activities: ['awaitProviderChange', 'requestProviderCancel'],
  },
} as const satisfies Record<string, { about: string; activities: readonly string[] }>;
export type ScenarioName = keyof typeof RECORDED_SCENARIOS;

export const fixturePath = (name: string): string => path.join(HISTORIES_DIR, `${name}.json`);
