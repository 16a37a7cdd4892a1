// Drills: `npm run drill -- <name> [options]`. Each starts its own stack, injects faults at
// volume, and prints the figures that say whether the guarantees held (non-zero exit if not).
import { Command, InvalidArgumentError } from 'commander';
import { runFailoverDrill } from './drills/failover';
import { runPostgresOutageDrill } from './drills/postgres-outage';
import { runStorageOutageDrill } from './drills/storage-outage';
import { runPgSwitchoverDrill } from './drills/pg-switchover';
import { runPitrDrill } from './drills/pitr';
import { runTemporalOutageDrill } from './drills/temporal-outage';
import { PROVIDERS, type ProviderName } from '../domain/catalog';
import { runReviewLateWebhooksDrill } from './drills/review-late-webhooks';
import { runUnknownOutcomeDrill } from './drills/unknown-outcome';
import { runWebhooksDrill } from './drills/webhooks';
import { runImagesDrill } from './drills/images';
import { runProductionDrill } from './drills/production';

const int = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 3) throw new InvalidArgumentError('a whole number ≥ 3');
  return n;
};
const positive = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('a whole number ≥ 1');
  return n;
};
const providerList = (v: string): ProviderName[] => {
  const names = v
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  const bad = names.filter((n) => !(PROVIDERS as readonly string[]).includes(n));
  if (bad.length > 0 || names.length === 0) throw new InvalidArgumentError(`a comma-separated list of ${PROVIDERS.join(', ')}`);
  return names as ProviderName[];
};
const ms = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('a whole number of milliseconds ≥ 0');
  return n;
};
const klingNotFound = (v: string): KlingNotFound => {
  if (v !== '404-1203' && v !== '400-1201') throw new InvalidArgumentError('404-1203 or 400-1201');
  return v;
};
type KlingNotFound = '404-1203' | '400-1201';
interface UnknownOutcomeCli {
  readonly tasks: number;
  readonly json: boolean;
  readonly dropWebhooks: boolean;
  readonly providers: ProviderName[];
  readonly klingVisibleAfter: number;
  readonly klingNotFound: KlingNotFound;
}
const log = (line: string) => console.log(`drill: ${line}`);

type Row = [string, string | number | boolean | null, string];
const printRows = (title: string, rows: Row[]) => {
  console.log(`\n${title}`);
  for (const [k, v, note] of rows) console.log(`  ${k.padEnd(52)} ${String(v ?? '-').padStart(12)}  ${note}`);
};
const phases = (load: Record<string, Record<string, number>>) =>
  Object.entries(load).map(([phase, statuses]): Row => [`creates ${phase}`, JSON.stringify(statuses), '']);

/** Prints a drill's report (a table, or one JSON line) and fails the process when a guarantee did not hold. */
function report(r: unknown, json: boolean, title: string, rows: () => Row[], ok: boolean, extra?: () => void): void {
  if (json) console.log(JSON.stringify(r));
  else {
    printRows(title, rows());
    extra?.();
  }
  if (!ok) {
    console.error('drill: a guarantee did not hold');
    process.exitCode = 1;
  }
}

const program = new Command('drill').description('fault drills against a private stack').showHelpAfterError();

