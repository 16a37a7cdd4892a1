// ops task … and ops review …: one task, filtered batches of them, and the MANUAL_REVIEW queue.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Command, Option } from 'commander';
import { REVIEW_ACTIONS, REVIEW_CLASSES, type ReviewAction, type ReviewClass } from '../../domain/review-class';
import type { TaskStatus } from '../../domain/states';
import type { BatchPlan } from '../batch';
import { applyCancelBatch, parseStatuses, planCancelBatch } from '../cancel-batch';
import { applyReviewBatch, classifyReviews, planReviewBatch } from '../review-batch';
import { printBatchResults, printClassified, printPlan } from '../print-reconcile';
import { readFence } from '../../db/fence';
import { modeForbids } from '../../domain/modes';
import { inspectTask } from '../inspect';
import { escalateTask } from '../task-escalate';
import { printInspection, printReviews } from '../print';
import { listReviews, resolveReview, settledAmountOf } from '../review';
import { config, fence, actor, duration, print, withDb, withTemporal } from './context';

interface ResolveOpts {
  bindJob?: string;
  notSubmitted?: boolean;
  fail?: boolean;
  class?: ReviewClass;
  action?: ReviewAction;
  apply: boolean;
  expect?: string;
  out?: string;
  limit: number;
  rate: number;
  reason: string;
  json: boolean;
}

// The Update would wait (its activity pauses) until the mode allows fact writes again.
async function refuseWhilePaused() {
  const state = await withDb((d) => readFence(d.db, fence.scope));
  const paused = state && modeForbids(state.mode, 'factWrites');
  if (paused) throw new Error(`${paused}; resolve after \`mode set\``);
}

const batchFile = (plan: BatchPlan, out?: string) => out ?? path.join(os.tmpdir(), `vidorch-${plan.kind}-${plan.fingerprint}.json`);
const readPlan = (file: string): BatchPlan => JSON.parse(fs.readFileSync(file, 'utf8')) as BatchPlan;
const rate = (n: number) => {
  if (!(n > 0 && n <= 100)) throw new Error('--rate is actions per second per tenant and provider, above 0 and at most 100');
  return n;
};

async function resolveBatch(operator: string, o: ResolveOpts) {
  if (!o.apply) {
    if (!o.class || !o.action) throw new Error('a bulk resolution needs --class and --action');
    const plan = await withDb((d) => planReviewBatch(d.db, { cls: o.class!, action: o.action!, limit: o.limit }));
    const file = batchFile(plan, o.out);
    fs.writeFileSync(file, JSON.stringify(plan, null, 2));
    print(o.json, { ...plan, file }, () => printPlan(plan, file, `npm run ops -- review resolve --apply --expect ${file} --reason '…'`));
    return;
  }
  if (!o.expect) throw new Error('--apply needs --expect <batch file> from the dry run');
  const plan = readPlan(o.expect);
  if ((o.class && o.class !== plan.selector['class']) || (o.action && o.action !== plan.selector['action'])) {
    throw new Error(`the batch file is for --class ${String(plan.selector['class'])} --action ${String(plan.selector['action'])}`);
  }
  await refuseWhilePaused();
  const r = await withDb((d) => withTemporal((facade) => applyReviewBatch(d.db, facade, plan, { operator, reason: o.reason, ratePerSecond: rate(o.rate) })));
  print(o.json, r, () => printBatchResults(r));
}

