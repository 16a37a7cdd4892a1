// `npm run bench -- temporal-priority`: does the Temporal server in use (the CLI v1.5.1 dev
// server, Temporal 1.29.1, default dynamic config) honour task-queue priority keys? A backlog
// builds on a queue with no worker: `--low` probe workflows at priority key 5 first, then
// `--high` at key 1 (what the facade gives a priority-9 task, temporal/facade.ts). Then one
// worker (two workflow task slots) drains it, and the completion order says who was dispatched
// first. Baseline: the same backlog with no priority (the order it was queued in).
// docs/decisions/0025 reads the answer.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { freePort, startTemporal } from '../harness';
import type { Reporter } from './lib/report';
import { round } from './lib/stats';

export interface TemporalPriorityOptions {
  readonly low: number;
  readonly high: number;
  /** Dynamic config for the dev server (e.g. matching.useNewMatcher=true); none: its defaults. */
  readonly dynamicConfig: Readonly<Record<string, string>>;
}

const quiet = { log: () => undefined, trace: () => undefined, debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

async function drain(client: Client, connection: NativeConnection, workflowBundle: { code: string }, o: TemporalPriorityOptions, withPriority: boolean) {
  const taskQueue = `priority-probe-${withPriority ? 'on' : 'off'}-${Date.now()}`;
  const ids: { id: string; high: boolean }[] = [];
  for (const [high, n] of [
    [false, o.low],
    [true, o.high],
  ] as const) {
    for (let i = 0; i < n; i += 1) {
      const id = `${taskQueue}-${high ? 'high' : 'low'}-${i}`;
      await client.workflow.start('priorityProbe', {
        taskQueue,
        workflowId: id,
        args: [id],
        ...(withPriority ? { priority: { priorityKey: high ? 1 : 5, fairnessKey: high ? 'tenant-c' : 'tenant-a' } } : {}),
      });
      ids.push({ id, high });
    }
  }
  const order: string[] = [];
  const worker = await Worker.create({ connection, taskQueue, workflowBundle, maxConcurrentWorkflowTaskExecutions: 2, maxCachedWorkflows: 0 });
  const running = worker.run();
  await Promise.all(
    ids.map(async ({ id }) => {
      await client.workflow.getHandle(id).result();
      order.push(id);
    }),
  );
  worker.shutdown();
  await running;
  // Close times order the completions exactly (result() may resolve out of order).
  const closed = await Promise.all(ids.map(async ({ id, high }) => ({ high, at: (await client.workflow.getHandle(id).describe()).closeTime?.getTime() ?? 0 })));
  closed.sort((a, b) => a.at - b.at);
  const ranks = closed.map((c, i) => ({ ...c, rank: i }));
  const meanRank = (high: boolean) =>
    ranks.filter((r) => r.high === high).reduce((n, r) => n + r.rank, 0) / Math.max(1, ranks.filter((r) => r.high === high).length);
  const highInFirst = ranks.slice(0, o.high).filter((r) => r.high).length;
  return { meanRankHigh: round(meanRank(true), 1), meanRankLow: round(meanRank(false), 1), highInFirst };
}

export async function runTemporalPriority(o: TemporalPriorityOptions, rep: Reporter): Promise<void> {
  const port = await freePort();
  const temporal = await startTemporal({ port, headless: true, dynamicConfig: o.dynamicConfig });
  try {
    const address = `127.0.0.1:${port}`;
    const clientConnection = await Connection.connect({ address });
    const client = new Client({ connection: clientConnection });
    const connection = await NativeConnection.connect({ address });
    const workflowBundle = await bundleWorkflowCode({
      workflowsPath: path.join(path.dirname(fileURLToPath(import.meta.url)), 'workflows', 'priority-probe.ts'),
      logger: quiet,
    });
    rep.log(`temporal-priority: ${o.low} low then ${o.high} high probes, no priority`);
    const off = await drain(client, connection, workflowBundle, o, false);
    rep.log(`temporal-priority: the same with priority keys 5 and 1`);
    const on = await drain(client, connection, workflowBundle, o, true);
    rep.table(
      `temporal-priority: a backlog of ${o.low} low-priority probes queued before ${o.high} high-priority ones, drained by one worker (dev server ${address}, dynamic config ${JSON.stringify(o.dynamicConfig)})`,
      ['priority keys', `high probes among the first ${o.high} done`, 'mean completion rank, high', 'mean completion rank, low'],
      [
        ['none (baseline)', off.highInFirst, off.meanRankHigh, off.meanRankLow],
        ['1 (high) / 5 (low)', on.highInFirst, on.meanRankHigh, on.meanRankLow],
      ],
    );
    const honoured = on.highInFirst >= Math.ceil(o.high * 0.8);
    rep.goals([
      {
        name: 'the server dispatches by priority key',
        target: `≥ 80 % of the first ${o.high} are high`,
        measured: `${on.highInFirst} of ${o.high} (baseline ${off.highInFirst})`,
        met: honoured,
      },
    ]);
    rep.result({ bench: 'temporal-priority', options: o, off, on, honoured });
    await connection.close();
    await clientConnection.close();
  } finally {
    await temporal.stop();
  }
}