program
  .command('unknown-outcome')
  .description('accept-then-hang, a worker SIGKILLed mid-submit, lost callbacks: every task converges with ≤ 1 provider job')
  .option('--tasks <n>', 'tasks to run', int, 200)
  .option('--drop-webhooks', 'drop every webhook in every phase: only polls and lookups reconcile', false)
  .option('--providers <list>', `tasks round-robin over these providers (${PROVIDERS.join(',')})`, providerList, ['replicate'] as ProviderName[])
  .option('--kling-visible-after <ms>', 'the simulated Kling serves a new task only this long after its create (Kling promises no read-after-write)', ms, 0)
  .option('--kling-not-found <shape>', 'what the simulated Kling answers a get of an id it does not serve: 404-1203 or 400-1201', klingNotFound, '404-1203')
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: UnknownOutcomeCli) => {
    const kling = { klingVisibleAfterMs: o.klingVisibleAfter, klingNotFound: o.klingNotFound };
    const r = await runUnknownOutcomeDrill({ tasks: o.tasks, log, dropWebhooks: o.dropWebhooks, providers: o.providers, ...kling });
    const perProvider = Object.entries(r.byProvider).flatMap(([p, f]): Row[] => [
      [`${p}: tasks / succeeded / parked (MANUAL_REVIEW)`, `${f.tasks} / ${f.succeeded} / ${f.parked}`, ''],
      [`${p}: provider jobs per task (max)`, f.maxProviderJobsPerTask, 'must be 1'],
    ]);
    report(
      r,
      o.json,
      'unknown-outcome drill',
      () => [
        ['tasks accepted', r.accepted, ''],
        ['webhooks dropped (all phases)', r.webhooksDropped, ''],
        ['kling: readable after (ms) / not-found answer', `${o.klingVisibleAfter} / ${o.klingNotFound}`, ''],
        ['succeeded', r.succeeded, ''],
        ['failed', r.failed, ''],
        ['in manual review', r.manualReview, ''],
        ['provider jobs per task (max)', r.maxProviderJobsPerTask, 'must be 1'],
        ['provider jobs per task (histogram)', JSON.stringify(r.providerJobsHistogram), ''],
        ['ledger imbalance', r.ledgerImbalance, 'must be 0'],
        ['lost', r.lost, 'must be 0'],
        ['time to converge (s)', r.convergeSeconds.toFixed(1), ''],
        ['submits left unknown by the hang', r.phases['hang_unknown'] ?? 0, ''],
        ['submits in flight when the worker was killed', r.phases['in_flight_at_kill'] ?? 0, ''],
        ...perProvider,
      ],
      r.maxProviderJobsPerTask <= 1 && r.ledgerImbalance === 0 && r.lost === 0,
    );
  });

program
  .command('review-late-webhooks')
  .description('tasks parked in MANUAL_REVIEW (unknown outcome past its deadline, webhooks held back) get their webhooks late: each converges with its one job')
  .option('--tasks <n>', 'tasks to run', int, 30)
  .option('--webhook-delay <seconds>', 'how long the webhooks are held back', positive, 30)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { tasks: number; webhookDelay: number; json: boolean }) => {
    if (o.tasks > 50) throw new InvalidArgumentError("--tasks: at most 50 (Replicate's in-flight limit: every parked task holds a slot)");
    const r = await runReviewLateWebhooksDrill({ tasks: o.tasks, webhookDelaySeconds: o.webhookDelay, log });
    const ok = r.parkedInReview === r.tasks && r.succeeded === r.tasks && r.maxProviderJobsPerTask <= 1 && r.ledgerImbalance === 0 && r.lost === 0;
    report(
      r,
      o.json,
      'review-late-webhooks drill',
      () => [
        ['tasks accepted', r.tasks, ''],
        ['parked in MANUAL_REVIEW before the webhooks came', r.parkedInReview, 'must be all'],
        ['time to park them all (s)', r.parkSeconds.toFixed(1), ''],
        ['succeeded after their late webhooks', r.succeeded, 'must be all'],
        ['still in review', r.stillInReview, 'must be 0'],
        ['other end states', JSON.stringify(r.other), ''],
        ['provider jobs per task (max)', r.maxProviderJobsPerTask, 'must be 1'],
        ['attempts per task (max)', r.attemptsPerTaskMax, ''],
        ['ledger imbalance', r.ledgerImbalance, 'must be 0'],
        ['lost', r.lost, 'must be 0'],
        ['converged after the last one parked (s)', r.convergeSecondsAfterPark.toFixed(1), ''],
      ],
      ok,
    );
  });

