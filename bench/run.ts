// Benchmarks: `npm run bench -- <name> [options]` (see docs/performance.md). Each starts its
// own private stack (Temporal dev server, S3, a fresh database, simulator, API and worker
// processes as needed), warms up, measures for a fixed time or count, prints progress lines,
// then one table with the baseline measured in the same run and the ratio (`--json`: one JSON
// line on stdout instead, everything else on stderr). Load goes to loopback only.
import { Command, InvalidArgumentError } from 'commander';
import { runAdmission } from './admission';
import { runCallbackLatency } from './callback-latency';
import { runCallbacks } from './callbacks';
import { runDrain } from './drain';
import { runE2E } from './e2e';
import { runFairness } from './fairness';
import { runTemporalPriority } from './temporal-priority';
import { runMetricsLoad } from './metrics-load';
import { runOpenTasks } from './open-tasks';
import { runResilience } from './resilience';
import { runWebhookFairness } from './webhook-fairness';
import { createReporter } from './lib/report';

const positiveInt = (max: number) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1 || n > max) throw new InvalidArgumentError(`a whole number in 1..${max}`);
  return n;
};
const intList = (max: number) => (v: string) => v.split(',').map((s) => positiveInt(max)(s.trim()));

const program = new Command('bench').description('benchmarks against a private local stack').showHelpAfterError();

program
  .command('admission')
  .description(
    'sustained POST /v1/tasks at fixed concurrency; baselines: pgbench running the create transaction, and the bare admission (same transaction and workflow start from a minimal client)',
  )
  .option('--concurrency <list>', 'client counts, comma-separated', intList(256), [16, 64])
  .option('--duration <s>', 'measured seconds per level', positiveInt(600), 15)
  .option('--warmup <s>', 'warm-up seconds before each measurement', positiveInt(120), 3)
  .option('--tenants <n>', 'tenants the load is spread over', positiveInt(100), 4)
  .option('--no-outbox-only', 'skip the run with Temporal unreachable')
  .option('--no-full', 'skip pgbench with every round trip of a create')
  .option('--cas-last', 'also run pgbench with the account CAS moved last in the transaction (proposed fix)', false)
  .option('--no-api', 'pgbench only (with --cas-last: the A/B of the reordering alone)')
  .option('--no-bare', 'skip the bare admission baseline (minimal pg + Temporal client)')
  .option('--cpu-prof', 'profile the API process and print where its CPU went', false)
  .option('--json', 'print the figures as one JSON line', false)
  .action(
    async (o: {
      concurrency: number[];
      duration: number;
      warmup: number;
      tenants: number;
      bare: boolean;
      outboxOnly: boolean;
      full: boolean;
      casLast: boolean;
      api: boolean;
      cpuProf: boolean;
      json: boolean;
    }) => {
      await runAdmission(
        {
          concurrency: o.concurrency,
          durationS: o.duration,
          warmupS: o.warmup,
          tenants: o.tenants,
          outboxOnly: o.outboxOnly && o.api,
          full: o.full,
          casLast: o.casLast,
          api: o.api,
          cpuProfile: o.cpuProf,
          bare: o.bare,
        },
        createReporter(o.json),
      );
    },
  );

program
  .command('fairness')
  .description(
    "the slot queue under one tenant's burst: fair policy vs FIFO on the same load (B's and C's waits, A's throughput, slot use, claim times, lock waits)",
  )
  .option('--burst <n>', "tenant A's tasks, created at once", positiveInt(20_000), 1000)
  .option('--small <n>', 'tasks of tenant B, and of tenant C (priority 9)', positiveInt(500), 20)
  .option('--delay <s>', 'seconds after the burst that B and C create', positiveInt(120), 3)
  .option('--slots <n>', "the provider's limit", positiveInt(1000), 10)
  .option('--generation-ms <ms>', 'one job at the simulated provider', positiveInt(600_000), 1_000)
  .option('--no-fifo', 'skip the FIFO baseline (the second phase)')
  .option('--check', 'exit 1 when a goal is missed', false)
  .option('--json', 'print the figures as one JSON line', false)
  .action(async (o: { burst: number; small: number; delay: number; slots: number; generationMs: number; fifo: boolean; check: boolean; json: boolean }) => {
    await runFairness(
      { burst: o.burst, small: o.small, delayS: o.delay, slots: o.slots, generationMs: o.generationMs, fifo: o.fifo, check: o.check },
      createReporter(o.json),
    );
  });

