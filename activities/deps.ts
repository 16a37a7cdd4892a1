// What task activities need from the outside world. Built once per worker process and passed
// to createTaskActivities(); tests pass real test databases and servers.
import { Context } from '@temporalio/activity';
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import type { Db, Tx } from '../db/client';
import { inTaskTransaction, readTaskRows, type TaskLock, type TaskTransactionOptions, type TaskTransactionResult } from '../db/task-tx';
import type { TaskFacts } from '../domain/facts';
import type { Clock } from '../domain/clock';
import { FenceRejectedError, acquireFence, type FenceToken } from '../db/fence';
import { ModePausedError } from '../db/modes';
import { SettlementConflictError } from '../db/ledger';
import { InvalidTransitionError } from '../db/tasks';
import { plusUpToHalf } from '../domain/backoff';
import { FailureType } from '../domain/errors';
import { modeForbids } from '../domain/modes';
import type { ProviderAdapter } from '../providers/types';
import type { StorageLocation, TaskRow } from '../db/schema';
import type { ObjectStorage } from '../storage/s3';
import type { PollDemand } from './poll-demand';
import type { ProviderGuard } from './provider-guard';
import type { ProviderHealth } from '../domain/router';
import type { RouteStats, RoutingSettings } from './routing';
import type { TenantSlotDefaults } from '../db/slot-queue';
import type { QueuePolicy } from '../domain/slot-queue';

export interface SlotQueueSettings {
  readonly policy: QueuePolicy;
  /** A waiting workflow's fallback timer (a lost wake costs at most this). */
  readonly waitFallbackMs: number;
  /** An unused grant goes back to the queue after this. */
  readonly grantTtlMs: number;
  readonly tenantDefaults: TenantSlotDefaults;
}

// The clock is a plain interface (domain/clock.ts), so activities/cached.ts needs nothing of this module.
export type { Clock };
export const systemClock: Clock = { now: () => new Date() };

/**
 * The provider submit switch (docs/design.md §7): this process's own, in-memory view of whether
 * it may start provider jobs, kept by the worker's fence watcher. The fence row decides in the
 * claim transaction anyway; the switch stops a fenced process before it gets that far, and
 * between the claim and the call.
 */
export interface SubmitSwitch {
  /** Null while submits are allowed here; otherwise why not. */
  closedReason(): string | null;
}

/** A step rejected by the fence is tried again after this long (plus up to half again as jitter). */
export const FENCE_REJECTED_RETRY_MS = 2_000;