program
  .command('failover')
  .description('region-a and region-b worker groups, tasks mid-flight, `failover --to region-b`, a zombie region-a worker: nothing lost, no duplicate job, RTO')
  .option('--tasks <n>', 'tasks to run', positive, 300)
  .option('--spread <seconds>', 'create the tasks over this long', positive, 30)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { tasks: number; spread: number; json: boolean }) => {
    const r = await runFailoverDrill({ tasks: o.tasks, spreadSeconds: o.spread, log });
    const ok = r.lost === 0 && r.maxProviderJobsPerTask <= 1 && r.ledgerImbalance === 0 && r.regionAWritesAfterSwitch === 0 && r.creates503AfterFailover;
    report(
      r,
      o.json,
      'failover drill',
      () => [
        ['tasks accepted', r.accepted, ''],
        ['states at failover', JSON.stringify(r.statesAtFailover), ''],
        ['states at the end', JSON.stringify(r.byStatus), ''],
        ['lost (accepted, not converged or missing)', r.lost, 'must be 0'],
        ['provider jobs per task (max)', r.maxProviderJobsPerTask, 'must be 1'],
        ['tasks with a duplicate provider job', r.tasksWithDuplicateJobs, 'must be 0'],
        ['ledger imbalance', r.ledgerImbalance, 'must be 0'],
        ['facts written by region-a after the switch', r.regionAWritesAfterSwitch, 'must be 0'],
        ['zombie activity attempts rejected (FenceRejected)', r.zombieRejectedActivities, '> 0: it kept trying'],
        ['  of which provider submits', r.zombieRejectedSubmits, ''],
        ['transitions written by region-b (new epoch)', r.regionBWrites, ''],
        ['creates at the old region after failover → 503', r.creates503AfterFailover, 'must be true'],
        ['standby region-b worker polling after switch (ms)', r.standbyPollingAfterMs, ''],
        ['failover command duration (s)', r.failoverCommandSeconds.toFixed(1), ''],
        ['RTO: command → first write under region-b (s)', r.rtoSeconds === null ? null : r.rtoSeconds.toFixed(2), ''],
        ['converged after the failover command (s)', r.convergeSecondsAfterFailover.toFixed(1), ''],
      ],
      ok,
      () => console.log(`  failover record: ${JSON.stringify(r.failover)}`),
    );
  });

program
  .command('postgres-outage')
  .description('a private PostgreSQL stopped under load and started again: 503 never 500, callbacks spooled and replayed, nothing lost')
  .option('--outage <seconds>', 'how long Postgres stays down', positive, 30)
  .option('--rate <per-second>', 'creates per second', positive, 5)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { outage: number; rate: number; json: boolean }) => {
    const r = await runPostgresOutageDrill({ outageSeconds: o.outage, ratePerSecond: o.rate, log });
    const ok = r.serverErrors === 0 && r.missing === 0 && r.unconverged === 0 && r.maxProviderJobsPerTask <= 1 && r.ledgerImbalance === 0;
    report(
      r,
      o.json,
      `postgres-outage drill (${r.outageSeconds} s down)`,
      () => [
        ...phases(r.load),
        ['answers 5xx other than 503', r.serverErrors, 'must be 0'],
        ['tasks accepted (202)', r.accepted, ''],
        ['accepted but missing from the facts', r.missing, 'must be 0'],
        ['accepted, not converged when the drill stopped', r.unconverged, 'must be 0'],
        ['states at the end', JSON.stringify(r.byStatus), ''],
        ['callbacks spooled while down (peak)', r.spooledPeak, ''],
        ['spool replayed into the inbox after restart (s)', r.spoolDrainedAfterRestartSeconds, ''],
        ['first create accepted after restart (s)', r.firstAcceptAfterRestartSeconds, ''],
        ['provider jobs per task (max)', r.maxProviderJobsPerTask, 'must be 1'],
        ['ledger imbalance', r.ledgerImbalance, 'must be 0'],
        ['converged after restart (s)', r.convergeSecondsAfterRestart.toFixed(1), ''],
      ],
      ok,
    );
  });

