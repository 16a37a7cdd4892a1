// One generation task = one workflow. The workflow drives; Postgres decides (docs/design.md §3):
// every step is an idempotent activity that re-reads the facts and CASes them, and the next
// step is chosen from the facts it returns. A reset, a retry or a re-delivered signal at any
// point re-reads Postgres and carries on from there.
import {
  ActivityCancellationType,
  ActivityFailure,
  type ActivityOptions,
  CancellationScope,
  ApplicationFailure,
  type LocalActivityOptions,
  allHandlersFinished,
  condition,
  continueAsNew,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  sleep,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { TaskActivities } from '../activities';
import type { PollResult } from '../activities/poll-provider';
import { queues } from '../temporal/queues';
import { FailureType, NON_RETRYABLE_FAILURES } from '../domain/errors';
import type { TaskFacts } from '../domain/facts';
import { isTerminal, type AttemptState, type TaskStatus } from '../domain/states';
import { SA_ATTEMPT_STATE, SA_NEEDS_ATTENTION, SA_PROVIDER, SA_TASK_STATUS, SA_TENANT_ID, factsQuery, resolveReviewUpdate, wakeSignal } from './definitions';
import { reviewProblem, type ReviewResolution } from '../domain/review';

export interface GenerationInput {
  readonly taskId: string;
  /** Continue-as-new after this many steps (default STEPS_PER_RUN); tests set it low. */
  readonly stepsPerRun?: number;
}
export interface GenerationResult {
  readonly taskId: string;
  readonly status: TaskStatus;
}

const retry = {
  initialInterval: '1s',
  backoffCoefficient: 2,
  maximumInterval: '30s',
  nonRetryableErrorTypes: [...NON_RETRYABLE_FAILURES],
};

/** Fact steps: a few queries in one transaction (a provider cancel is one 10 s call). */
const factStep = { startToCloseTimeout: '30s', retry };
/**
 * Each activity's own options (docs/timeouts.md). The table is keyed by every activity, and
 * `activity(name)` is the only way to proxy one, so no step can run under another's timeouts.
 */
const ACTIVITY_OPTIONS = {
  getTaskFacts: factStep,
  dispatchTask: factStep,
  prepareAttempt: factStep,
  dispatchAndPrepare: factStep,
  applyInbox: factStep,
  escalateTask: factStep,
  resolveReview: factStep,
  requestProviderCancel: factStep,
  /** The provider call: a short heartbeat timeout so a dead worker's attempt is noticed fast. */
  submitAttempt: { startToCloseTimeout: '2m', heartbeatTimeout: '10s', retry },
  /** Provider reads: a reconciliation lookup may page through a listing, so it heartbeats. */
  pollProvider: { startToCloseTimeout: '5m', heartbeatTimeout: '15s', retry },
  /**
   * The wait in Temporal's retries (docs/decisions/0050-waits-in-activity-retries.md): each
   * attempt a poll, unlimited attempts. A wake cancels it, and the workflow waits for the
   * cancel to complete, so no read is still running when the inbox step that follows runs.
   */
  awaitProviderChange: {
    startToCloseTimeout: '5m',
    heartbeatTimeout: '15s',
    retry,
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  },
  /** Streaming the output into storage: long, heartbeating with bytes done. */
  rescueOutput: { startToCloseTimeout: '30m', heartbeatTimeout: '20s', retry },
  processMedia: { startToCloseTimeout: '5m', heartbeatTimeout: '20s', retry },
} satisfies { readonly [K in keyof TaskActivities]: ActivityOptions };

/** The proxy of one activity under its own options; `taskQueue` only moves it to another queue. */
function activity<K extends keyof TaskActivities>(name: K, taskQueue?: string): TaskActivities[K] {
  const options: ActivityOptions = taskQueue === undefined ? ACTIVITY_OPTIONS[name] : { ...ACTIVITY_OPTIONS[name], taskQueue };
  // The SDK types a proxy's member through a conditional type TypeScript cannot resolve for a
  // generic K; every TaskActivities member is an activity function, so this is that member.
  return proxyActivities<TaskActivities>(options)[name];
}

/**
 * A fact step's local attempt (docs/decisions/0034-local-fact-steps.md): run by the workflow's
 * own worker inside the workflow task, its result a marker — no task-queue round trip. One
 * attempt, bounded well under the workflow task timeout: a local activity must never hold a
 * workflow task for long, so whatever would make the step wait or retry (a mode pause, a fence
 * rejection, a database blip, a full local-activity slot) ends it, and the step runs again as
 * the regular activity under ACTIVITY_OPTIONS, whose retry loop is the wait (docs/decisions/0006).
 */
const localAttempt: LocalActivityOptions = { startToCloseTimeout: '5s', scheduleToCloseTimeout: '10s', retry: { maximumAttempts: 1 } };
/** The fact steps tried as local activities first; each keeps its regular options for the fallback. */
const LOCAL_ACTIVITY_OPTIONS = {
  getTaskFacts: localAttempt,
  dispatchTask: localAttempt,
  prepareAttempt: localAttempt,
  dispatchAndPrepare: localAttempt,
  applyInbox: localAttempt,
  escalateTask: localAttempt,
} satisfies { readonly [K in keyof TaskActivities]?: LocalActivityOptions };
type LocalFactStep = keyof typeof LOCAL_ACTIVITY_OPTIONS;

/** A failure the regular activity would not retry either: the step failed for good. */
function failedForGood(err: unknown): boolean {
  const cause = err instanceof ActivityFailure ? err.cause : undefined;
  return cause instanceof ApplicationFailure && (cause.nonRetryable || NON_RETRYABLE_FAILURES.includes(cause.type as FailureType));
}

/**
 * The fact step `name`. `local` (patch 'lean-steps'): a local attempt first, then the regular
 * activity unless that attempt failed for good; otherwise the regular activity only.
 */
function factStepOf<K extends LocalFactStep>(name: K, local: boolean): TaskActivities[K] {
  const regular = activity(name);
  if (!local) return regular;
  type Step = (...args: Parameters<TaskActivities[K]>) => Promise<TaskFacts>;
  // As in activity(): the SDK's proxy member type does not resolve for a generic K.
  const attempt = proxyLocalActivities<TaskActivities>(LOCAL_ACTIVITY_OPTIONS[name])[name] as unknown as Step;
  const fallback = regular as unknown as Step;
  const step: Step = async (...args) => {
    try {
      return await attempt(...args);
    } catch (err) {
      if (failedForGood(err)) throw err;
      return fallback(...args);
    }
  };
  return step as unknown as TaskActivities[K];
}

/**
 * Every fact step in both forms, built once per module rather than per run: a run picks its
 * table by the 'lean-steps' patch. The proxies schedule nothing until called, so which table
 * exists changes no command (docs/performance.md, "Worker memory").
 */
function factStepsOf(local: boolean) {
  return {
    getTaskFacts: factStepOf('getTaskFacts', local),
    dispatchTask: factStepOf('dispatchTask', local),
    prepareAttempt: factStepOf('prepareAttempt', local),
    dispatchAndPrepare: factStepOf('dispatchAndPrepare', local),
    applyInbox: factStepOf('applyInbox', local),
    escalateTask: factStepOf('escalateTask', local),
  };
}
const FACT_STEPS = { lean: factStepsOf(true), regular: factStepsOf(false) };

const resolveReview = activity('resolveReview');
const requestProviderCancel = activity('requestProviderCancel');
const submitAttempt = activity('submitAttempt');
/** Provider reads on the generation queue: runs that polled before per-provider poll queues. */
const pollProvider = activity('pollProvider');
const rescueOutput = activity('rescueOutput');
const processMedia = activity('processMedia');

const DEFAULT_POLL_MS = 5_000;
/**
 * Continue-as-new after this many steps even when Temporal does not suggest it yet. A waiting
 * step adds ~20 events (a wake; a wait's polls add none since 'waits-in-retries'), so a run stays
 * under ~1,000 events: a workflow evicted from a small
 * worker cache replays at most that on its next wake-up, however long it has waited. (Runs
 * started before the 'short-runs' patch keep LEGACY_STEPS_PER_RUN: ~10,000 events, which Temporal's
 * own suggestion would cut first, and a replay cost that grew with every poll.)
 */
const STEPS_PER_RUN = 50;
const LEGACY_STEPS_PER_RUN = 500;
const WAITING: readonly TaskStatus[] = ['SUBMITTED', 'RUNNING', 'CANCEL_REQUESTED', 'SUBMIT_UNKNOWN'];
/** Attempt states with a job or a lookup to ask the provider about. */
const OPEN_ATTEMPT: readonly AttemptState[] = ['SUBMITTED', 'RUNNING', 'SUBMIT_UNKNOWN'];
/** A task in MANUAL_REVIEW polls its provider this often (callbacks wake it at once). */
const REVIEW_POLL_MS = 15 * 60_000;

export async function generationWorkflow(input: GenerationInput): Promise<GenerationResult> {
  const { taskId } = input;
  // Patched: runs started before it continue as new after LEGACY_STEPS_PER_RUN steps.
  const stepsPerRun = input.stepsPerRun ?? (patched('short-runs') ? STEPS_PER_RUN : LEGACY_STEPS_PER_RUN);
  /**
   * Patched, once per run (docs/decisions/0034-local-fact-steps.md): fact steps run as local
   * activities first; QUEUED is dispatched and prepared in one step; a wait cycle applies the
   * inbox only after the wait, not before it too. `woken` is then cleared only right before an
   * activity that reads what a wake announces (submitAttempt, applyInbox), so a wake it missed
   * is still set; a run starts woken, so its first wait applies what arrived before the run
   * (a wake the previous run took with it into continue-as-new, or one lost to a reset).
   * Runs started before the patch keep the old steps for their whole run.
   */
  const lean = patched('lean-steps');
  const { getTaskFacts, dispatchTask, prepareAttempt, dispatchAndPrepare, applyInbox, escalateTask } = lean ? FACT_STEPS.lean : FACT_STEPS.regular;
  let woken = lean;
  let current: TaskFacts | null = null;
  let published = '';
  setHandler(wakeSignal, () => {
    woken = true;
  });
  setHandler(factsQuery, () => current);
  setHandler(
    resolveReviewUpdate,
    async (resolution) => {
      try {
        const after = await resolveReview(taskId, resolution);
        woken = true;
        return after;
      } catch (err) {
        // A refused resolution still re-reads the facts: they may have moved on (e.g. a reset
        // re-delivered an Update that was already applied). Patched: older runs did not wake.
        if (patched('wake-after-refused-review')) woken = true;
        throw err;
      }
    },
    {
      validator: (resolution: ReviewResolution) => {
        const problem = reviewProblem(resolution);
        if (problem) throw new Error(problem);
        if (current?.status !== 'MANUAL_REVIEW') throw new Error(`task is ${current?.status ?? 'unknown'}, not in MANUAL_REVIEW`);
      },
    },
  );

  /**
   * Provider reads on the active attempt's provider's poll queue, whose worker caps the queue's
   * global rate at that provider's query quota. The workflow's own queue is the base name
   * (queues.generation is the identity), so the poll queue needs no extra input.
   */
  const pollQueueReads = new Map<string, typeof pollProvider>();
  const readsOn = (f: TaskFacts): typeof pollProvider => {
    const name = f.attemptProvider ?? f.provider;
    let reads = pollQueueReads.get(name);
    if (!reads) {
      reads = activity('pollProvider', queues.poll(workflowInfo().taskQueue, name));
      pollQueueReads.set(name, reads);
    }
    return reads;
  };
  const pollQueueWaits = new Map<string, TaskActivities['awaitProviderChange']>();
  const waitsOn = (f: TaskFacts): TaskActivities['awaitProviderChange'] => {
    const name = f.attemptProvider ?? f.provider;
    let waits = pollQueueWaits.get(name);
    if (!waits) {
      waits = activity('awaitProviderChange', queues.poll(workflowInfo().taskQueue, name));
      pollQueueWaits.set(name, waits);
    }
    return waits;
  };

  /**
   * The polls of a wait, in Temporal's activity retries: one activity reads and applies until
   * the task moves or the poll's result is one to act on (activities/await-provider.ts), and no
   * workflow task runs between its reads. A wake ends it first: the activity is cancelled and
   * its cancel waited for. A result it still returned is kept (an `overdue` must escalate now,
   * not a cycle later); null says the wake ended it with nothing to act on.
   */
  async function readUntilChange(f: TaskFacts): Promise<PollResult | null> {
    const reads = new CancellationScope();
    const read = reads.run(() => waitsOn(f)(taskId, { statusVersion: f.statusVersion, attemptState: f.attemptState }));
    const waits = new CancellationScope();
    const wake = waits.run(() => condition(() => woken));
    try {
      const first = await Promise.race([read, wake.then(() => null)]);
      if (first !== null) return first;
      reads.cancel();
      // Cancelled in its backoff, or it finished mid-read: its result, if it has one, is acted on.
      return await read.catch((err: unknown) => {
        // A failure the read would not have retried still stops the run, as it did before the wake;
        // any other (the cancel, ProviderUnchanged, a fence) leaves it to the inbox step that follows.
        if (failedForGood(err)) throw err;
        return null;
      });
    } finally {
      waits.cancel();
    }
  }

  const publish = (f: TaskFacts) => {
    const key = `${f.status}|${f.attemptState}|${f.needsAttention}`;
    if (key === published) return;
    published = key;
    upsertSearchAttributes([
      { key: SA_TASK_STATUS, value: f.status },
      { key: SA_TENANT_ID, value: f.tenantId },
      { key: SA_PROVIDER, value: f.provider },
      { key: SA_ATTEMPT_STATE, value: f.attemptState ?? 'NONE' },
      { key: SA_NEEDS_ATTENTION, value: f.needsAttention },
    ]);
  };

  /**
   * Waits on the provider: sleep until a wake signal or the poll is due (no wait when a wake
   * came already), then apply the inbox. `f` is what the step before read, its poll time too.
   */
  async function awaitProvider(f: TaskFacts): Promise<TaskFacts> {
    if (!lean) return awaitProviderApplyingFirst(f);
    if (!woken && !(await condition(() => woken, f.pollInMs ?? DEFAULT_POLL_MS))) {
      // Patched: older runs poll once per wait cycle, each read a workflow task of its own.
      const polled = patched('waits-in-retries') ? await readUntilChange(f) : await readsOn(f)(taskId);
      if (polled?.result === 'overdue') return escalateTask(taskId, 'submit outcome unknown past its deadline');
      if (polled?.result === 'absent') return getTaskFacts(taskId);
    }
    woken = false;
    return applyInbox(taskId);
  }

  /** Runs before 'lean-steps': apply the inbox, then sleep until a wake signal or the poll is due. */
  async function awaitProviderApplyingFirst(f: TaskFacts): Promise<TaskFacts> {
    woken = false;
    const applied = await applyInbox(taskId);
    if (applied.statusVersion !== f.statusVersion || !WAITING.includes(applied.status)) return applied;
    const signalled = await condition(() => woken, applied.pollInMs ?? DEFAULT_POLL_MS);
    if (!signalled) {
      // Patched: older runs polled on the generation queue (docs/workflow-versioning.md).
      const reads = patched('per-provider-poll-queues') ? readsOn(applied) : pollProvider;
      const { result } = await reads(taskId);
      if (result === 'overdue') return escalateTask(taskId, 'submit outcome unknown past its deadline');
      if (result === 'absent') return getTaskFacts(taskId);
    }
    return applyInbox(taskId);
  }

  /**
   * MANUAL_REVIEW keeps applying provider evidence (docs/design.md §5): a late callback wakes us and is
   * applied like any other; while the attempt has a job or a lookup to ask, the provider is also
   * polled now and then. A job found binds the attempt and the task moves on; an operator's
   * resolution wakes us too.
   */
  async function awaitEvidenceInReview(f: TaskFacts): Promise<TaskFacts> {
    if (!lean) return awaitEvidenceInReviewApplyingFirst(f);
    if (!woken) {
      if (f.attemptState !== null && OPEN_ATTEMPT.includes(f.attemptState)) {
        if (!(await condition(() => woken, REVIEW_POLL_MS))) await readsOn(f)(taskId);
      } else {
        await condition(() => woken);
      }
    }
    woken = false;
    return applyInbox(taskId);
  }

  /** Runs before 'lean-steps': apply the inbox first, then wait as above. */
  async function awaitEvidenceInReviewApplyingFirst(f: TaskFacts): Promise<TaskFacts> {
    woken = false;
    const applied = await applyInbox(taskId);
    if (applied.statusVersion !== f.statusVersion || applied.status !== 'MANUAL_REVIEW') return applied;
    if (applied.attemptState !== null && OPEN_ATTEMPT.includes(applied.attemptState)) {
      if (!(await condition(() => woken, REVIEW_POLL_MS))) await readsOn(applied)(taskId);
    } else {
      await condition(() => woken);
    }
    return applyInbox(taskId);
  }

  let cancelSentAtVersion = -1;
  async function step(f: TaskFacts): Promise<TaskFacts> {
    switch (f.status) {
      case 'QUEUED':
        // Patched ('lean-steps'): older runs dispatch and prepare in two steps.
        return lean ? dispatchAndPrepare(taskId) : dispatchTask(taskId);
      case 'DISPATCHING':
        return prepareAttempt(taskId);
      case 'SUBMITTING': {
        // Patched: runs recorded before the slot queue never waited for a grant
        // (docs/workflow-versioning.md). A grant's wake may arrive while the activity runs, so the
        // flag is cleared before it, not after.
        const queued = patched('slot-queue');
        if (queued) woken = false;
        const r = await submitAttempt(taskId);
        if (r.retryInMs !== null) await sleep(r.retryInMs);
        // Waiting for a provider slot: the grant (in Postgres) wakes us; the timer covers a lost wake.
        if (queued && r.waitMs != null) await condition(() => woken, r.waitMs);
        return r.facts;
      }
      case 'CANCEL_REQUESTED':
        if (cancelSentAtVersion !== f.statusVersion) {
          cancelSentAtVersion = f.statusVersion;
          await requestProviderCancel(taskId);
        }
        return awaitProvider(f);
      case 'SUBMITTED':
      case 'RUNNING':
      case 'SUBMIT_UNKNOWN':
        return awaitProvider(f);
      case 'PROVIDER_SUCCEEDED':
      case 'FETCHING_OUTPUT':
      case 'OUTPUT_AT_RISK':
        return rescueOutput(taskId);
      case 'PROCESSING_MEDIA':
        return processMedia(taskId);
      case 'MANUAL_REVIEW':
        // Patched: older runs only waited for an operator (docs/workflow-versioning.md).
        if (patched('review-applies-inbox')) return awaitEvidenceInReview(f);
        // An operator resolves it; their action wakes us and we re-read the facts.
        woken = false;
        await condition(() => woken);
        return getTaskFacts(taskId);
      case 'SUCCEEDED':
      case 'FAILED':
      case 'CANCELLED':
        return f;
    }
  }

  current = await getTaskFacts(taskId);
  let steps = 0;
  while (!isTerminal(current.status)) {
    publish(current);
    try {
      current = await step(current);
    } catch (err) {
      // A step that can never succeed (bad URL, broken invariant) parks the task for a person.
      const cause = err instanceof ActivityFailure ? err.cause : undefined;
      if (!(cause instanceof ApplicationFailure) || cause.type === FailureType.NotFound) throw err;
      log.warn('step failed for good; escalating', { taskId, status: current.status, type: cause.type });
      current = await escalateTask(taskId, `${cause.type}: ${cause.message}`);
    }
    steps += 1;
    if (!isTerminal(current.status) && (steps >= stepsPerRun || workflowInfo().continueAsNewSuggested)) {
      await condition(allHandlersFinished);
      await continueAsNew<typeof generationWorkflow>(input.stepsPerRun === undefined ? { taskId } : { taskId, stepsPerRun });
    }
  }
  publish(current);
  await condition(allHandlersFinished);
  return { taskId, status: current.status };
}
