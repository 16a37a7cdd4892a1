// Benchmarks: `npm run bench -- <name> [options]` (see docs/performance.md). Each starts its
// own private stack (Temporal dev server, S3, a fresh database, simulator, API and worker
// processes as needed), warms up, measures for a fixed time or count, prints progress lines,
// then one table with the baseline measured in the same run and the ratio (`--json`: one JSON
// line on stdout instead, everything else on stderr). Load goes to loopback only.
import { Command, InvalidArgumentError } from 'commander';
import { runAdmission } from './admission';
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
  .description('sustained POST /v1/tasks at fixed concurrency; baseline: pgbench running the create transaction')
  .option('--concurrency <list>', 'client counts, comma-separated', intList(256), [16, 64])
  .option('--duration <s>', 'measured seconds per level', positiveInt(600), 15)
  .option('--warmup <s>', 'warm-up seconds before each measurement', positiveInt(120), 3)
  .option('--tenants <n>', 'tenants the load is spread over', positiveInt(100), 4)
  .option('--no-outbox-only', 'skip the run with Temporal unreachable')
  .option('--no-full', 'skip pgbench with every round trip of a create')
  .option('--json', 'print the figures as one JSON line', false)
  .action(async (o: { concurrency: number[]; duration: number; warmup: number; tenants: number; outboxOnly: boolean; full: boolean; json: boolean }) => {
    await runAdmission(
      { concurrency: o.concurrency, durationS: o.duration, warmupS: o.warmup, tenants: o.tenants, outboxOnly: o.outboxOnly, full: o.full },
      createReporter(o.json),
    );
  });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  console.error(`bench: ${(err as Error).stack ?? String(err)}`);
  process.exitCode = 1;
}
// Children (Temporal, S3, API and worker processes) are stopped by each benchmark; anything
// left is killed by scripts/stack.ts's exit hook. Exit even if a client library holds a handle.
process.exit();