program
  .command('pg-switchover')
  .description(
    'the facts database fails over to its streaming standby under load (primary stopped, standby promoted): RTO, 503 never 500, nothing lost, no duplicate job',
  )
  .option('--rate <per-second>', 'creates per second', positive, 5)
  .option('--load <seconds>', 'load before the stop, and again after the promotion', positive, 15)
  .option('--promote-after <seconds>', 'detection delay: the primary stays down this long before the standby is promoted', positive, 5)
  .option('--async', 'an asynchronous standby (measures the loss instead of RPO = 0)', false)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { rate: number; load: number; promoteAfter: number; async: boolean; json: boolean }) => {
    const r = await runPgSwitchoverDrill({ ratePerSecond: o.rate, loadSeconds: o.load, promoteAfterSeconds: o.promoteAfter, synchronous: !o.async, log });
    const ok =
      r.serverErrors === 0 &&
      r.missing === 0 &&
      r.unconverged === 0 &&
      r.rtoSeconds !== null &&
      r.tasksWithDuplicateJobs === 0 &&
      r.ledgerImbalance === 0 &&
      r.tenantsOutOfBalance === 0 &&
      r.openReservationsOnTerminalTasks === 0 &&
      r.outboxUnpublishedAtEnd === 0 &&
      (!r.synchronous || (r.outboxRowsMissing === 0 && r.inboxRowsMissing === 0));
    report(
      r,
      o.json,
      `pg-switchover drill (${r.synchronous ? 'synchronous standby: RPO 0 for commits' : 'asynchronous standby'})`,
      () => [
        ...phases(r.load),
        ['answers 5xx other than 503', r.serverErrors, 'must be 0'],
        ['creates answered 503 during the switch', r.creates503DuringSwitch, ''],
        ['primary stopped → promote command (s)', r.promoteAfterSeconds, 'detection delay'],
        ['pg_ctl promote took (s)', r.promoteCommandSeconds.toFixed(2), ''],
        ['RTO: primary stopped → first create accepted (s)', r.rtoSeconds === null ? null : r.rtoSeconds.toFixed(2), ''],
        ['tasks accepted (202)', r.accepted, ''],
        ['accepted but missing on the new primary (lost)', r.missing, 'must be 0'],
        ['outbox rows of the old primary missing on the new', r.outboxRowsMissing, r.synchronous ? 'must be 0' : 'async: the loss'],
        ['inbox rows of the old primary missing on the new', r.inboxRowsMissing, r.synchronous ? 'must be 0' : 'async: the loss'],
        ['outbox rows unpublished at the end', r.outboxUnpublishedAtEnd, 'must be 0'],
        ['callbacks spooled during the switch (peak)', r.spooledPeak, ''],
        ['accepted, not converged when the drill stopped', r.unconverged, 'must be 0'],
        ['states at the end', JSON.stringify(r.byStatus), ''],
        ['provider jobs per task (max)', r.maxProviderJobsPerTask, ''],
        ['tasks with a duplicate provider job', r.tasksWithDuplicateJobs, 'must be 0'],
        ['ledger imbalance (tasks)', r.ledgerImbalance, 'must be 0'],
        ['tenants whose account ≠ their ledger', r.tenantsOutOfBalance, 'must be 0'],
        ['open reservations on terminal tasks', r.openReservationsOnTerminalTasks, 'must be 0'],
        ['converged after the promotion (s)', r.convergeSecondsAfterPromote.toFixed(1), ''],
      ],
      ok,
    );
  });

