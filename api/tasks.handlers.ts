// HTTP ↔ task service. Requests are parsed with their route contracts' schemas
// (api/tasks.routes.ts); every error is a problem+json.
import type { Request, Response } from 'express';
import { acquireFence, FenceRejectedError } from '../db/fence';
import type { ApiContext } from './context';
import { tenantOf } from './auth';
import { HttpProblem, isDatabaseUnavailable, problems, zodFieldErrors } from './problem';
import { ModePausedError } from '../db/modes';
import { S3ServiceException } from '@aws-sdk/client-s3';
import { deleteTaskOutput } from '../storage/output-lifecycle';
import { deletedTaskOutput } from './tasks.schemas';
import { cancelTask, createTask, getTaskDetail, listTasks } from './tasks.service';
import { presentTask, presentTaskSummary } from './tasks.present';
import { taskRoutes } from './tasks.routes';

async function fenceToken(ctx: ApiContext) {
  try {
    return (await acquireFence(ctx.db, ctx.settings.fenceScope, ctx.settings.region)).token;
  } catch (err) {
    if (err instanceof FenceRejectedError) throw problems.unavailable(err.message, 30);
    throw err;
  }
}

function parseTaskId(req: Request, params = taskRoutes.get.request.params): string {
  const parsed = params.safeParse(req.params);
  // A malformed id names no task of this tenant: 404, like any other unknown id.
  if (!parsed.success) throw problems.notFound('task');
  return parsed.data.id;
}

/**
 * vidorch_tasks_created_total's outcome for a create the handler refused or could not commit: a
 * mode, the region, the outbox backlog, a moved fence or an unreachable database is `unavailable`
 * (the 503s of api/problem.ts problemFor), so a dashboard sees what is shed. A problem the
 * handler raised is classed by its status first: its message may hold the client's own text,
 * which must not read as a database error.
 */
function refusedOutcome(err: unknown): string {
  if (err instanceof HttpProblem) {
    if (err.status === 400) return 'invalid';
    if (err.status === 402) return err.code === 'budget-exceeded' ? 'over_budget' : 'insufficient_credits';
    if (err.status === 422) return 'conflict';
    if (err.status === 503) return 'unavailable';
    return 'rejected';
  }
  if (err instanceof FenceRejectedError || err instanceof ModePausedError || isDatabaseUnavailable(err)) return 'unavailable';
  return 'error';
}

