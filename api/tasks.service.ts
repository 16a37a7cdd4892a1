// Task admission and reads against the fact source. Creation is one transaction of one statement
// (db/task-admission.ts): task row (unique tenant + Idempotency-Key), outbox row, first
// transition, credit reservation.
import { capWaitOf } from '../db/create-cap';
import { taskSlotWait } from '../db/slot-queue';
import { createHash, randomUUID } from 'node:crypto';
import { and, asc, desc, eq, lt, or } from 'drizzle-orm';
import type { Db, DbOrTx, Tx } from '../db/client';
import { FenceRejectedError, readFence, type FenceToken } from '../db/fence';
import { holdFenceForFacts, ModePausedError } from '../db/modes';
import { asset, creditLedger, generationTask, taskAttempt, taskTransition, type TaskRow } from '../db/schema';
import { casTaskStatus, lockTask } from '../db/tasks';
import { admitTask, type TaskAdmission } from '../db/task-admission';
import { taskUrlOrigin, taskUrlOriginsInUse, taskUrlSigningEndpoint } from '../db/webhooks';
import { webhookUrlProblem } from '../net/webhook-url';
import { finishTask } from '../db/settlement';
import { canonicalJson } from '../domain/canonical-json';
import { heldRoutes } from '../db/catalog-routes';
import { findModel, priceFor, primaryRoute, requestRefusal, withoutHeldRoutes, type HeldRoutes, type ModelEntry, type ProviderRoute } from '../domain/catalog';
import { minMoney } from '../domain/money';
import { citedQuote } from '../db/quotes';
import { exceededBy, holdBudgets, recordCrossings, remainingOf, type ThresholdCrossing } from '../db/budgets';
import type { TaskStatus } from '../domain/states';
import { decide } from '../domain/task-machine';
import type { CreateTaskBody, QuoteRequestBody } from './tasks.schemas';
import { HttpProblem, problems } from './problem';

export type CreateOutcome =
  { kind: 'created'; task: TaskRow; outboxEventId: string; crossings: readonly ThresholdCrossing[] } | { kind: 'replayed'; task: TaskRow };

class IdempotencyRace extends Error {}

export const requestHash = (body: QuoteRequestBody | CreateTaskBody): string => createHash('sha256').update(canonicalJson(body)).digest('hex');

export async function findByKey(db: DbOrTx, tenantId: string, key: string): Promise<TaskRow | null> {
  const [row] = await db
    .select()
    .from(generationTask)
    .where(and(eq(generationTask.tenant_id, tenantId), eq(generationTask.idempotency_key, key)));
  return row ?? null;
}

export function replayOrConflict(existing: TaskRow, hash: string): CreateOutcome {
  if (existing.request_hash !== hash) throw problems.idempotencyMismatch();
  return { kind: 'replayed', task: existing };
}

/** What a create would reserve and where it would start (the static first choice, until the router runs). */
export interface CreatePlan {
  readonly entry: ModelEntry;
  readonly first: ProviderRoute;
  /** The catalog price of the request: what the create reserves (at most a cited quote's amount). */
  readonly cost: string;
}

/** The checks of a create that need no transaction (api/tasks.service.ts createTask, api/quotes.service.ts). */
export interface CreateRules {
  readonly webhookAllowPrivate?: boolean;
  /** WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT: needed when the body names a webhook_url. */
  readonly webhookMaxOrigins?: number | undefined;
  /** The routes held off (the API's cached read, api/admission.ts); read here when not given. */
  readonly heldRoutes?: HeldRoutes;
}

/**
 * Validates a create's body against the catalog and the tenant's webhook rules, and prices it:
 * the one validation a create and a quote share. Throws the 400 problem naming the field.
 */
export async function planCreate(db: Db, tenantId: string, body: QuoteRequestBody, rules: CreateRules): Promise<CreatePlan> {
  const held = rules.heldRoutes ?? (await heldRoutes(db));
  const entry = await admissibleModel(db, tenantId, body, { allowPrivate: rules.webhookAllowPrivate ?? false, maxOrigins: rules.webhookMaxOrigins }, held);
  return { entry, first: primaryRoute(entry), cost: priceFor(entry, body.resolution, body.duration_seconds) };
}

/** The hash a quote keeps of the body it priced: a create's body without its quote_id. */
export const quotedRequestHash = (body: CreateTaskBody): string => {
  const { quote_id: _cited, ...quoted } = body;
  return requestHash(quoted);
};