program
  .command('pitr')
  .description(
    'WAL archive and base backup; a wrong mass update and deleted keys under load; a restore to the moment before in an isolated cluster; diff and repair: RPO, restore time',
  )
  .option('--rate <per-second>', 'creates per second', positive, 3)
  .option('--load <seconds>', 'load after the base backup, and again after the mistake', positive, 10)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { rate: number; load: number; json: boolean }) => {
    const r = await runPitrDrill({ ratePerSecond: o.rate, loadSeconds: o.load, log });
    const first = r.rounds[0]!;
    const last = r.rounds[r.rounds.length - 1]!;
    const sum = (f: (x: (typeof r.rounds)[number]) => number) => r.rounds.reduce((n, x) => n + f(x), 0);
    const ok =
      r.serverErrors === 0 &&
      r.missing === 0 &&
      r.unconverged === 0 &&
      r.mistake.tasksRewritten > 0 &&
      sum((x) => x.repair.tasks_repaired.length) === r.mistake.tasksRewritten &&
      sum((x) => x.repair.api_keys_restored.length) === r.mistake.apiKeysDeleted &&
      last.repair.skipped === 0 &&
      last.leftAfterRepair === 0 &&
      r.rounds.every((x) => x.diff.ledger.missing_in_live === 0) &&
      r.keyRefusedAfterMistake === 401 &&
      r.keyAnswersAfterRepair === 200 &&
      r.tasksWithDuplicateJobs === 0 &&
      r.ledgerImbalance === 0 &&
      r.tenantsOutOfBalance === 0 &&
      r.openReservationsOnTerminalTasks === 0;
    const d = first.diff;
    const statuses = [...new Set([...Object.keys(d.tasks_by_status.restored), ...Object.keys(d.tasks_by_status.live)])].sort();
    const roundRows = r.rounds.flatMap((x, i): Row[] => [
      [`round ${i + 1}: recovery target`, x.target, ''],
      [`round ${i + 1}: restore time: copy + WAL replay + promote (s)`, x.restoreSeconds.toFixed(1), ''],
      [`round ${i + 1}: restored copy replayed through`, x.diff.restored_through, ''],
      [`round ${i + 1}: diff: rewritten outside the CAS / off their record`, `${x.diff.tasks.rewritten.length} / ${x.diff.tasks.off_record.length}`, ''],
      [`round ${i + 1}: diff: progressed / created since the target (kept)`, `${x.diff.tasks.progressed} / ${x.diff.tasks.only_live}`, ''],
      [`round ${i + 1}: diff: deleted API keys`, x.diff.deleted_api_keys.length, ''],
      [
        `round ${i + 1}: diff: ledger rows of the copy missing live / written since`,
        `${x.diff.ledger.missing_in_live} / ${x.diff.ledger.only_live}`,
        'missing must be 0',
      ],
      [`round ${i + 1}: repaired tasks (CAS + transition) / keys`, `${x.repair.tasks_repaired.length} / ${x.repair.api_keys_restored.length}`, ''],
      [
        `round ${i + 1}: changed meanwhile / out of this copy's reach`,
        `${x.repair.tasks_changed_meanwhile.length} / ${x.repair.skipped}`,
        i === r.rounds.length - 1 ? 'reach must be 0' : 'next round',
      ],
      [`round ${i + 1}: a diff after the repair still finds`, x.leftAfterRepair, i === r.rounds.length - 1 ? 'must be 0' : ''],
    ]);
    report(
      r,
      o.json,
      'pitr drill',
      () => [
        ...phases(r.load),
        ['answers 5xx other than 503', r.serverErrors, 'must be 0'],
        ['base backup (s)', r.baseBackupSeconds.toFixed(1), ''],
        ['WAL segments archived', r.walSegmentsArchived, ''],
        ['the moment before (recorded)', r.recoveryTarget, ''],
        ['the mistake committed', r.mistakeAt, ''],
        ['RPO: mistake − recovery target (s)', r.rpoSeconds.toFixed(3), 'round 1'],
        ['the mistake: tasks SUCCEEDED → FAILED', r.mistake.tasksRewritten, ''],
        ['the mistake: API keys deleted', r.mistake.apiKeysDeleted, ''],
        ...statuses.map((s): Row => [
          `tasks ${s}: restored (round 1) / damaged`,
          `${d.tasks_by_status.restored[s] ?? 0} / ${d.tasks_by_status.live[s] ?? 0}`,
          '',
        ]),
        ...roundRows,
        ["deleted tenant's key: after the mistake / after repair", `${r.keyRefusedAfterMistake} / ${r.keyAnswersAfterRepair}`, 'must be 401 / 200'],
        ['tasks accepted (202)', r.accepted, ''],
        ['accepted but missing', r.missing, 'must be 0'],
        ['accepted, not converged when the drill stopped', r.unconverged, 'must be 0'],
        ['states at the end', JSON.stringify(r.byStatus), ''],
        ['tasks with a duplicate provider job', r.tasksWithDuplicateJobs, 'must be 0'],
        ['ledger imbalance (tasks)', r.ledgerImbalance, 'must be 0'],
        ['tenants whose account ≠ their ledger', r.tenantsOutOfBalance, 'must be 0'],
        ['open reservations on terminal tasks', r.openReservationsOnTerminalTasks, 'must be 0'],
      ],
      ok,
      () => {
        console.log('\nledger totals per tenant, round 1 (restored / damaged)');
        for (const t of [...new Set([...Object.keys(d.ledger.restored), ...Object.keys(d.ledger.live)])]) {
          console.log(`  ${t}  ${JSON.stringify(d.ledger.restored[t] ?? {})}  /  ${JSON.stringify(d.ledger.live[t] ?? {})}`);
        }
      },
    );
  });