export function taskHandlers(ctx: ApiContext) {
  /**
   * Parses a create, checks the admission and commits it; a refusal throws (refusedOutcome classes
   * it). The outcome, and the fence token it was committed under (the fast path's mark holds it).
   */
  async function admit(req: Request, tenantId: string, keyId: string) {
    const { request } = taskRoutes.create;
    const rawKey = req.get('idempotency-key');
    if (rawKey === undefined) throw problems.missingHeader('Idempotency-Key');
    const key = request.headers.shape['Idempotency-Key'].safeParse(rawKey);
    if (!key.success) throw problems.validation(zodFieldErrors(key.error, 'header:Idempotency-Key'));
    const body = request.body.schema.safeParse(req.body ?? {});
    if (!body.success) throw problems.validation(zodFieldErrors(body.error));
    // The admission check's fence state (cached ≤ 1 s) gives the token; the transaction re-checks
    // region, epoch and mode under a share lock, so a stale cache can only cause a 503, never a bad write.
    const fence = await ctx.admission.assertCanCreate();
    const token = { scope: ctx.settings.fenceScope, region: ctx.settings.region, epoch: fence.epoch };
    const outcome = await createTask(ctx.db, token, {
      tenantId,
      apiKeyId: keyId,
      idempotencyKey: key.data,
      body: body.data,
      defaultDeadlineSeconds: ctx.settings.defaultDeadlineSeconds,
      webhookAllowPrivate: ctx.settings.webhooks.allowPrivate,
      webhookMaxOrigins: ctx.settings.webhooks.maxTaskUrlOrigins,
      heldRoutes: await ctx.admission.heldRoutes(),
    });
    return { outcome, token };
  }

  return {
    async create(req: Request, res: Response) {
      const { tenantId, keyId } = tenantOf(req);
      let admitted;
      try {
        admitted = await admit(req, tenantId, keyId);
      } catch (err) {
        ctx.metrics.tasksCreated.inc({ outcome: refusedOutcome(err) });
        throw err;
      }
      const { outcome, token } = admitted;
      if (outcome.kind === 'replayed') {
        ctx.metrics.tasksCreated.inc({ outcome: 'replayed' });
        res.setHeader('Idempotent-Replayed', 'true');
        res.status(202).json({ task_id: outcome.task.task_id, status: 'QUEUED' });
        return;
      }
      ctx.metrics.tasksCreated.inc({ outcome: 'created' });
      for (const c of outcome.crossings)
        ctx.metrics.budgetThresholds.inc({ scope: c.budget.budget.key_id === null ? 'tenant' : 'key', threshold: String(c.threshold) });
      const { task } = outcome;
      // Fast path: start the workflow now (awaited within a short budget, or in the background,
      // API_FAST_PATH_MODE). If Temporal is slow or down the task is still accepted; the outbox
      // relay starts it later.
      await ctx.fastPath.afterCommit({ taskId: task.task_id, tenantId, provider: task.provider, priority: task.priority }, outcome.outboxEventId, token);
      res.status(202).location(`/v1/tasks/${task.task_id}`).json({ task_id: task.task_id, status: task.status });
    },

    async get(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const detail = await getTaskDetail(ctx.db, tenantId, parseTaskId(req));
      if (!detail) throw problems.notFound('task');
      res.json(await presentTask(detail, ctx, ctx.settings.presignTtlSeconds));
    },

    async list(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const q = taskRoutes.list.request.query.safeParse(req.query);
      if (!q.success) throw problems.validation(zodFieldErrors(q.error, 'query'));
      const page = await listTasks(ctx.db, tenantId, {
        limit: q.data.limit,
        ...(q.data.status ? { status: q.data.status } : {}),
        ...(q.data.cursor ? { cursor: q.data.cursor } : {}),
      });
      res.json({ tasks: page.tasks.map(presentTaskSummary), next_cursor: page.next_cursor });
    },

    async cancel(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const taskId = parseTaskId(req, taskRoutes.cancel.request.params);
      await ctx.admission.assertCanWrite();
      const token = await fenceToken(ctx);
      const task = await cancelTask(ctx.db, token, tenantId, taskId);
      await ctx.facade.wakeTask(taskId);
      res.status(202).json({ task_id: task.task_id, status: task.status, cancel_requested: task.cancel_requested_at !== null });
    },

    async deleteOutput(req: Request, res: Response) {
      const { tenantId } = tenantOf(req);
      const taskId = parseTaskId(req);
      await ctx.admission.assertCanWrite();
      const token = await fenceToken(ctx);
      let outcome;
      try {
        outcome = await deleteTaskOutput(ctx.db, ctx, token, {
          taskId,
          tenantId,
          actor: `tenant:${tenantId}`,
          reason: 'DELETE /v1/tasks/:id/output',
          now: new Date(),
        });
      } catch (err) {
        if (err instanceof FenceRejectedError) throw problems.unavailable(err.message, 30);
        if (err instanceof S3ServiceException || (err as { code?: string }).code === 'ECONNREFUSED' || (err as Error).name === 'TimeoutError') {
          // Storage did not take the delete: nothing was recorded; the same request may be retried.
          ctx.logger.warn({ err, taskId }, 'output delete: storage unavailable');
          throw problems.unavailable('the output storage is unreachable; retry later', 5);
        }
        throw err;
      }
      if (outcome.kind === 'no-task') throw problems.notFound('task');
      if (outcome.kind === 'no-output') throw problems.conflict(outcome.reason);
      res.status(200).json(deletedTaskOutput.parse({ task_id: taskId, deleted_at: outcome.deletedAt.toISOString(), objects_deleted: outcome.keys.length }));
    },
  };
}
