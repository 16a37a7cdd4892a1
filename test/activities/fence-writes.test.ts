// Every fact write holds the region fence in its own transaction (docs/design.md §3, db/fence.ts):
// a worker whose epoch moved while it was mid-step (a failover bumps it) writes nothing — not
// the media step's SUCCEEDED (a task transaction: refused once the region is another's), not
// the poll's next_poll_at nor its inbox row, not the thumbnail's asset row, not the relay's
// outbox update, not a rescue's record of the bytes it streamed while the region failed over and
// back (A → B → A) — and sends no provider cancel the new epoch did not decide. Likewise a mode
// narrowed mid-step (same epoch) is seen by the writing transaction.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { and, eq, sql } from 'drizzle-orm';
import { cancelTask } from '../../api/tasks.service';
import { createTask } from '../support/deps';
import { makeThumbnail } from '../../activities/thumbnail';
import { acquireFence } from '../../db/fence';
import { setMode } from '../../db/modes';
import { asset, callbackInbox, generationTask, outboxEvent, taskAttempt } from '../../db/schema';
import type { ProviderAdapter } from '../../providers/types';
import { createGenerationFacade } from '../../temporal/facade';
import { relayOnce } from '../../workers/outbox-relay';
import {
  freshActivities,
  outputMovedTo,
  runActivity,
  startActivityWorld,
  untilProviderSucceeded,
  withPresignFailures,
  type ActivityWorld,
} from '../support/activities';
import { eventually, temporalClient, testLogger, uniqueQueue } from '../support/stack';

let w: ActivityWorld;
let cancelCalls = 0;
let submitCalls = 0;
/** Runs inside the next provider submit, before the request leaves. */
let duringSubmit: (() => Promise<void>) | null = null;
/** While above 0, the media step's presigned GET fails: the rescue stops in PROCESSING_MEDIA. */
const presignFailures = { left: 0 };
before(async () => {
  w = await startActivityWorld({
    generationMs: 100,
    deps: (d) => {
      const storage = withPresignFailures(d.storage, presignFailures);
      const replicate = d.providers['replicate']!;
      const counted: ProviderAdapter = {
        ...replicate,
        cancel: async (...args) => {
          cancelCalls += 1;
          return replicate.cancel(...args);
        },
        submit: async (...args) => {
          submitCalls += 1;
          const hook = duringSubmit;
          duringSubmit = null;
          if (hook) await hook();
          return replicate.submit(...args);
        },
      };
      return { ...d, storage, providers: { ...d.providers, replicate: counted } };
    },
  });
});
after(() => w?.close());

const db = () => w.tdb.database.db;
const token = async () => (await acquireFence(db(), w.config.FENCE_SCOPE, w.config.REGION)).token;

/**
 * Runs `work` while a failover holds the fence row with the epoch already bumped (uncommitted):
 * `work` read the old epoch at its start; the bump commits once `work` waits on the fence row
 * (or has finished without touching it). Returns what `work` threw, or null.
 */
async function whileEpochMoves(work: () => Promise<unknown>, to: { region?: string } = {}): Promise<unknown> {
  const client = await w.tdb.database.pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT 1 FROM region_write_fence WHERE resource_scope = $1 FOR UPDATE', [w.config.FENCE_SCOPE]);
    await client.query('UPDATE region_write_fence SET write_epoch = write_epoch + 1, active_region = coalesce($2, active_region) WHERE resource_scope = $1', [
      w.config.FENCE_SCOPE,
      to.region ?? null,
    ]);
    let settled = false;
    const outcome = work()
      .then(
        () => null,
        (err: unknown) => err,
      )
      .finally(() => {
        settled = true;
      });
    await eventually(
      async () => {
        if (settled) return true;
        await client.query('SELECT pg_stat_clear_snapshot()'); // the view is a per-transaction snapshot otherwise
        const { rows } = await client.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`,
        );
        return (rows[0] as { n: number }).n > 0 ? true : undefined;
      },
      30_000,
      50,
    );
    await client.query('COMMIT');
    return await outcome;
  } finally {
    client.release();
  }
}

const fenceRejected = (err: unknown) => {
  assert.ok(err instanceof ApplicationFailure || err instanceof Error, `expected a fence rejection, got ${String(err)}`);
  assert.match(`${(err as ApplicationFailure).type ?? ''} ${(err as Error).name} ${(err as Error).message}`, /FenceRejected|does not own writes/);
};

let seq = 0;
async function submittedTask(): Promise<string> {
  seq += 1;
  const created = await createTask(db(), await token(), {
    tenantId: w.tenantId,
    idempotencyKey: `fence-writes-${seq}-${Date.now()}`,
    body: { model: 'minimax/video-01', prompt: `fence ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
  });
  const id = created.task.task_id;
  await w.run('dispatchTask', id);
  await w.run('prepareAttempt', id);
  assert.equal((await w.run('submitAttempt', id)).facts.status, 'SUBMITTED');
  return id;
}