program
  .command('temporal-outage')
  .description('the Temporal server stopped under load and restarted with its state: creates still accepted; drain time vs B/(μ−λ)')
  .option('--outage <seconds>', 'how long Temporal stays down', positive, 60)
  .option('--rate <per-second>', 'creates per second (keep it under what the machine drains)', positive, 2)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { outage: number; rate: number; json: boolean }) => {
    const r = await runTemporalOutageDrill({ outageSeconds: o.outage, ratePerSecond: o.rate, log });
    const drain = (name: string, d: typeof r.outbox): Row[] => [
      [`${name}: backlog B at restart`, d.backlog, ''],
      [`${name}: μ (best 10 s) / λ (per s)`, `${d.mu.toFixed(1)} / ${d.lambda.toFixed(1)}`, ''],
      [`${name}: predicted drain B/(μ−λ) (s)`, d.predictedSeconds === null ? 'μ ≤ λ' : d.predictedSeconds.toFixed(1), ''],
      [`${name}: measured drain (s)`, d.measuredSeconds === null ? 'not drained' : d.measuredSeconds.toFixed(1), ''],
    ];
    const creates = r.load['outage'] ?? {};
    const refusedWhileDown = Object.entries(creates)
      .filter(([k]) => k !== '202')
      .reduce((n, [, v]) => n + v, 0);
    const ok = r.serverErrors === 0 && r.missing === 0 && r.unconverged === 0 && r.ledgerImbalance === 0 && refusedWhileDown === 0;
    report(
      r,
      o.json,
      `temporal-outage drill (${r.outageSeconds} s down)`,
      () => [
        ...phases(r.load),
        ['answers 5xx other than 503', r.serverErrors, 'must be 0'],
        ['tasks accepted (202)', r.accepted, ''],
        ['accepted but missing from the facts', r.missing, 'must be 0'],
        ['accepted, not converged when the drill stopped', r.unconverged, 'must be 0'],
        ['states at the end', JSON.stringify(r.byStatus), ''],
        ...drain('outbox (workflow starts)', r.outbox),
        ...drain('tasks', r.tasks),
        ['ledger imbalance', r.ledgerImbalance, 'must be 0'],
      ],
      ok,
    );
  });

