// What task activities need from the outside world. Built once per worker process and passed
// to createTaskActivities(); tests pass real test databases and servers.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Db } from '../db/client';
import { FenceRejectedError, acquireFence, type FenceToken } from '../db/fence';
import { InvalidTransitionError } from '../db/tasks';
import { FailureType } from '../domain/errors';
import type { ProviderAdapter } from '../providers/types';
import type { ObjectStorage } from '../storage/s3';

export interface Clock {
  now(): Date;
}
export const systemClock: Clock = { now: () => new Date() };

export interface TaskActivityDeps {
  readonly db: Db;
  readonly fence: { readonly scope: string; readonly region: string };
  readonly clock: Clock;
  readonly providers: Readonly<Record<string, ProviderAdapter>>;
  readonly storage: ObjectStorage;
  readonly settings: {
    /** Base of callback URLs handed to providers. */
    readonly publicBaseUrl: string;
    readonly pollInitialMs: number;
    readonly pollMaxMs: number;
    readonly maxSubmitAttempts: number;
    /** A reconciliation miss proves absence only this long after the submit began. */
    readonly unknownProofDelayMs: number;
    /** An unknown submit outcome not found by then goes to MANUAL_REVIEW. */
    readonly unknownOutcomeDeadlineMs: number;
    readonly outputAllowPrivate: boolean;
    readonly outputMaxBytes: number;
    readonly outputHosts: Readonly<Record<string, readonly string[]>>;
  };
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
export function toActivityFailure(err: unknown): unknown {
  if (err instanceof FenceRejectedError) {
    return ApplicationFailure.create({ type: FailureType.FenceRejected, message: err.message, cause: err });
  }
  if (err instanceof InvalidTransitionError) {
    return ApplicationFailure.create({
      type: FailureType.InvalidState,
      message: err.message,
      nonRetryable: true,
      cause: err,
    });
  }
  return err;
}

/** Runs one unit of work under a fence token read at its start. */
export async function fenced<T>(deps: TaskActivityDeps, work: (token: FenceToken) => Promise<T>): Promise<T> {
  try {
    const { token } = await acquireFence(deps.db, deps.fence.scope, deps.fence.region);
    return await work(token);
  } catch (err) {
    throw toActivityFailure(err);
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