describe('a stale-epoch worker writes nothing', () => {
  test('poll: neither next_poll_at nor the inbox row is written under a moved epoch', async () => {
    const id = await submittedTask();
    await new Promise((r) => setTimeout(r, 300)); // the job has finished: a poll would record it
    const [before] = await db().select().from(taskAttempt).where(eq(taskAttempt.task_id, id));
    fenceRejected(await whileEpochMoves(() => w.run('pollProvider', id)));
    const [afterwards] = await db().select().from(taskAttempt).where(eq(taskAttempt.task_id, id));
    assert.equal(afterwards!.next_poll_at?.getTime(), before!.next_poll_at?.getTime());
    assert.equal(afterwards!.last_polled_at?.getTime(), before!.last_polled_at?.getTime());
    const polls = await db()
      .select()
      .from(callbackInbox)
      .where(and(eq(callbackInbox.task_id, id), eq(callbackInbox.source, 'poll')));
    assert.equal(polls.length, 0);
  });

  test('rescue: a download that outlives a failover and a failback (A → B → A: our region again, not our epoch) records nothing under its token; the retry stores the output once', async (t) => {
    const id = await submittedTask();
    await untilProviderSucceeded(w, id);
    // An origin that sends half the body, then waits for the test to move the fence.
    let bytes: Buffer = Buffer.alloc(0);
    let midBody!: () => void;
    const reached = new Promise<void>((resolve) => (midBody = resolve));
    let release!: () => void;
    const moved = new Promise<void>((resolve) => (release = resolve));
    const origin = createServer((_req, res) => {
      const half = Math.floor(bytes.length / 2);
      res.writeHead(200, { 'Content-Type': 'video/mp4', 'Content-Length': String(bytes.length) });
      res.write(bytes.subarray(0, half), () => midBody());
      void moved.then(() => res.end(bytes.subarray(half)));
    });
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', () => resolve()));
    t.after(() => {
      origin.closeAllConnections();
      origin.close();
    });
    const output = await outputMovedTo(w, id, origin);
    bytes = output.bytes;
    const running = w.run('rescueOutput', id).then(
      () => null,
      (err: unknown) => err,
    );
    await reached;
    // Region B takes over, then hands back: the region is ours again, two epochs later.
    const scope = w.config.FENCE_SCOPE;
    await db().execute(sql`UPDATE region_write_fence SET active_region = 'region-b', write_epoch = write_epoch + 1 WHERE resource_scope = ${scope}`);
    await db().execute(sql`UPDATE region_write_fence SET active_region = ${w.config.REGION}, write_epoch = write_epoch + 1 WHERE resource_scope = ${scope}`);
    release();
    fenceRejected(await running);
    assert.equal((await db().select().from(generationTask).where(eq(generationTask.task_id, id)))[0]?.status, 'FETCHING_OUTPUT', 'not moved on');
    assert.deepEqual(await db().select().from(asset).where(eq(asset.task_id, id)), [], 'no asset row under the old epoch');

    // A rescue under the current epoch stores it, once.
    assert.equal((await w.run('rescueOutput', id)).status, 'SUCCEEDED');
    const videos = (await db().select().from(asset).where(eq(asset.task_id, id))).filter((a) => a.kind === 'video');
    assert.equal(videos.length, 1);
    assert.equal(videos[0]!.sha256, createHash('sha256').update(bytes).digest('hex'));
    assert.equal(videos[0]!.object_key, output.key);
  });

  test('media: neither SUCCEEDED nor the thumbnail asset row is written under a moved epoch', async () => {
    const id = await submittedTask();
    await untilProviderSucceeded(w, id);
    presignFailures.left = 1;
    await assert.rejects(w.run('rescueOutput', id), /storage unreachable/);
    // The media step is one task transaction: it takes its token in the statement that begins it
    // (docs/decisions/0040-task-transactions.md), so what stops it is a failover that committed
    // while it waited for the fence row: the region is another's by the time it holds the row.
    fenceRejected(await whileEpochMoves(() => w.run('processMedia', id), { region: 'region-b' }));
    const kinds = (await db().select().from(asset).where(eq(asset.task_id, id))).map((a) => a.kind);
    assert.deepEqual(kinds, ['video'], 'no thumbnail row');
    assert.equal((await db().select().from(generationTask).where(eq(generationTask.task_id, id)))[0]?.status, 'PROCESSING_MEDIA', 'not SUCCEEDED');
    await db().execute(
      sql`UPDATE region_write_fence SET active_region = ${w.config.REGION}, write_epoch = write_epoch + 1 WHERE resource_scope = ${w.config.FENCE_SCOPE}`,
    );
    assert.equal((await w.run('processMedia', id)).status, 'SUCCEEDED', 'the current epoch finishes it');

    // The thumbnail follows SUCCEEDED (activities/thumbnail.ts). Its row taken away again (never
    // done outside this test), the maker, started under the old epoch, writes nothing.
    const thumbnailRows = () =>
      db()
        .select()
        .from(asset)
        .where(and(eq(asset.task_id, id), eq(asset.kind, 'thumbnail')));
    await eventually(async () => ((await thumbnailRows()).length === 1 ? true : undefined), 20_000, 100);
    await db()
      .delete(asset)
      .where(and(eq(asset.task_id, id), eq(asset.kind, 'thumbnail')));
    // A task transaction too (docs/decisions/0040-task-transactions.md): refused once the region
    // is another's; the maker says so ('paused') and the reconciler comes back.
    let outcome: string | null = null;
    assert.equal(
      await whileEpochMoves(
        async () => {
          outcome = await makeThumbnail(w.deps, id);
        },
        { region: 'region-b' },
      ),
      null,
    );
    assert.equal(outcome, 'paused');
    assert.equal((await thumbnailRows()).length, 0, 'no thumbnail row once the region moved');
    await db().execute(
      sql`UPDATE region_write_fence SET active_region = ${w.config.REGION}, write_epoch = write_epoch + 1 WHERE resource_scope = ${w.config.FENCE_SCOPE}`,
    );
  });

  test("submit: the outcome is not recorded once the epoch moved during the provider call (the claim's token)", async () => {
    seq += 1;
    const created = await createTask(db(), await token(), {
      tenantId: w.tenantId,
      idempotencyKey: `fence-writes-${seq}-${Date.now()}`,
      body: { model: 'minimax/video-01', prompt: `fence ${seq}`, duration_seconds: 6, resolution: '720p', priority: 0 },
    });
    const id = created.task.task_id;
    await w.run('dispatchTask', id);
    await w.run('prepareAttempt', id);
    submitCalls = 0;
    duringSubmit = async () => {
      await db().execute(sql`UPDATE region_write_fence SET write_epoch = write_epoch + 1 WHERE resource_scope = ${w.config.FENCE_SCOPE}`);
    };
    fenceRejected(
      await w.run('submitAttempt', id).then(
        () => null,
        (err: unknown) => err,
      ),
    );
    const attempts = () => db().select().from(taskAttempt).where(eq(taskAttempt.task_id, id));
    assert.equal((await attempts())[0]?.submit_state, 'SUBMITTING', 'the outcome was not recorded under the claim token');
    assert.equal((await db().select().from(generationTask).where(eq(generationTask.task_id, id)))[0]?.status, 'SUBMITTING');
    // The current epoch finds the attempt mid-call and never calls again: the outcome is unknown.
    assert.equal((await w.run('submitAttempt', id)).facts.status, 'SUBMIT_UNKNOWN');
    assert.equal(submitCalls, 1);
  });

  test('cancel: the provider cancel is not sent once the epoch moved after the step began', async () => {
    const id = await submittedTask();
    await cancelTask(db(), await token(), w.tenantId, id);
    cancelCalls = 0;
    fenceRejected(await whileEpochMoves(() => w.run('requestProviderCancel', id)));
    assert.equal(cancelCalls, 0);
    assert.deepEqual(await w.run('requestProviderCancel', id), { sent: true }, 'the current epoch sends it');
    assert.equal(cancelCalls, 1);
  });

  test('relay: the outbox row is not marked published under a moved epoch', async () => {
    const config = { ...w.config, TEMPORAL_TASK_QUEUE: uniqueQueue('fence-relay') };
    const { client, close } = await temporalClient(config);
    try {
      const facade = createGenerationFacade(async () => client, config.TEMPORAL_TASK_QUEUE);
      await db().execute(sql`UPDATE outbox_event SET published_at = now() WHERE published_at IS NULL`);
      const created = await createTask(db(), await token(), {
        tenantId: w.tenantId,
        idempotencyKey: `fence-relay-${Date.now()}`,
        body: { model: 'minimax/video-01', prompt: 'relay', duration_seconds: 6, resolution: '720p', priority: 0 },
      });
      const id = created.task.task_id;
      const relay = { db: db(), fence: { scope: config.FENCE_SCOPE, region: config.REGION }, facade, logger: testLogger, batchSize: 10, intervalMs: 10 };
      fenceRejected(await whileEpochMoves(() => relayOnce(relay)));
      const [row] = await db().select().from(outboxEvent).where(eq(outboxEvent.aggregate_id, id));
      assert.equal(row!.published_at, null);
      assert.equal(row!.publish_attempts, 0);
      assert.equal((await relayOnce(relay)).published, 1, 'the current epoch publishes it');
      await client.workflow
        .getHandle(facade.workflowIdFor(id))
        .terminate('test cleanup')
        .catch(() => undefined);
    } finally {
      await close();
    }
  });
});