program
  .command('webhooks')
  .description(
    'tenant webhooks: N tasks, two workers, the receiver down for a window then answering 500, then 200: every terminal event delivered, verified, lost = 0',
  )
  .option('--tasks <n>', 'tasks to run', int, 200)
  .option('--down <seconds>', 'how long the receiver refuses connections', positive, 15)
  .option('--failing <seconds>', 'how long it then answers 500', positive, 10)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { tasks: number; down: number; failing: number; json: boolean }) => {
    const r = await runWebhooksDrill({ tasks: o.tasks, downSeconds: o.down, failingSeconds: o.failing, log });
    const ok =
      r.lost === 0 &&
      r.unverified === 0 &&
      r.mismatchedDuplicates === 0 &&
      r.logMismatch === 0 &&
      r.delivered === r.terminalEvents &&
      r.terminalEvents === r.tasks;
    report(
      r,
      o.json,
      `webhooks drill (receiver ${r.downSeconds} s down, ${r.failingSeconds} s answering 500)`,
      () => [
        ['tasks', r.tasks, ''],
        ['tasks by status', JSON.stringify(r.byStatus), ''],
        ['terminal events', r.terminalEvents, 'one per task'],
        ['delivered (answered 200)', r.delivered, 'all of them'],
        ['lost', r.lost, 'must be 0'],
        ['requests received', r.requestsReceived, ''],
        ['duplicates (same webhook-id)', r.duplicates, 'retries after 500s'],
        ['duplicates after a 200', r.duplicatesAfterSuccess, 'at-least-once'],
        ['one id, two different events', r.mismatchedDuplicates, 'must be 0'],
        ['unverified requests', r.unverified, 'must be 0'],
        ['attempts logged / without an answer', `${r.attempts} / ${r.attemptsWithoutAnswer}`, 'down = no answer'],
        ['answered 500', r.answered500, ''],
        ['log vs receiver mismatch', r.logMismatch, 'must be 0'],
        ['delay event → first 200, p50 / max (s)', `${r.p50DelaySeconds.toFixed(1)} / ${r.maxDelaySeconds.toFixed(1)}`, ''],
      ],
      ok,
    );
  });

program
  .command('storage-outage')
  .description('the primary S3 stopped under load while provider URLs expire in minutes: rescues go to the fallback bucket, none lost, copied back after')
  .option('--tasks <n>', 'tasks created around the stop', int, 60)
  .option('--outage <seconds>', 'how long the primary S3 stays down', positive, 90)
  .option('--ttl <seconds>', 'provider output URL lifetime (SIMULATOR_OUTPUT_TTL_MS)', positive, 180)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { tasks: number; outage: number; ttl: number; json: boolean }) => {
    const r = await runStorageOutageDrill({ tasks: o.tasks, outageSeconds: o.outage, outputTtlSeconds: o.ttl, log });
    const ok =
      r.outputsLost === 0 &&
      r.unconverged === 0 &&
      r.leftInFallback === 0 &&
      r.copiedBack === r.rescuedToFallback &&
      r.secondReconcileChanged === 0 &&
      r.ledgerImbalance === 0 &&
      r.maxProviderJobsPerTask <= 1;
    report(
      r,
      o.json,
      `storage-outage drill (primary S3 ${r.outageSeconds} s down, output URLs live ${r.outputTtlSeconds} s)`,
      () => [
        ['tasks', r.tasks, ''],
        ['states at the end', JSON.stringify(r.byStatus), ''],
        ['not converged when the drill stopped', r.unconverged, 'must be 0'],
        ['outputs rescued to the fallback bucket', r.rescuedToFallback, ''],
        ['outputs rescued to the primary', r.rescuedToPrimary, ''],
        ['outputs lost (OUTPUT_LOST)', r.outputsLost, 'must be 0 while the fallback is up'],
        [
          'copied back after recovery (videos / objects with thumbnails)',
          `${r.copiedBack} / ${r.copiedBackObjects}`,
          'videos must equal those rescued to the fallback',
        ],
        ['left in the fallback', r.leftInFallback, 'must be 0'],
        ['second reconcile run changed', r.secondReconcileChanged, 'must be 0'],
        ['provider jobs per task (max)', r.maxProviderJobsPerTask, 'must be 1'],
        ['ledger imbalance', r.ledgerImbalance, 'must be 0'],
        [
          'all tasks terminal after the stop (s)',
          r.convergeSeconds.toFixed(1),
          r.convergedWhileDown ? 'while the primary was still down' : 'after the primary returned',
        ],
        ['copy back took (s)', r.copyBackSeconds.toFixed(1), ''],
      ],
      ok,
    );
  });

