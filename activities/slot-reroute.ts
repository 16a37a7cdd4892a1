// A waiting attempt that was never sent may move to another provider of its model family that
// has a free slot nobody waits for (docs/providers.md "The slot queue"). Never after an unknown
// outcome: a task with any attempt ever SUBMIT_UNKNOWN stays where it is (docs/routing.md).
import { and, eq, isNotNull } from 'drizzle-orm';
import { casAttempt } from '../db/attempts';
import type { Tx } from '../db/client';
import { generationTask, providerControl, taskAttempt, type AttemptRow, type TaskRow } from '../db/schema';
import { hasFreeSlot, leaveQueue } from '../db/slot-queue';
import { findModel, routeRefusal, type ProviderRoute } from '../domain/catalog';
import type { TaskActivityDeps } from './deps';

/**
 * In the claim transaction, after the attempt joined its provider's queue: moves the PREPARED
 * attempt to the first other route of its family (by the catalog's priority) whose provider has a
 * free slot and no queue, and leaves the old queue. Returns the new route, or null.
 */
export async function rerouteWaiting(deps: TaskActivityDeps, tx: Tx, task: TaskRow, attempt: AttemptRow): Promise<ProviderRoute | null> {
  const req = task.request;
  const entry = findModel(req.model);
  if (!entry || entry.routes.length < 2) return null;
  const [unknown] = await tx
    .select({ id: taskAttempt.attempt_id })
    .from(taskAttempt)
    .where(and(eq(taskAttempt.task_id, task.task_id), isNotNull(taskAttempt.unknown_since)))
    .limit(1);
  if (unknown) return null;
  const candidates = [...entry.routes]
    .sort((a, b) => a.priority - b.priority)
    .filter((r) => r.provider !== attempt.provider && deps.providers[r.provider] && routeRefusal(r, req) === null);
  for (const route of candidates) {
    const [control] = await tx.select().from(providerControl).where(eq(providerControl.provider, route.provider));
    if (control?.breaker_force === 'open') continue;
    const limit = control?.max_in_flight ?? deps.providers[route.provider]!.capabilities.maxConcurrency ?? Number.POSITIVE_INFINITY;
    if (!(await hasFreeSlot(tx, route.provider, limit))) continue;
    if (!(await casAttempt(tx, attempt.attempt_id, { from: 'PREPARED' }, { provider: route.provider, provider_model: route.model }))) return null;
    await tx.update(generationTask).set({ provider: route.provider, provider_model: route.model }).where(eq(generationTask.task_id, task.task_id));
    await leaveQueue(tx, attempt.attempt_id);
    return route;
  }
  return null;
}
