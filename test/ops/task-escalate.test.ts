// `ops task escalate <task-id> --reason` (docs/design.md §5 "Bounds"): an operator can end a task
// whose step fails without end (here its media step: every ffprobe run times out, and the bound
// is set out of reach), from any non-terminal state. The task is parked in MANUAL_REVIEW with an
// audit row in the same transaction, both naming the operator's OS user; its workflow is woken and
// leaves the failing step (the activity's next attempt finds the task out of PROCESSING_MEDIA and
// returns the facts). A terminal task is refused (exit 2) and nothing is written. Driven through
// `node --import tsx ops/cli.ts` as an operator would, against the run's Temporal and a worker.
import assert from 'node:assert/strict';
import os from 'node:os';
import { after, before, test } from 'node:test';
import { and, eq } from 'drizzle-orm';
import { configToEnv } from '../../config/env';
import { generationTask, opsAudit, taskTransition } from '../../db/schema';
import { runNodeScript } from '../../harness';
import { listReviews } from '../../ops/review';
import { workflowIdForTask } from '../../workflows/definitions';
import { eventually } from '../support/stack';
import { startModesStack, type ModesStack } from './support';

let s: ModesStack;
let env: Record<string, string>;
/** What every ops command records as its actor when OPS_OPERATOR is not set: the OS user. */
const operator = `operator:${process.env['OPS_OPERATOR'] ?? os.userInfo().username}`;

before(async () => {
  // A non-MP4 output goes to ffprobe, which never finishes in 1 ms: the media step fails for good,
  // and a thousand failures are more than this test waits for.
  s = await startModesStack('task-escalate', { MEDIA_PROBE_TIMEOUT_MS: '1', MEDIA_MAX_FAILURES: '1000' }, { generationMs: 300 });
  env = { ...configToEnv(s.config), DATABASE_URL: s.tdb.url, LOG_LEVEL: 'warn' };
  delete env['OPS_OPERATOR'];
});
after(async () => {
  await s?.close();
});

const ops = (...args: string[]) => runNodeScript('ops/cli.ts', args, env, { timeoutMs: 60_000 });
const db = () => s.tdb.database.db;
const taskRow = async (id: string) => (await db().select().from(generationTask).where(eq(generationTask.task_id, id)))[0]!;
const auditsOf = (id: string) =>
  db()
    .select()
    .from(opsAudit)
    .where(and(eq(opsAudit.action, 'task.escalate'), eq(opsAudit.target_id, id)));

test(
  'a task stuck retrying its media step is parked in MANUAL_REVIEW, audited as the OS user, and its workflow leaves the step',
  { timeout: 120_000 },
  async () => {
    s.sim.sim.setFaults({ output: 'not_media' });
    let id: string;
    try {
      id = await s.createTask('escalate-stuck');
      // Failing again and again, the reservation held.
      await eventually(
        async () => {
          const t = await taskRow(id);
          return t.status === 'PROCESSING_MEDIA' && t.media_failures >= 2 ? true : undefined;
        },
        60_000,
        200,
      );
    } finally {
      s.sim.sim.clearFaults();
    }

    const r = await ops('task', 'escalate', id, '--reason', 'ffprobe keeps timing out (INC-47)', '--json');
    assert.equal(r.code, 0, r.stderr);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as { result: string; from: string; woken: boolean; audit_id: string };
    assert.equal(out.result, 'escalated');
    assert.equal(out.from, 'PROCESSING_MEDIA');
    assert.equal(out.woken, true, 'its workflow took the wake');

    assert.equal((await taskRow(id)).status, 'MANUAL_REVIEW');
    const [moved] = await db()
      .select()
      .from(taskTransition)
      .where(and(eq(taskTransition.task_id, id), eq(taskTransition.to_status, 'MANUAL_REVIEW')));
    assert.equal(moved?.from_status, 'PROCESSING_MEDIA');
    assert.equal(moved?.source_event, 'ops.escalate');
    assert.equal(moved?.actor, operator);
    const audits = await auditsOf(id);
    assert.equal(audits.length, 1);
    assert.equal(audits[0]!.audit_id, out.audit_id);
    assert.equal(audits[0]!.actor, operator);
    assert.equal(audits[0]!.reason, 'ffprobe keeps timing out (INC-47)');
    assert.deepEqual(audits[0]!.detail, { from: 'PROCESSING_MEDIA', to: 'MANUAL_REVIEW' });
    // In the review queue with the operator's reason.
    assert.equal((await listReviews(db())).find((item) => item.task_id === id)?.reason, 'ffprobe keeps timing out (INC-47)');

    // The workflow re-reads the facts: it is in MANUAL_REVIEW too, with no activity still retrying.
    const handle = s.client.workflow.getHandle(workflowIdForTask(id));
    await eventually(
      async () => {
        const facts = await handle.query<{ status?: string } | null>('facts');
        if (facts?.status !== 'MANUAL_REVIEW') return undefined;
        return ((await handle.describe()).raw.pendingActivities ?? []).length === 0 ? true : undefined;
      },
      60_000,
      250,
    );
    const failures = (await taskRow(id)).media_failures;
    await new Promise((r) => setTimeout(r, 2_000));
    assert.equal((await taskRow(id)).media_failures, failures, 'the media step is not run again');

    // Again: already parked, nothing written.
    const again = await ops('task', 'escalate', id, '--reason', 'twice');
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /already in MANUAL_REVIEW/);
    assert.equal((await auditsOf(id)).length, 1);
  },
);

test('a terminal task is refused with exit 2 and nothing is written', { timeout: 120_000 }, async () => {
  const id = await s.createTask('escalate-done');
  await s.waitForStatus(id, 'SUCCEEDED', 60_000);
  const before = await taskRow(id);
  const r = await ops('task', 'escalate', id, '--reason', 'too late');
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /is SUCCEEDED, a terminal state: refused/);
  const after = await taskRow(id);
  assert.equal(after.status, 'SUCCEEDED');
  assert.equal(after.status_version, before.status_version);
  assert.deepEqual(await auditsOf(id), []);
});
