// `npm run bench -- drain`: the capacity model (docs/design.md §10) checked on a real
// backlog. It runs the temporal-outage drill (bench/drills/temporal-outage.ts: creates at a fixed
// rate λ, the Temporal server stopped and restarted with its state, the outbox relay and the
// workers draining the backlog) and prints each drain time beside B / (μ − λ), with μ the best
// rate sustained over 10 s of the drain and λ the arrival rate, both measured in the run. The
// model's prediction is the baseline: ratio = measured / predicted (1 = the model held).
import { drainRatio, type DrainFigures } from './drills/capacity-model';
import { runTemporalOutageDrill } from './drills/temporal-outage';
import type { Reporter } from './lib/report';
import { round } from './lib/stats';

export interface DrainOptions {
  readonly outageSeconds: number;
  readonly ratePerSecond: number;
}

export async function runDrain(o: DrainOptions, rep: Reporter): Promise<void> {
  const r = await runTemporalOutageDrill({ outageSeconds: o.outageSeconds, ratePerSecond: o.ratePerSecond, log: (l) => rep.log(`drain: ${l}`) });
  const rows: [string, DrainFigures][] = [
    ['outbox (workflow starts)', r.outbox],
    ['tasks (to a terminal state)', r.tasks],
  ];
  rep.table(
    `drain: Temporal down ${r.outageSeconds} s under ${o.ratePerSecond} creates/s; μ = best 10 s rate of the drain, λ = arrivals during it (ratio = measured / predicted)`,
    ['backlog', 'B', 'μ /s', 'λ /s', 'predicted B/(μ−λ) s', 'measured s', 'ratio'],
    rows.map(([name, d]) => [
      name,
      d.backlog,
      round(d.mu, 2),
      round(d.lambda, 2),
      d.predictedSeconds === null ? 'μ ≤ λ' : round(d.predictedSeconds, 1),
      d.measuredSeconds === null ? 'not drained' : round(d.measuredSeconds, 1),
      drainRatio(d) === null ? null : round(drainRatio(d)!, 2),
    ]),
  );
  const held = (d: DrainFigures) => d.measuredSeconds !== null;
  const goals = [
    { name: 'accepted tasks all in the facts', target: '0 missing', measured: `${r.missing} missing`, met: r.missing === 0 },
    { name: 'accepted tasks converged', target: '0 open', measured: `${r.unconverged} open`, met: r.unconverged === 0 },
    { name: 'outbox drained', target: 'yes', measured: held(r.outbox) ? `${round(r.outbox.measuredSeconds!, 1)} s` : 'no', met: held(r.outbox) },
    { name: 'tasks drained', target: 'yes', measured: held(r.tasks) ? `${round(r.tasks.measuredSeconds!, 1)} s` : 'no', met: held(r.tasks) },
    { name: 'ledger balanced', target: '0', measured: String(r.ledgerImbalance), met: r.ledgerImbalance === 0 },
  ];
  rep.goals(goals);
  rep.result({
    bench: 'drain',
    options: o,
    outbox: { ...r.outbox, ratio: drainRatio(r.outbox) },
    tasks: { ...r.tasks, ratio: drainRatio(r.tasks) },
    load: r.load,
    byStatus: r.byStatus,
    goals,
  });
}
