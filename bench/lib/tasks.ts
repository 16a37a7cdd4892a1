// Creating a benchmark's tasks through the typed client (api/client), and waiting for them to
// finish, with a progress line whenever the count moves.
import type { CreateTaskRequest, VidorchClient } from '../../api/client';
import { sleep } from '../../harness';
import type { Reporter } from './report';
import type { BenchWorld } from './world';

export type CreatedTask = { readonly status: 202; readonly taskId: string } | { readonly status: number; readonly taskId: null; readonly problem: string };

/** POST /v1/tasks: 202 and the task id, or the status and the problem's text. */
export async function createTask(client: VidorchClient, key: string, body: CreateTaskRequest): Promise<CreatedTask> {
  const { data, error, response } = await client.POST('/v1/tasks', { params: { header: { 'Idempotency-Key': key } }, body });
  if (response.status === 202 && data) return { status: 202, taskId: data.task_id };
  return { status: response.status, taskId: null, problem: JSON.stringify(error ?? null).slice(0, 300) };
}

/** Like createTask(), but anything other than a 202 throws (setup phases: every task must exist). */
export async function createTaskOrThrow(client: VidorchClient, key: string, body: CreateTaskRequest): Promise<string> {
  const r = await createTask(client, key, body);
  if (r.taskId === null) throw new Error(`create answered ${r.status}: ${r.problem}`);
  return r.taskId;
}

/**
 * Polls Postgres until every task in `ids` is terminal (or parked in MANUAL_REVIEW), or until
 * `timeoutS` passes (then says so and returns). `t0` is where the progress line's clock starts.
 */
export async function waitForTerminal(
  bw: BenchWorld,
  ids: readonly string[],
  opts: { readonly timeoutS: number; readonly tag: string; readonly rep: Reporter; readonly t0?: number; readonly pollMs?: number },
): Promise<void> {
  const deadline = Date.now() + opts.timeoutS * 1000;
  const t0 = opts.t0 ?? performance.now();
  let last = -1;
  for (;;) {
    const { rows } = await bw.world.db.pool.query<{ done: number; ok: number }>(
      `SELECT count(*) FILTER (WHERE terminal_at IS NOT NULL OR status = 'MANUAL_REVIEW')::int AS done,
              count(*) FILTER (WHERE status = 'SUCCEEDED')::int AS ok
       FROM generation_task WHERE task_id = ANY($1::uuid[])`,
      [ids],
    );
    const done = rows[0]?.done ?? 0;
    if (done !== last)
      opts.rep.log(
        `[${opts.tag}] ${((performance.now() - t0) / 1000).toFixed(0).padStart(3)}s  ${done}/${ids.length} finished (${rows[0]?.ok ?? 0} SUCCEEDED)`,
      );
    last = done;
    if (done >= ids.length) return;
    if (Date.now() > deadline) {
      opts.rep.log(`${opts.tag}: gave up after ${opts.timeoutS} s with ${done}/${ids.length} finished`);
      return;
    }
    await sleep(opts.pollMs ?? 500);
  }
}