/** The amount of the quote a create cites; a 400 naming quote_id when it cannot be cited. */
async function quotedAmount(db: Db, tenantId: string, body: CreateTaskBody & { quote_id: string }): Promise<string> {
  const cited = await citedQuote(db, tenantId, body.quote_id);
  const refuse = (message: string) => problems.validation([{ field: 'quote_id', message }]);
  // Another tenant's quote is as unknown as one never made.
  if (cited.kind === 'unknown') throw refuse('no such quote: POST /v1/quotes first');
  if (cited.kind === 'expired') throw refuse(`the quote expired at ${cited.quote.expires_at.toISOString()}: ask for a new one`);
  if (cited.quote.request_hash !== quotedRequestHash(body)) throw refuse('the quote priced another request: cite it with the body it was given');
  return cited.quote.amount;
}

export async function createTask(
  db: Db,
  token: FenceToken,
  args: CreateRules & {
    tenantId: string;
    /** The API key that asked (usage per key, db/usage.ts; its budget applies besides the tenant's); absent for creates made outside the API. */
    apiKeyId?: string | null;
    idempotencyKey: string;
    body: CreateTaskBody;
    /** The deadline of a request that names none (TASK_DEADLINE_SECONDS). */
    defaultDeadlineSeconds: number;
  },
): Promise<CreateOutcome> {
  const { tenantId, idempotencyKey, body } = args;
  const hash = requestHash(body);
  let plan: CreatePlan;
  let cost: string;
  try {
    plan = await planCreate(db, tenantId, body, args);
    cost = body.quote_id === undefined ? plan.cost : minMoney(plan.cost, await quotedAmount(db, tenantId, { ...body, quote_id: body.quote_id }));
  } catch (err) {
    // A refusal may rest on what changed since a create with this key committed (its webhook
    // endpoint disabled, the catalog changed, its quote expired): the retry of a create whose
    // answer was lost is its replay (or 422 for another body), never a refusal that invites a
    // second paid task under a new key. Looked up only on a refusal: an admitted create keeps its
    // one round trip.
    if (!(err instanceof HttpProblem)) throw err;
    const existing = await findByKey(db, tenantId, idempotencyKey);
    if (existing) return replayOrConflict(existing, hash);
    throw err;
  }
  const first = plan.first;
  // Until the router has chosen (at the first attempt), the task names the static first choice.
  // No lookup before the transaction: the unique (tenant, key) insert below finds replays and
  // concurrent duplicates in one round trip.
  const taskId = randomUUID();
  const outboxEventId = randomUUID();
  try {
    const admitted = await db.transaction(async (tx) => {
      const r = await admitInTransaction(tx, token, {
        taskId,
        outboxEventId,
        tenantId,
        apiKeyId: args.apiKeyId ?? null,
        projectId: body.project_id ?? tenantId,
        idempotencyKey,
        requestHash: hash,
        request: body,
        provider: first.provider,
        providerModel: first.model,
        priority: body.priority,
        cost,
        // On the database's clock, like created_at.
        deadlineSeconds: body.deadline_seconds ?? args.defaultDeadlineSeconds,
        actor: `tenant:${tenantId}`,
      });
      if (r === 'key-taken') throw new IdempotencyRace();
      return r;
    });
    return { kind: 'created', task: admitted.task, crossings: admitted.crossings, outboxEventId };
  } catch (err) {
    if (!(err instanceof IdempotencyRace)) throw err;
    // A concurrent request with the same key committed first: answer as its replay.
    const winner = await findByKey(db, tenantId, idempotencyKey);
    if (!winner) throw err;
    return replayOrConflict(winner, hash);
  }
}

/**
 * The create's writes in the caller's transaction (the single create's, or a batch chunk's
 * savepoint): the task and the budget thresholds it crossed, or 'key-taken' when (tenant, key)
 * exists (nothing written). Any other refusal throws (402 over a budget or the credits), and the
 * caller rolls back what was written.
 */
export async function admitInTransaction(
  tx: Tx,
  token: FenceToken,
  a: TaskAdmission,
): Promise<{ task: TaskRow; crossings: readonly ThresholdCrossing[] } | 'key-taken'> {
  // The budgets that apply, locked until COMMIT and counted under the lock: creates of one
  // tenant or key pass this point one at a time, so together they never exceed a limit.
  const budgets = await holdBudgets(tx, a.tenantId, a.apiKeyId ?? null);
  const over = exceededBy(budgets, a.cost);
  if (over) {
    throw problems.budgetExceeded({
      scope: over.budget.key_id === null ? 'tenant' : 'key',
      limit: over.limit,
      remaining: remainingOf(over),
      needed: a.cost,
      period: over.budget.period,
      periodEnd: over.periodEnd,
    });
  }
  // One statement for every write (db/task-admission.ts).
  const r = await admitTask(tx, token, a);
  switch (r.kind) {
    case 'admitted':
      return { task: r.task, crossings: await recordCrossings(tx, budgets, a.cost) };
    case 'fence-rejected':
      throw new FenceRejectedError(token, await readFence(tx, token.scope));
    case 'mode-forbids':
      // Narrowed since the admission's cached read: answered as the admission would (503, the mode).
      throw new ModePausedError(r.mode, 'create');
    case 'key-taken':
      return 'key-taken';
    case 'reserve-exists':
      throw new Error(`reserve for task ${a.taskId} already exists`);
    case 'insufficient-credits':
      throw problems.insufficientCredits(a.cost, r.available);
  }
}