export interface TaskActivityDeps {
  readonly db: Db;
  readonly fence: { readonly scope: string; readonly region: string };
  /** Absent in processes without a fence watcher (tests): the fence row alone decides. */
  readonly submitSwitch?: SubmitSwitch;
  /** How soon a step paused by the mode is retried, plus up to half again as jitter (MODE_PAUSE_RETRY_MS). */
  readonly modePauseRetryMs: number;
  readonly clock: Clock;
  readonly providers: Readonly<Record<string, ProviderAdapter>>;
  readonly storage: ObjectStorage;
  /** The second S3 endpoint a rescue writes to when the primary fails (docs/decisions/0029); null: none. */
  readonly fallbackStorage?: ObjectStorage | null;
  /** Provider routing (ROUTER_BUDGET_MS, ROUTER_STATIC_ROUTE). */
  readonly routing: RoutingSettings;
  /** Provider health the router reads (the worker: this process's breakers and submit timings, routing.ts localProviderHealth). */
  readonly providerHealth: () => Readonly<Record<string, ProviderHealth>>;
  // Process-level state, built once per process (config/services.ts buildActivityDeps) and read
  // by the worker's /metrics too (workers/main.ts).
  /** The submit claim's breakers, retry budgets and bulkhead ramp (activities/provider-guard.ts). */
  readonly providerGuard: ProviderGuard;
  /** Submit latencies the router reads and route decisions /metrics counts (activities/routing.ts). */
  readonly routeStats: RouteStats;
  /** The poll-interval floor from the jobs waiting per provider (activities/poll-demand.ts). */
  readonly pollDemand: PollDemand;
  /** Observes each submit claim's duration in seconds, lock waits included (the worker's vidorch_submit_claim_seconds). */
  readonly claimTimes?: (seconds: number) => void;
  readonly settings: {
    /** Base of callback URLs handed to providers. */
    readonly publicBaseUrl: string;
    /** Key of the callback URL tokens (providers/callback-token.ts). */
    readonly callbackTokenSecret: string;
    readonly pollInitialMs: number;
    readonly pollMaxMs: number;
    /** While a provider's callbacks are healthy, waiting polls are this many times slower (domain/backoff.ts pollInterval). */
    readonly pollHealthyFactor: number;
    /**
     * Query quota per provider over the adapter's declared one (config POLL_QUEUE_RATES); the
     * poll queues' limits (workers/generation-worker.ts) and the demand floor's rate derive from it
     * (activities/poll-demand.ts pollRateFor).
     */
    readonly pollQuotas: Readonly<Record<string, number>>;
    /** Temporal's partitions per task queue: their limiters' bursts (domain/poll-quota.ts). */
    readonly pollQueuePartitions: number;
    /** The share of a provider's poll rate the wait loops aim for when demand exceeds it (activities/poll-demand.ts). */
    readonly pollQuotaShare: number;
    /** A provider's callbacks are healthy while one reached the inbox within this window (0: never). */
    readonly callbackHealthyWindowMs: number;
    readonly maxSubmitAttempts: number;
    /** Throttled creates (429) per task before it fails; they do not count against maxSubmitAttempts. */
    readonly maxThrottledSubmits: number;
    /** A capped provider model is asked again at the next UTC midnight or after this, whichever is first (docs/decisions/0070). */
    readonly capRecheckMs: number;
    /**
     * Create quota per provider over the adapter's documented one (config PROVIDER_CREATE_QUOTAS):
     * the submit claims' shared pace (domain/create-pace.ts, activities/create-pace.ts).
     */
    readonly createQuotas: Readonly<Record<string, number>>;
    /** The timeout of one provider call: a submit does not start with less than this left before the task's deadline. */
    readonly providerCallTimeoutMs: number;
    /** The slot queue in front of each provider's bulkhead (db/slot-queue.ts, docs/providers.md). */
    readonly slotQueue: SlotQueueSettings;
    /** A reconciliation miss proves absence only this long after the submit began. */
    readonly unknownProofDelayMs: number;
    /** How long after its claim an attempt's create may still leave (SUBMIT_SEND_WINDOW_MS, docs/decisions/0063). */
    readonly submitSendWindowMs: number;
    /** An unknown submit outcome not found by then goes to MANUAL_REVIEW. */
    readonly unknownOutcomeDeadlineMs: number;
    /** Re-sends of an unknown create with its own key, per attempt (UNKNOWN_RESEND_LIMIT, activities/resend-unknown.ts). */
    readonly unknownResendLimit: number;
    /** One reconciliation lookup gives up after this (a failed lookup: nothing learned; the deadline still runs). */
    readonly reconcileLookupBudgetMs: number;
    /** Consecutive 404/410/lasting-4xx reads of a known job before MANUAL_REVIEW (activities/provider-reads.ts). */
    readonly readFailureLimit: number;
    /** Per-provider maximum run time over the adapter's capabilities.maxRunMs. */
    readonly maxRunMs: Readonly<Record<string, number>>;
    readonly outputAllowPrivate: boolean;
    readonly outputMaxBytes: number;
    /** Size of each stored part of an output download: the unit a resumed download keeps (S3: at least 5 MiB). */
    readonly outputPartBytes: number;
    /** A rescue failing this close to the provider URL's expiry marks the task OUTPUT_AT_RISK. */
    readonly outputAtRiskMarginMs: number;
    readonly outputHosts: Readonly<Record<string, readonly string[]>>;
    /** One ffprobe run of the media step (MEDIA_PROBE_TIMEOUT_MS). */
    readonly mediaProbeTimeoutMs: number;
    /** Media-step failures that are no verdict on the video before MANUAL_REVIEW (MEDIA_MAX_FAILURES, activities/media-failures.ts). */
    readonly mediaMaxFailures: number;
  };
}

/** The storage holding objects at `location` (an asset row's); a fallback asset without a fallback configured is a plain (retryable) error. */
export function storageAt(deps: Pick<TaskActivityDeps, 'storage' | 'fallbackStorage'>, location: StorageLocation): ObjectStorage {
  if (location === 'primary') return deps.storage;
  if (!deps.fallbackStorage) throw new Error('an asset is in the fallback bucket but S3_FALLBACK_ENDPOINT is not set');
  return deps.fallbackStorage;
}

export function providerFor(deps: TaskActivityDeps, name: string): ProviderAdapter {
  const adapter = deps.providers[name];
  if (!adapter) {
    throw ApplicationFailure.create({
      type: FailureType.InvalidState,
      message: `no adapter configured for provider ${name}`,
      nonRetryable: true,
    });
  }
  return adapter;
}

