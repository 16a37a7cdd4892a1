// The lookup of an unknown submit (docs/providers.md "Proof of absence"). The adapter looks for
// the job by our key or by the fingerprint of what we sent inside the attempt's submit window;
// a fingerprint match is then held to our own facts, because a fingerprint names a request, not
// an attempt: a job another of our attempts owns is not ours (so it drops out of the candidates),
// and while another attempt that sent the same input in the window is unresolved, the match
// cannot be told apart ("not found, unproven": the attempt keeps waiting). Several unowned
// candidates are ambiguous: the task parks. None of it ever buys a second job.
import { isDeepStrictEqual } from 'node:util';
import { and, eq, inArray, isNull, lte, ne, sql } from 'drizzle-orm';
import type { Db } from '../db/client';
import { generationTask, taskAttempt, type AttemptRow } from '../db/schema';
import type { LookupQuery, LookupResult, ProviderAdapter, ProviderJob } from '../providers/types';
import { providerInput } from './provider-input';

import type { TaskRequest } from '../domain/task-request';

/** How far the submit window is widened on each side for the provider's clock against ours. */
export const SUBMIT_WINDOW_SKEW_MS = 60_000;

/** The query for an attempt: our key, the exact input and model we sent, the submit window. */
export function lookupQueryFor(attempt: AttemptRow, request: TaskRequest, now: Date, signal?: AbortSignal): LookupQuery {
  const started = (attempt.submit_started_at ?? attempt.created_at).getTime();
  const ended = (attempt.unknown_since ?? now).getTime();
  return {
    token: attempt.attempt_id,
    model: attempt.provider_model,
    input: providerInput(request),
    since: new Date(started - SUBMIT_WINDOW_SKEW_MS),
    until: new Date(Math.max(started, ended) + SUBMIT_WINDOW_SKEW_MS),
    ...(signal ? { signal } : {}),
  };
}

/** Asks the adapter, then holds fingerprint matches to our facts. Throws when the lookup fails. */
export async function lookupUnknownSubmit(db: Db, adapter: ProviderAdapter, attempt: AttemptRow, query: LookupQuery): Promise<LookupResult> {
  const r = await adapter.findByCorrelationToken(query);
  let candidates: readonly ProviderJob[];
  if (r.kind === 'found' && r.by === 'fingerprint') candidates = [r.job];
  else if (r.kind === 'ambiguous') candidates = r.jobs;
  else return r;
  // Twins are read before the bindings: attempt states only move forward, so a twin that binds
  // its job after this read is seen bound by ownedByOthers, and one that bound it before is no twin.
  const twins = await unresolvedTwins(db, attempt, query);
  // A job another of our attempts is bound to was created by that attempt's request, not ours.
  const owned = await ownedByOthers(
    db,
    attempt,
    candidates.map((j) => j.jobId),
  );
  const free = candidates.filter((j) => !owned.has(j.jobId));
  const ids = (jobs: readonly ProviderJob[]) => jobs.map((j) => j.jobId).join(', ');
  const [only] = free;
  if (!only) return { kind: 'not-found-unproven', reason: `every fingerprint match is another attempt's job (${ids(candidates)})` };
  if (free.length > 1) {
    // A twin still sending may bind one of them in a moment: not yet a question for an operator.
    const sending = twins.filter((t) => t.state === 'SUBMITTING').map((t) => t.id);
    if (sending.length > 0)
      return { kind: 'not-found-unproven', reason: `${ids(free)} match, but attempt(s) ${sending.join(', ')} are still submitting the same input` };
    return { kind: 'ambiguous', jobs: free, evidence: `${free.length} jobs not bound to any attempt carry the exact input and model we sent: ${ids(free)}` };
  }
  if (twins.length > 0) {
    return {
      kind: 'not-found-unproven',
      reason: `${only.jobId} matches, but attempt(s) ${twins.map((t) => t.id).join(', ')} sent the same input in the window and are unresolved`,
    };
  }
  return { kind: 'found', job: { ...only, correlationToken: attempt.attempt_id }, by: 'fingerprint' };
}

async function ownedByOthers(db: Db, attempt: AttemptRow, jobIds: readonly string[]): Promise<Set<string>> {
  const rows = await db
    .select({ jobId: taskAttempt.provider_job_id })
    .from(taskAttempt)
    .where(and(eq(taskAttempt.provider, attempt.provider), inArray(taskAttempt.provider_job_id, [...jobIds]), ne(taskAttempt.attempt_id, attempt.attempt_id)));
  return new Set(rows.map((r) => r.jobId).filter((id): id is string => id !== null));
}

/**
 * Our other attempts, not bound to a job, whose submit may have sent the same fingerprint in the
 * window: a twin sent between its submit start and the moment its outcome became unknown (or its
 * submit finished; still sending: open-ended), widened by the skew, and that span must meet [since, until].
 */
async function unresolvedTwins(db: Db, attempt: AttemptRow, q: LookupQuery): Promise<{ id: string; state: string }[]> {
  const rows = await db
    .select({
      id: taskAttempt.attempt_id,
      state: taskAttempt.submit_state,
      request: generationTask.request,
      started: taskAttempt.submit_started_at,
      ended: sql<Date | null>`coalesce(${taskAttempt.unknown_since}, ${taskAttempt.submit_finished_at})`.mapWith(taskAttempt.unknown_since),
    })
    .from(taskAttempt)
    .innerJoin(generationTask, eq(generationTask.task_id, taskAttempt.task_id))
    .where(
      and(
        eq(taskAttempt.provider, attempt.provider),
        inArray(taskAttempt.submit_state, ['SUBMITTING', 'SUBMIT_UNKNOWN']),
        isNull(taskAttempt.provider_job_id),
        ne(taskAttempt.attempt_id, attempt.attempt_id),
        eq(taskAttempt.provider_model, attempt.provider_model),
        lte(taskAttempt.submit_started_at, new Date(q.until.getTime() + SUBMIT_WINDOW_SKEW_MS)),
      ),
    );
  return rows
    .filter((t) => (t.ended === null || t.ended.getTime() + SUBMIT_WINDOW_SKEW_MS >= q.since.getTime()) && isDeepStrictEqual(providerInput(t.request), q.input))
    .map((t) => ({ id: t.id, state: t.state }));
}