describe('a mode narrowed after the step read it writes nothing', () => {
  test('review: a resolution whose provider read outlasted `mode set READ_ONLY` waits (ModePaused) and writes nothing, then applies once reopened', async () => {
    const id = await submittedTask();
    await w.run('escalateTask', id, 'test: parked for an operator');
    const [attempt] = await db().select().from(taskAttempt).where(eq(taskAttempt.task_id, id));
    // The operator narrows the mode while the bind-job's provider read (after fenced()'s fence read) is in flight.
    const replicate = w.deps.providers['replicate']!;
    const slow: ProviderAdapter = {
      ...replicate,
      getJob: async (...args) => {
        await setMode(db(), { scope: w.config.FENCE_SCOPE, mode: 'READ_ONLY', actor: 'operator:test', reason: 'test' });
        return replicate.getJob(...args);
      },
    };
    const acts = freshActivities(w, { replicate: slow });
    const resolution = { kind: 'bind-job', providerJobId: attempt!.provider_job_id!, operator: 'op-test', reason: 'the job is ours' } as const;
    try {
      await assert.rejects(
        runActivity(acts, 'resolveReview', id, resolution),
        (err: unknown) => err instanceof ApplicationFailure && err.type === 'ModePaused',
      );
      const [task] = await db().select().from(generationTask).where(eq(generationTask.task_id, id));
      assert.equal(task!.status, 'MANUAL_REVIEW');
    } finally {
      await setMode(db(), { scope: w.config.FENCE_SCOPE, mode: 'NORMAL', actor: 'operator:test', reason: 'test' });
    }
    assert.equal((await w.run('resolveReview', id, resolution)).status, 'SUBMITTED');
  });
});
