// `ops task inspect <id>`: one task across Postgres (facts, attempts, transitions, ledger,
// assets, inbox) and Temporal (workflow status, the workflow's own view of the facts), with a
// link to the Temporal UI.
import { asc, eq } from 'drizzle-orm';
import type { Db } from '../db/client';
import {
  asset,
  callbackInbox,
  creditLedger,
  generationTask,
  taskAttempt,
  taskTransition,
  type AttemptRow,
  type TaskRow,
  type TaskTransitionRow,
} from '../db/schema';
import type { TaskFacts } from '../domain/facts';
import type { GenerationFacade } from '../temporal/facade';

export interface TaskInspection {
  readonly task: TaskRow;
  readonly attempts: AttemptRow[];
  readonly transitions: TaskTransitionRow[];
  readonly ledger: (typeof creditLedger.$inferSelect)[];
  readonly assets: (typeof asset.$inferSelect)[];
  readonly inbox: (typeof callbackInbox.$inferSelect)[];
  readonly temporal:
    | {
        readonly reachable: true;
        readonly workflowId: string;
        readonly status: string | null;
        readonly runId: string | null;
        readonly historyLength: number | null;
        readonly facts: TaskFacts | null;
      }
    | { readonly reachable: false; readonly workflowId: string; readonly error: string };
  readonly uiUrl: string;
}

const withTimeout = <T>(p: Promise<T>, ms: number): Promise<T> =>
  Promise.race([p, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer in ${ms} ms`)), ms).unref())]);

export async function inspectTask(
  db: Db,
  facade: GenerationFacade,
  taskId: string,
  ui: { baseUrl: string; namespace: string },
): Promise<TaskInspection | null> {
  const [task] = await db.select().from(generationTask).where(eq(generationTask.task_id, taskId));
  if (!task) return null;
  const [attempts, transitions, ledger, assets, inbox] = await Promise.all([
    db.select().from(taskAttempt).where(eq(taskAttempt.task_id, taskId)).orderBy(asc(taskAttempt.attempt_no)),
    db.select().from(taskTransition).where(eq(taskTransition.task_id, taskId)).orderBy(asc(taskTransition.to_version)),
    db.select().from(creditLedger).where(eq(creditLedger.task_id, taskId)).orderBy(asc(creditLedger.created_at)),
    db.select().from(asset).where(eq(asset.task_id, taskId)),
    db.select().from(callbackInbox).where(eq(callbackInbox.task_id, taskId)).orderBy(asc(callbackInbox.received_at)),
  ]);
  const workflowId = facade.workflowIdFor(taskId);
  let temporal: TaskInspection['temporal'];
  try {
    const d = await withTimeout(facade.describeTask(taskId), 5_000);
    const facts = d?.status === 'RUNNING' ? await withTimeout(facade.queryFacts(taskId), 5_000).catch(() => null) : null;
    temporal = { reachable: true, workflowId, status: d?.status ?? null, runId: d?.runId ?? null, historyLength: d?.historyLength ?? null, facts };
  } catch (err) {
    temporal = { reachable: false, workflowId, error: (err as Error).message };
  }
  const uiUrl = `${ui.baseUrl.replace(/\/+$/, '')}/namespaces/${encodeURIComponent(ui.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
  return { task, attempts, transitions, ledger, assets, inbox, temporal, uiUrl };
}