program
  .command('webhook-fairness')
  .description("one tenant's tarpit receivers against another tenant's webhooks: B's delivery time with A idle and with A attacking, side by side")
  .option('--hung <n>', "tenant A's endpoints at receivers that never answer (the relay gets this × WEBHOOK_ENDPOINT_CONCURRENCY slots)", positiveInt(100), 4)
  .option('--events <n>', "tenant A's events, due before B's", positiveInt(100_000), 40)
  .option('--samples <n>', "tenant B's events per phase", positiveInt(10_000), 100)
  .option('--every <ms>', "milliseconds between B's events", positiveInt(60_000), 100)
  .option('--tenant-cap <n>', "WEBHOOK_TENANT_CONCURRENCY (default: --hung × 2, half the relay's slots at WEBHOOK_ENDPOINT_CONCURRENCY 4)", positiveInt(10_000))
  .option('--json', 'print the figures as one JSON line', false)
  .action(async (o: { hung: number; events: number; samples: number; every: number; tenantCap?: number; json: boolean }) => {
    await runWebhookFairness(
      { hung: o.hung, events: o.events, samples: o.samples, everyMs: o.every, tenantCap: o.tenantCap ?? Math.max(1, o.hung * 2) },
      createReporter(o.json),
    );
  });

program
  .command('temporal-priority')
  .description('whether the Temporal server honours task-queue priority keys: a backlog of low then high probes, drained by one worker')
  .option('--low <n>', 'low-priority probes queued first', positiveInt(5000), 200)
  .option('--high <n>', 'high-priority probes queued after them', positiveInt(5000), 20)
  .option('--dynamic-config <key=value...>', 'dev server dynamic config, e.g. matching.useNewMatcher=true', [])
  .option('--json', 'print the figures as one JSON line', false)
  .action(async (o: { low: number; high: number; dynamicConfig: string[]; json: boolean }) => {
    const dynamicConfig = Object.fromEntries(o.dynamicConfig.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
    await runTemporalPriority({ low: o.low, high: o.high, dynamicConfig }, createReporter(o.json));
  });

program
  .command('callbacks')
  .description(
    'signed Replicate callbacks through the real endpoint, 10 % repeats; baselines: pgbench inbox insert, and the bare ingest (signature check, inbox insert, signal from a minimal client)',
  )
  .option('--concurrency <list>', 'client counts, comma-separated', intList(256), [16, 64])
  .option('--duration <s>', 'measured seconds per level', positiveInt(600), 15)
  .option('--warmup <s>', 'warm-up seconds before each measurement', positiveInt(120), 3)
  .option('--tasks <n>', 'tasks (one attempt each) the callbacks are spread over', positiveInt(5000), 200)
  .option('--duplicates <pct>', 'percent of callbacks repeating an earlier event', (v) => Number(v), 10)
  .option('--no-bare', 'skip the bare ingest baseline (minimal pg + Temporal client)')
  .option('--cpu-prof', 'profile the API process and print where its CPU went', false)
  .option('--json', 'print the figures as one JSON line', false)
  .action(
    async (o: {
      concurrency: number[];
      duration: number;
      warmup: number;
      tasks: number;
      duplicates: number;
      bare: boolean;
      cpuProf: boolean;
      json: boolean;
    }) => {
      await runCallbacks(
        {
          concurrency: o.concurrency,
          durationS: o.duration,
          warmupS: o.warmup,
          tasks: o.tasks,
          duplicateShare: Math.min(50, Math.max(0, o.duplicates)) / 100,
          cpuProfile: o.cpuProf,
          bare: o.bare,
        },
        createReporter(o.json),
      );
    },
  );

program
  .command('e2e')
  .description('N tasks through API, worker and simulator until SUCCEEDED; baseline: a bare workflow of the same shape')
  .option('--tasks <n>', 'tasks created at once', positiveInt(10_000), 200)
  .option('--concurrency <n>', 'concurrent creates', positiveInt(256), 32)
  .option('--generation-ms <ms>', 'simulated generation time', (v) => Math.max(0, Number(v)), 20)
  .option('--workers <n>', 'worker processes', positiveInt(8), 1)
  .option('--max-activities <n>', 'WORKER_MAX_CONCURRENT_ACTIVITIES', positiveInt(1000), 50)
  .option('--timeout <s>', 'give up waiting after this long', positiveInt(3600), 600)
  .option('--history-sample <n>', 'histories fetched for the breakdown', positiveInt(10_000), 100)
  .option('--no-baseline', 'skip the bare-workflow baseline (and the work floor)')
  .option('--no-floor', "skip the work floor (the bare shape doing the task's external work)")
  .option('--quiet-seconds <s>', "quiet window that measures the timer loops' work in the database, taken out of the counts", positiveInt(600), 15)
  .option('--check', 'exit 1 when a count per task is over its budget in bench/budgets.json (or a task did not succeed)', false)
  .option('--write-budgets', "rewrite bench/budgets.json's e2e entry from this run's counts", false)
  .option('--cpu-prof', 'profile the worker process and print where its CPU went', false)
  .option('--json', 'print the figures as one JSON line', false)
  .action(
    async (o: {
      tasks: number;
      concurrency: number;
      generationMs: number;
      workers: number;
      maxActivities: number;
      timeout: number;
      historySample: number;
      baseline: boolean;
      floor: boolean;
      quietSeconds: number;
      check: boolean;
      writeBudgets: boolean;
      cpuProf: boolean;
      json: boolean;
    }) => {
      await runE2E(
        {
          tasks: o.tasks,
          concurrency: o.concurrency,
          generationMs: o.generationMs,
          workers: o.workers,
          maxConcurrentActivities: o.maxActivities,
          timeoutS: o.timeout,
          historySample: o.historySample,
          skipBaseline: !o.baseline,
          skipFloor: !o.floor,
          quietSeconds: o.quietSeconds,
          check: o.check,
          writeBudgets: o.writeBudgets,
          cpuProfile: o.cpuProf,
        },
        createReporter(o.json),
      );
    },
  );

program
  .command('resilience')
  .description(
    "retry storm: 70 % then 95 % of submits refused (429), N tasks at once, then healed; retry amplification vs the budget's bound, breaker, bulkhead",
  )
  .option('--tasks <n>', 'tasks created at once in each failure phase', positiveInt(5000), 200)
  .option('--failure <list>', 'percent of submits refused, one phase each, comma-separated', intList(100), [70, 95])
  .option('--phase-seconds <s>', 'seconds per failure phase', positiveInt(1800), 60)
  .option('--heal-seconds <s>', 'seconds measured after the heal', positiveInt(3600), 90)
  .option('--workers <n>', 'worker processes (each has its own breaker and budget)', positiveInt(8), 2)
  .option('--max-submit-attempts <n>', 'MAX_SUBMIT_ATTEMPTS (product default 3; 10 so the budget, not the cap, limits retries)', positiveInt(10), 10)
  .option('--generation-ms <ms>', 'simulated generation time', (v) => Math.max(0, Number(v)), 2000)
  .option('--max-in-flight <n>', "operator bulkhead for replicate (provider_control.max_in_flight); default: the adapter's limit", positiveInt(100_000))
  .option('--breaker-closed', 'force the breaker closed (operator switch) so the retry budget alone limits retries', false)
  .option('--create-concurrency <n>', 'concurrent creates', positiveInt(256), 16)
  .option('--json', 'print the figures as one JSON line', false)
  .action(
    async (o: {
      tasks: number;
      failure: number[];
      phaseSeconds: number;
      healSeconds: number;
      workers: number;
      maxSubmitAttempts: number;
      generationMs: number;
      maxInFlight?: number;
      breakerClosed: boolean;
      createConcurrency: number;
      json: boolean;
    }) => {
      await runResilience(
        {
          tasks: o.tasks,
          failureRates: o.failure,
          phaseSeconds: o.phaseSeconds,
          healSeconds: o.healSeconds,
          workers: o.workers,
          maxSubmitAttempts: o.maxSubmitAttempts,
          generationMs: o.generationMs,
          maxInFlight: o.maxInFlight ?? null,
          breakerClosed: o.breakerClosed,
          createConcurrency: o.createConcurrency,
        },
        createReporter(o.json),
      );
    },
  );

program
  .command('callback-latency')
  .description('success callback received → task SUCCEEDED (tiny output); baseline: a bare workflow, signal → completed')
  .option('--tasks <n>', 'measured tasks', positiveInt(10_000), 100)
  .option('--rate <per-second>', 'creates per second (open loop)', (v) => Math.max(0.1, Number(v)), 2)
  .option('--warmup <n>', 'warm-up tasks, not measured', positiveInt(100), 3)
  .option('--generation-ms <ms>', 'simulated generation time', (v) => Math.max(0, Number(v)), 1000)
  .option('--timeout <s>', 'give up waiting after this long', positiveInt(3600), 600)
  .option('--history-sample <n>', 'histories fetched for the breakdown', positiveInt(10_000), 50)
  .option('--no-baseline', 'skip the bare-workflow baseline')
  .option('--cpu-prof', 'profile the worker process and print where its CPU went', false)
  .option('--check', 'exit 1 when a goal is missed (p50 ≤ 300 ms and ≤ 3 × bare, p99 ≤ 1 s, every task ended by its callback)', false)
  .option('--json', 'print the figures as one JSON line', false)
  .action(
    async (o: {
      tasks: number;
      rate: number;
      warmup: number;
      generationMs: number;
      timeout: number;
      historySample: number;
      baseline: boolean;
      cpuProf: boolean;
      check: boolean;
      json: boolean;
    }) => {
      await runCallbackLatency(
        {
          tasks: o.tasks,
          ratePerSecond: o.rate,
          warmupTasks: o.warmup,
          generationMs: o.generationMs,
          timeoutS: o.timeout,
          historySample: o.historySample,
          skipBaseline: !o.baseline,
          cpuProfile: o.cpuProf,
          check: o.check,
        },
        createReporter(o.json),
      );
    },
  );

program
  .command('open-tasks')
  .description('N tasks waiting on the provider at once: worker RSS and CPU idle, history per task, polls/s vs the quota; baseline: bare wait loops')
  .option('--tasks <n>', 'tasks waiting on the provider at once', positiveInt(100_000), 10_000)
  .option('--create-concurrency <n>', 'concurrent creates', positiveInt(256), 32)
  .option('--poll-ms <ms>', 'poll interval every task settles at (POLL_INITIAL_MS = POLL_MAX_MS)', positiveInt(3_600_000), 60_000)
  .option('--generation-ms <ms>', 'simulated generation time (longer than the run)', positiveInt(86_400_000), 6 * 3_600_000)
  .option('--idle <s>', 'measured idle seconds', positiveInt(3600), 60)
  .option('--history-sample <n>', 'workflows described for history length', positiveInt(10_000), 50)
  .option('--timeout <s>', 'give up bringing tasks to the provider after this long', positiveInt(7200), 3600)
  .option('--cache <n>', 'WORKER_MAX_CACHED_WORKFLOWS for both workers (default: config)')
  .option('--max-activities <n>', 'WORKER_MAX_CONCURRENT_ACTIVITIES (default: config)')
  .option('--no-baseline', 'skip the bare-workflow baseline')
  .option('--check', 'exit 1 when RSS or (worker + Temporal) CPU exceeds the bare wait loops, or polls exceed the quota', false)
  .option('--cpu-prof', 'profile both workers (every thread) and print where their CPU went in the idle windows (costs CPU: not for the ratios)', false)
  .option('--json', 'print the figures as one JSON line', false)
  .action(
    async (o: {
      tasks: number;
      createConcurrency: number;
      pollMs: number;
      generationMs: number;
      idle: number;
      historySample: number;
      timeout: number;
      cache?: string;
      maxActivities?: string;
      baseline: boolean;
      check: boolean;
      cpuProf: boolean;
      json: boolean;
    }) => {
      const workerEnv: Record<string, string> = {};
      if (o.cache !== undefined) workerEnv['WORKER_MAX_CACHED_WORKFLOWS'] = String(Number(o.cache));
      if (o.maxActivities !== undefined) workerEnv['WORKER_MAX_CONCURRENT_ACTIVITIES'] = String(Number(o.maxActivities));
      await runOpenTasks(
        {
          tasks: o.tasks,
          createConcurrency: o.createConcurrency,
          pollMs: o.pollMs,
          generationMs: o.generationMs,
          idleSeconds: o.idle,
          historySample: o.historySample,
          timeoutS: o.timeout,
          workerEnv,
          skipBaseline: !o.baseline,
          check: o.check,
          cpuProfile: o.cpuProf,
        },
        createReporter(o.json),
      );
    },
  );

program
  .command('drain')
  .description('the capacity model: Temporal stopped under load, drain time beside B/(μ−λ) with the measured μ and λ')
  .option('--outage <seconds>', 'how long Temporal stays down', positiveInt(600), 60)
  .option('--rate <per-second>', 'creates per second (λ; keep it under what the machine drains)', positiveInt(100), 2)
  .option('--json', 'print the figures as one JSON line', false)
  .action(async (o: { outage: number; rate: number; json: boolean }) => {
    await runDrain({ outageSeconds: o.outage, ratePerSecond: o.rate }, createReporter(o.json));
  });

program
  .command('metrics-load')
  .description('metric scrapes on the operator listener while creating tasks, over a ledger of closed tasks: no 503, the API pool never waits')
  .option('--closed-tasks <n>', 'closed tasks seeded (3 ledger rows each)', positiveInt(5_000_000), 300_000)
  .option('--scrapers <n>', 'concurrent scrape loops', positiveInt(1000), 40)
  .option('--creates <n>', 'tasks created, one after another, while they scrape', positiveInt(100_000), 100)
  .option('--json', 'print the figures as one JSON line', false)
  .action(async (o: { closedTasks: number; scrapers: number; creates: number; json: boolean }) => {
    await runMetricsLoad({ closedTasks: o.closedTasks, scrapers: o.scrapers, creates: o.creates }, createReporter(o.json));
  });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  console.error(`bench: ${(err as Error).stack ?? String(err)}`);
  process.exitCode = 1;
}
// Children (Temporal, S3, API and worker processes) are stopped by each benchmark; anything
// left is killed by harness/processes.ts's exit hook. Exit even if a client library holds a handle.
process.exit();