/** Maps our typed errors to the Temporal failure vocabulary; everything else stays a plain (retryable) error. */
export function toActivityFailure(err: unknown, pauseRetryMs: number): unknown {
  if (err instanceof FenceRejectedError) {
    // Another worker (of the active region) should take this over: retry soon and flat, not on
    // the policy's growing backoff, or every bounce off a fenced (zombie) worker would double
    // the task's wait after a failover.
    return ApplicationFailure.create({
      type: FailureType.FenceRejected,
      message: err.message,
      cause: err,
      nextRetryDelay: plusUpToHalf(FENCE_REJECTED_RETRY_MS, Math.random),
    });
  }
  if (err instanceof ModePausedError) {
    // Retryable on our own short clock rather than the policy's growing backoff, so a task
    // resumes within seconds of the mode allowing it; jittered so a reopened system is not hit
    // by every paused task at once. BENIGN: an expected wait, logged at debug.
    return ApplicationFailure.create({
      type: FailureType.ModePaused,
      message: err.message,
      cause: err,
      nextRetryDelay: plusUpToHalf(pauseRetryMs, Math.random),
      category: ApplicationFailureCategory.BENIGN,
    });
  }
  if (err instanceof InvalidTransitionError || err instanceof SettlementConflictError) {
    // A broken invariant no retry mends: the workflow parks the task for a person.
    return ApplicationFailure.create({
      type: FailureType.InvalidState,
      message: err.message,
      nonRetryable: true,
      cause: err,
    });
  }
  return err;
}

/**
 * Runs one unit of work under a fence token read at its start. Every fenced step writes facts,
 * so it waits (ModePaused) while the mode makes facts read-only (READ_ONLY, MAINTENANCE).
 */
export async function fenced<T>(deps: TaskActivityDeps, work: (token: FenceToken) => Promise<T>): Promise<T> {
  try {
    const { token, state } = await acquireFence(deps.db, deps.fence.scope, deps.fence.region);
    if (modeForbids(state.mode, 'factWrites')) throw new ModePausedError(state.mode, 'factWrites');
    return await work(token);
  } catch (err) {
    throw toActivityFailure(err, deps.modePauseRetryMs);
  }
}

/**
 * One transaction on one task (db/task-tx.ts): the fence, the mode and the task row taken in the
 * round trip that begins it, the facts read in the one that commits it. Its refusals (fence,
 * mode) become the activity failures fenced() gives.
 */
export async function inTaskStep<T>(
  deps: TaskActivityDeps,
  taskId: string,
  work: (tx: Tx, lock: TaskLock) => Promise<T>,
  options: TaskTransactionOptions = {},
): Promise<TaskTransactionResult<T>> {
  try {
    return await inTaskTransaction(deps.db, deps.fence, taskId, work, options);
  } catch (err) {
    throw toActivityFailure(err, deps.modePauseRetryMs);
  }
}

/**
 * A step that reads, calls a provider, then writes (a poll): `work` gets the fence's token, the
 * mode, the task and its active attempt, read in one round trip without a transaction
 * (db/task-tx.ts readTaskRows); its writes go in task transactions carrying that token. Refused
 * (fence, mode) before `work` runs, and every failure mapped, as fenced() does.
 */
export async function readTaskStep<T>(deps: TaskActivityDeps, taskId: string, work: (read: TaskLock) => Promise<T>): Promise<T> {
  try {
    return await work(await readTaskRows(deps.db, deps.fence, taskId));
  } catch (err) {
    throw toActivityFailure(err, deps.modePauseRetryMs);
  }
}

/**
 * A fact step that is one task transaction: `work` gets the task (NotFound when there is none)
 * and the step returns the facts after the commit.
 */
export async function taskFactStep(
  deps: TaskActivityDeps,
  taskId: string,
  work: (tx: Tx, task: TaskRow, lock: TaskLock) => Promise<unknown>,
  options: Omit<TaskTransactionOptions, 'facts'> = {},
): Promise<TaskFacts> {
  const { facts } = await inTaskStep(
    deps,
    taskId,
    async (tx, lock) => {
      if (!lock.task) throw notFound(`task ${taskId}`);
      await work(tx, lock.task, lock);
    },
    { ...options, facts: () => deps.clock.now() },
  );
  if (!facts) throw notFound(`task ${taskId}`);
  return facts;
}

/** Throws a retryable FenceRejected when this process's submit switch is closed. */
export function assertSubmitSwitchOpen(deps: TaskActivityDeps): void {
  const why = deps.submitSwitch?.closedReason();
  if (why) {
    throw ApplicationFailure.create({
      type: FailureType.FenceRejected,
      message: `region ${deps.fence.region}: submit switch closed: ${why}`,
      nextRetryDelay: plusUpToHalf(FENCE_REJECTED_RETRY_MS, Math.random),
    });
  }
}

/**
 * Heartbeats every `everyMs` while `work` runs, so a worker that dies mid-activity is noticed
 * after the heartbeat timeout instead of the whole start-to-close timeout.
 */
export async function withHeartbeat<T>(work: () => Promise<T>, everyMs = 2_000): Promise<T> {
  const ctx = Context.current();
  const timer = setInterval(() => ctx.heartbeat(), everyMs);
  try {
    return await work();
  } finally {
    clearInterval(timer);
  }
}

export function notFound(what: string): ApplicationFailure {
  return ApplicationFailure.create({ type: FailureType.NotFound, message: `${what} not found`, nonRetryable: true });
}
