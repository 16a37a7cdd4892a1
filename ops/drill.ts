// Drills: `npm run drill -- <name> [options]`. Each starts its own stack, injects faults at
// volume, and prints the figures that say whether the guarantees held (non-zero exit if not).
import { Command, InvalidArgumentError } from 'commander';
import { runUnknownOutcomeDrill } from './drills/unknown-outcome';

const int = (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 3) throw new InvalidArgumentError('a whole number ≥ 3');
  return n;
};
const log = (line: string) => console.log(`drill: ${line}`);

const program = new Command('drill').description('fault drills against a private stack').showHelpAfterError();

program
  .command('unknown-outcome')
  .description('accept-then-hang, a worker SIGKILLed mid-submit, lost callbacks: every task converges with ≤ 1 provider job')
  .option('--tasks <n>', 'tasks to run', int, 200)
  .option('--json', 'print the report as one JSON line', false)
  .action(async (o: { tasks: number; json: boolean }) => {
    const report = await runUnknownOutcomeDrill({ tasks: o.tasks, log });
    if (o.json) console.log(JSON.stringify(report));
    else {
      console.log('\nunknown-outcome drill');
      const rows: [string, string | number, string][] = [
        ['tasks accepted', report.accepted, ''],
        ['succeeded', report.succeeded, ''],
        ['failed', report.failed, ''],
        ['in manual review', report.manualReview, ''],
        ['provider jobs per task (max)', report.maxProviderJobsPerTask, 'must be 1'],
        ['provider jobs per task (histogram)', JSON.stringify(report.providerJobsHistogram), ''],
        ['ledger imbalance', report.ledgerImbalance, 'must be 0'],
        ['lost', report.lost, 'must be 0'],
        ['time to converge (s)', report.convergeSeconds.toFixed(1), ''],
        ['submits left unknown by the hang', report.phases['hang_unknown'] ?? 0, ''],
        ['submits in flight when the worker was killed', report.phases['in_flight_at_kill'] ?? 0, ''],
      ];
      for (const [k, v, note] of rows) console.log(`  ${k.padEnd(46)} ${String(v).padStart(10)}  ${note}`);
    }
    const ok = report.maxProviderJobsPerTask <= 1 && report.ledgerImbalance === 0 && report.lost === 0;
    if (!ok) {
      console.error('drill: a guarantee did not hold');
      process.exitCode = 1;
    }
  });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  console.error(`drill: ${(err as Error).message}`);
  process.exitCode = 1;
}