export function registerTaskCommands(program: Command): void {
  const task = program.command('task').description('one task, or a filtered batch of them');

  task
    .command('inspect')
    .description('facts, transitions, ledger, inbox, Temporal status and a UI link')
    .argument('<task-id>')
    .option('--json', 'print one JSON line', false)
    .action(async (taskId: string, o: { json: boolean }) => {
      const inspection = await withDb((d) =>
        withTemporal((facade) => inspectTask(d.db, facade, taskId, { baseUrl: config.TEMPORAL_UI_URL, namespace: config.TEMPORAL_NAMESPACE })),
      );
      if (!inspection) throw new Error(`no task ${taskId}`);
      print(o.json, inspection, () => printInspection(inspection));
    });

  task
    .command('cancel')
    .description('cancel the open tasks a filter selects, as one audited batch: a dry run first, then --apply --expect <its batch file>')
    .option('--tenant <name>', 'tenant name')
    .option('--provider <provider>', 'provider')
    .option('--status <list>', 'task states, comma separated (e.g. QUEUED,SUBMITTED)', parseStatuses)
    .option('--older-than <duration>', 'created at least this long ago', duration)
    .option('--apply', 'apply the dry run in --expect (default: dry run only)', false)
    .option('--expect <file>', 'the batch file the dry run wrote; tasks that changed since are refused')
    .option('--out <file>', 'dry run: write the batch file here (default: in the temp directory)')
    .option('--limit <n>', 'at most this many tasks', (v) => Number.parseInt(v, 10), 500)
    .option('--rate <n>', 'cancels per second per tenant and provider', Number.parseFloat, 5)
    .requiredOption('--reason <text>', 'why (audited)')
    .option('--json', 'print one JSON line', false)
    .action(
      async (o: {
        tenant?: string;
        provider?: string;
        status?: TaskStatus[];
        olderThan?: number;
        apply: boolean;
        expect?: string;
        out?: string;
        limit: number;
        rate: number;
        reason: string;
        json: boolean;
      }) => {
        if (!o.apply) {
          const filter = {
            ...(o.tenant ? { tenant: o.tenant } : {}),
            ...(o.provider ? { provider: o.provider } : {}),
            ...(o.status ? { statuses: o.status } : {}),
            ...(o.olderThan !== undefined ? { olderThanSeconds: o.olderThan } : {}),
          };
          const plan = await withDb((d) => planCancelBatch(d.db, filter, o.limit));
          const file = batchFile(plan, o.out);
          fs.writeFileSync(file, JSON.stringify(plan, null, 2));
          print(o.json, { ...plan, file }, () => printPlan(plan, file, `npm run ops -- task cancel --apply --expect ${file} --reason '…'`));
          return;
        }
        if (!o.expect) throw new Error('--apply needs --expect <batch file> from the dry run');
        const plan = readPlan(o.expect);
        const operator = actor.replace(/^operator:/, '');
        const r = await withDb((d) =>
          withTemporal((facade) => applyCancelBatch(d.db, facade, plan, { operator, reason: o.reason, ratePerSecond: rate(o.rate), fence })),
        );
        print(o.json, r, () => printBatchResults(r));
      },
    );

  task
    .command('escalate')
    .description(
      'park a task in MANUAL_REVIEW from any non-terminal state (audited) and wake its workflow, e.g. one whose step keeps failing; a terminal task is refused (exit 2)',
    )
    .argument('<task-id>')
    .requiredOption('--reason <text>', 'why (audited; the escalation reason `review list` shows)')
    .option('--json', 'print one JSON line', false)
    .action(async (taskId: string, o: { reason: string; json: boolean }) => {
      const r = await withDb((d) => withTemporal((facade) => escalateTask(d.db, facade, { taskId, actor, reason: o.reason, fence })));
      if (r.result === 'refused') {
        if (o.json) console.log(JSON.stringify(r));
        console.error(`ops: task ${taskId} is ${r.status}, a terminal state: refused (nothing to escalate)`);
        process.exitCode = 2;
        return;
      }
      print(o.json, r, () =>
        r.result === 'unchanged'
          ? `task ${taskId} is already in MANUAL_REVIEW; nothing changed`
          : `task ${taskId}: ${r.from} → MANUAL_REVIEW (audited as ${actor}, audit ${r.audit_id}); workflow ${r.woken ? 'woken' : 'not woken (none running, or Temporal did not answer): it re-reads the facts on its next step'}`,
      );
    });

  const review = program.command('review').description('the MANUAL_REVIEW queue');

  review
    .command('list')
    .description('tasks waiting for a person, oldest first')
    .option('--limit <n>', 'at most this many', (v) => Number.parseInt(v, 10), 100)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { limit: number; json: boolean }) => {
      const items = await withDb((d) => listReviews(d.db, o.limit));
      print(o.json, items, () => `MANUAL_REVIEW (${items.length})\n${printReviews(items)}`);
    });

  review
    .command('classify')
    .description('the parked tasks by cause (provider defect, unknown outcome, missing data, terminal elsewhere, code defect) and the actions each allows')
    .addOption(new Option('--class <class>', 'only this class').choices(REVIEW_CLASSES))
    .option('--limit <n>', 'at most this many', (v) => Number.parseInt(v, 10), 1000)
    .option('--json', 'print one JSON line', false)
    .action(async (o: { class?: ReviewClass; limit: number; json: boolean }) => {
      const items = (await withDb((d) => classifyReviews(d.db, { limit: o.limit }))).filter((r) => !o.class || r.class === o.class);
      print(o.json, items, () => printClassified(items));
    });

  review
    .command('resolve')
    .description(
      'resolve one task through its workflow (validated against the facts, audited); or, with --class and --action, a whole class as one audited batch: a dry run first, then --apply --expect <its batch file>',
    )
    .argument('[task-id]')
    .addOption(new Option('--bind-job <job-id>', 'the provider job this attempt created').conflicts(['notSubmitted', 'fail', 'class']))
    .addOption(new Option('--not-submitted', 'the provider never received the attempt: a new attempt follows').conflicts(['fail', 'class']))
    .addOption(
      new Option('--fail', 'give up: the task fails and its credits are released (a reservation its ledger settled already keeps that charge)').conflicts([
        'class',
      ]),
    )
    .addOption(new Option('--class <class>', 'bulk: every parked task of this class (ops review classify)').choices(REVIEW_CLASSES))
    .addOption(new Option('--action <action>', 'bulk: what to do with each').choices(REVIEW_ACTIONS))
    .option('--apply', 'bulk: apply the dry run in --expect (default: dry run only)', false)
    .option('--expect <file>', 'bulk: the batch file the dry run wrote; tasks whose evidence changed since are refused')
    .option('--out <file>', 'bulk dry run: write the batch file here (default: in the temp directory)')
    .option('--limit <n>', 'bulk: at most this many tasks', (v) => Number.parseInt(v, 10), 500)
    .option('--rate <n>', 'bulk: resolutions per second per tenant and provider', Number.parseFloat, 2)
    .requiredOption('--reason <text>', 'why (audited)')
    .option('--json', 'print one JSON line', false)
    .action(async (taskId: string | undefined, o: ResolveOpts) => {
      const operator = actor.replace(/^operator:/, '');
      if (o.class || o.action || o.apply || o.expect) return resolveBatch(operator, o);
      if (!taskId) throw new Error('name the task, or a class: --class <class> --action <action>');
      const args = o.bindJob
        ? { kind: 'bind-job' as const, providerJobId: o.bindJob, operator, reason: o.reason }
        : o.notSubmitted
          ? { kind: 'not-submitted' as const, operator, reason: o.reason }
          : o.fail
            ? { kind: 'fail' as const, operator, reason: o.reason }
            : null;
      if (!args) throw new Error('say how: --bind-job <job-id>, --not-submitted or --fail');
      await refuseWhilePaused();
      const facts = await withTemporal((facade) => resolveReview(facade, taskId, args));
      // A fail keeps a settlement the ledger had already (docs/billing.md): say what was charged, since a refund is then a grant.
      const charged = args.kind === 'fail' && facts.status === 'FAILED' ? await withDb((d) => settledAmountOf(d.db, taskId)) : null;
      const kept =
        charged !== null && Number(charged) > 0
          ? `; charged ${charged}, the settlement its ledger already had (a refund is an operator grant: docs/billing.md)`
          : '';
      print(
        o.json,
        { ...facts, ...(charged !== null ? { settled_amount: charged } : {}) },
        () => `task ${taskId} → ${facts.status} (${args.kind}, audited as operator:${operator})${kept}`,
      );
    });
}