/**
 * The catalog entry a create asks for, once its webhook URL and every limit of the model's
 * providers are checked; throws the 400 problem naming the field otherwise.
 */
export async function admissibleModel(db: Db, tenantId: string, body: QuoteRequestBody, webhook: TaskUrlRules, held: HeldRoutes): Promise<ModelEntry> {
  if (body.webhook_url !== undefined) await checkTaskWebhookUrl(db, tenantId, body.webhook_url, webhook);
  const listed = findModel(body.model);
  if (!listed) throw problems.validation([{ field: 'model', message: `unknown model ${body.model}` }]);
  // A route held after its provider changed the model's inputs in a way that breaks what we send
  // is not offered until an operator reviews it (docs/decisions/0072): a family goes to its other
  // routes, a model with none left is refused before any credit is reserved.
  const entry = withoutHeldRoutes(listed, held);
  if (entry.routes.length === 0) {
    throw problems.validation([
      { field: 'model', message: `${body.model} is unavailable: its provider changed the model's inputs and an operator is reviewing the change` },
    ]);
  }
  const offered = entry.routes.map((r) => r.provider);
  // For a pinned model `provider` must name its provider; for a family it is the tenant's
  // preference among the family's providers (the router weighs it, health still decides).
  if (body.provider && !offered.includes(body.provider)) {
    throw problems.validation([{ field: 'provider', message: `model ${body.model} is served by ${offered.join(', ')}` }]);
  }
  // Every limit of the model's providers (resolution, duration, image, prompt length) before any
  // credit is reserved: a request no provider can take never becomes a task.
  const refusal = requestRefusal(entry, body);
  if (refusal) throw problems.validation([{ field: refusal.field, message: refusal.message }]);
  return entry;
}

export interface TaskUrlRules {
  readonly allowPrivate: boolean;
  readonly maxOrigins: number | undefined;
}

/**
 * A task's own webhook_url follows the endpoints' URL rule, and is signed with the secret of the
 * tenant's oldest enabled endpoint (docs/decisions/0018-tenant-webhooks.md): without one there
 * is nothing to sign with, so the create is refused. Its origin is a delivery target of its own:
 * a tenant has at most `maxOrigins` of them in use (docs/webhooks.md "A task's own URL"), so a
 * create naming one more is refused too. Checked before the create's transaction, not under a
 * lock: creates racing each other may pass the cap by as many as race.
 */
async function checkTaskWebhookUrl(db: Db, tenantId: string, url: string, rules: TaskUrlRules): Promise<void> {
  const problem = webhookUrlProblem(url, rules.allowPrivate);
  if (problem) throw problems.validation([{ field: 'webhook_url', message: problem }]);
  if (!(await taskUrlSigningEndpoint(db, tenantId))) {
    throw problems.validation([
      { field: 'webhook_url', message: "needs an enabled webhook endpoint (its secret signs the task's webhooks): POST /v1/webhook-endpoints first" },
    ]);
  }
  if (rules.maxOrigins === undefined) throw new Error('createTask: a body with webhook_url needs webhookMaxOrigins (WEBHOOK_MAX_TASK_URL_ORIGINS_PER_TENANT)');
  const origin = taskUrlOrigin(url);
  const used = await taskUrlOriginsInUse(db, tenantId, origin, rules.maxOrigins);
  if (!used.inUse && used.count >= rules.maxOrigins) {
    throw problems.validation([
      {
        field: 'webhook_url',
        message: `names a new origin (${origin}) while ${rules.maxOrigins} task webhook origins are in use (open tasks' and pending deliveries'); at most ${rules.maxOrigins}: use one of those, or an endpoint`,
      },
    ]);
  }
}