program
  .command('images')
  .description('build every Dockerfile target with podman on a locally made Node base, run them under the production profile, stop them with SIGTERM')
  .option('--rebase', 'make the local Debian and Node base images again', false)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { rebase: boolean; json: boolean }) => {
    const r = await runImagesDrill({ log, rebaseImages: o.rebase });
    report(
      r,
      o.json,
      'images (docs/decisions/0065-build-and-images.md)',
      () => [
        ['Node base', r.baseCached ? 'cached' : `${r.baseSeconds} s`, r.nodeBase],
        ...r.builds.map((b): Row => [`build --target ${b.target}`, `${b.seconds} s`, `${b.sizeMb} MB`]),
        ['api on an unmigrated database: exit', r.refusedUnmigrated.exitCode, r.refusedUnmigrated.named ? 'names the missing migrations' : 'no schema message'],
        ['migrate image', `${r.migrateSeconds} s`, ''],
        ['ops image: mode get', r.opsMode, ''],
        ...r.services.flatMap((s): Row[] => [
          [`${s.name}: ready after podman run`, `${s.readySeconds} s`, `HEALTHCHECK ${s.healthcheck ? 'passes' : 'fails'}`],
          [`${s.name}: SIGTERM to exit`, `${s.stopSeconds} s`, `exit ${s.exitCode}${s.drained ? ', stopped cleanly' : ''}`],
        ]),
      ],
      r.ok,
    );
  });

program
  .command('production')
  .description(
    'a production rehearsal: Temporal built from its Go module on PostgreSQL, the build (dist/), migration job, 2 APIs, 3 workers, a rolling deploy through Worker Versioning and a SIGKILL under load',
  )
  .option('--tasks <n>', 'tasks created', positive, 500)
  .option('--rate <n>', 'creates per second', positive, 10)
  .option('--temporal <kind>', 'server (built from go.temporal.io/server, on PostgreSQL) or dev (the CLI dev server)', 'server')
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { tasks: number; rate: number; temporal: string; json: boolean }) => {
    if (o.temporal !== 'server' && o.temporal !== 'dev') throw new InvalidArgumentError('--temporal server or dev');
    const r = await runProductionDrill({ tasks: o.tasks, ratePerSecond: o.rate, temporal: o.temporal }, log);
    const ok = r.lost === 0 && r.secondJobs === 0 && r.ledger.tenantsOutOfBalance === 0 && r.ledger.openReservationsOnTerminalTasks === 0;
    report(
      r,
      o.json,
      `production rehearsal on ${r.temporal === 'server' ? 'the Temporal server (PostgreSQL)' : 'the dev server'} (docs/deploy.md)`,
      () => [
        ['tasks accepted (refused)', r.accepted, `${r.refused} refused`],
        ['lost (accepted, never ended or parked)', r.lost, 'must be 0'],
        ['second provider jobs for one attempt', r.secondJobs, 'must be 0'],
        ['tenants out of balance / open reservations', `${r.ledger.tenantsOutOfBalance} / ${r.ledger.openReservationsOnTerminalTasks}`, 'must be 0 / 0'],
        ['tasks by status', JSON.stringify(r.byStatus), ''],
        ...Object.entries(r.tasksPerBuild).map(([b, n]): Row => [`generation workflows on build ${b}`, n, '']),
        ['old build: workflows running when the drill ended', r.oldBuildRunningAtEnd, ''],
        ['deploy: new workers started to current', `${r.deploySeconds} s`, JSON.stringify(r.deployment)],
        ['create p50 ms before / during / after', `${r.createP50Ms.before} / ${r.createP50Ms.during} / ${r.createP50Ms.after}`, ''],
        ['create p95 ms before / during / after', `${r.createP95Ms.before} / ${r.createP95Ms.during} / ${r.createP95Ms.after}`, ''],
        ['end-to-end p50 ms before / during / after', `${r.endToEndP50Ms.before} / ${r.endToEndP50Ms.during} / ${r.endToEndP50Ms.after}`, ''],
        ['tasks/s end to end', r.tasksPerSecond, `load ${r.load.join(' ')}`],
      ],
      ok,
    );
  });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  console.error(`drill: ${(err as Error).message}`);
  process.exitCode = 1;
}