export async function getTaskDetail(db: Db, tenantId: string, taskId: string) {
  const [task] = await db
    .select()
    .from(generationTask)
    .where(and(eq(generationTask.task_id, taskId), eq(generationTask.tenant_id, tenantId)));
  if (!task) return null;
  const [attempts, transitions, ledger, assets] = await Promise.all([
    db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)).orderBy(asc(taskAttempt.attempt_no)),
    db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(asc(taskTransition.to_version)),
    db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId)).orderBy(asc(creditLedger.created_at)),
    db.select().from(asset).where(eq(asset.task_id, taskId)),
  ]);
  // Only a task about to call its provider can wait for a slot (docs/providers.md "The slot queue"),
  // or for its provider's daily allowance to reset (docs/decisions/0070).
  const slot = task.status === 'SUBMITTING' ? await taskSlotWait(db, taskId, new Date()) : null;
  const active = attempts.find((a) => a.attempt_id === task.active_attempt_id);
  const queue = slot ?? (task.status === 'SUBMITTING' && active ? await capWaitOf(db, active) : null);
  return { task, attempts, transitions, ledger, assets, queue };
}

export interface Cursor {
  readonly createdAt: string;
  readonly taskId: string;
}
export const encodeCursor = (c: Cursor): string => Buffer.from(JSON.stringify(c)).toString('base64url');
export function decodeCursor(raw: string): Cursor {
  try {
    const c = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')) as Cursor;
    if (typeof c.createdAt !== 'string' || typeof c.taskId !== 'string' || Number.isNaN(Date.parse(c.createdAt))) throw new Error();
    if (!/^[0-9a-f-]{36}$/i.test(c.taskId)) throw new Error();
    return c;
  } catch {
    throw problems.validation([{ field: 'cursor', message: 'not a cursor returned by this API' }]);
  }
}

export async function listTasks(db: Db, tenantId: string, q: { status?: TaskStatus; limit: number; cursor?: string }) {
  const after = q.cursor ? decodeCursor(q.cursor) : null;
  const rows = await db
    .select()
    .from(generationTask)
    .where(
      and(
        eq(generationTask.tenant_id, tenantId),
        q.status ? eq(generationTask.status, q.status) : undefined,
        after
          ? or(
              lt(generationTask.created_at, new Date(after.createdAt)),
              and(eq(generationTask.created_at, new Date(after.createdAt)), lt(generationTask.task_id, after.taskId)),
            )
          : undefined,
      ),
    )
    .orderBy(desc(generationTask.created_at), desc(generationTask.task_id))
    .limit(q.limit + 1);
  const page = rows.slice(0, q.limit);
  const last = page[page.length - 1];
  const next = rows.length > q.limit && last ? encodeCursor({ createdAt: last.created_at.toISOString(), taskId: last.task_id }) : null;
  return { tasks: page, next_cursor: next };
}

/**
 * Cancel (docs/design.md §5): before acceptance the task is cancelled here and its credits
 * released; once submitted, a provider cancel is requested and the state machine decides the
 * end. While the submit outcome is unknown the request is recorded and honoured later.
 */
/** `actor` is who asked (default the tenant; `ops task cancel` passes its operator). */
export async function cancelTask(db: Db, token: FenceToken, tenantId: string, taskId: string, actor = `tenant:${tenantId}`): Promise<TaskRow> {
  return db.transaction(async (tx) => {
    // The mode in the writing transaction (ModePausedError: 503 from the API, a refusal from the
    // CLI): the API's admission reads a mode cached up to a second, so a cancel answered after
    // `mode set READ_ONLY` returned would otherwise still settle the task.
    await holdFenceForFacts(tx, token, 'cancel');
    const task = await lockTask(tx, taskId);
    if (!task || task.tenant_id !== tenantId) throw problems.notFound('task');
    const from = task.status;
    const d = decide(from, { type: 'CANCEL' });
    const now = new Date();
    if (d.kind === 'move' && d.to === 'CANCELLED') {
      await finishTask(tx, token, task, { to: 'CANCELLED', charge: '0', sourceEvent: 'api.cancel', actor });
    } else if (d.kind === 'move') {
      await casTaskStatus(tx, token, {
        taskId,
        from,
        expectedVersion: task.status_version,
        to: d.to,
        sourceEvent: 'api.cancel',
        actor,
        attemptId: task.active_attempt_id,
        set: { cancelRequestedAt: task.cancel_requested_at ?? now },
      });
    } else if (['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(from)) {
      throw problems.conflict(`task is already ${from}`);
    } else if (!task.cancel_requested_at) {
      await tx.update(generationTask).set({ cancel_requested_at: now }).where(eq(generationTask.task_id, taskId));
    }
    const [fresh] = await tx.select().from(generationTask).where(eq(generationTask.task_id, taskId));
    return fresh!;
  });
}
