// `npm run bench -- fairness`: the slot queue under one tenant's burst (docs/providers.md "The
// slot queue", docs/performance.md). One provider with a limit of 10 slots; tenant A creates a
// burst at once, tenant B creates 20 tasks a few seconds later, tenant C creates 20 at priority 9
// at the same moment. The same load runs twice in one world: with the fair policy, then with
// FIFO (the baseline: SLOT_QUEUE_POLICY=fifo), each on a fresh worker process and fresh tenants.
// Reported: B's and C's create → submitted p50/p95, A's throughput, slot utilisation while
// anyone waits (sampled from the facts), and claim transactions per submit (counted by
// statement in the worker). The retry loop the queue replaced is not in the code any more; its
// claim count is computed from the measured waits (one claim per 2.5 s, its mean retry delay,
// per waiting task) and marked as computed.
import { inFlightByProvider } from '../db/provider-control';
import { changeProviderControl } from '../ops/providers';
import { sleep } from '../harness';
import { createHttpClient } from './lib/http';
import type { Reporter } from './lib/report';
import { checkGoals } from './lib/budgets';
import { percentile, round, sortNumbers } from './lib/stats';
import { waitForTerminal } from './lib/tasks';
import { startBenchWorld, type BenchTenant, type BenchWorld } from './lib/world';

export interface FairnessOptions {
  /** Tenant A's burst. */
  readonly burst: number;
  /** Tasks of B, and of C (priority 9). */
  readonly small: number;
  /** Seconds after A's burst that B and C create. */
  readonly delayS: number;
  readonly slots: number;
  /** Simulated generation time per job (a slot turnover), ms. */
  readonly generationMs: number;
  /** Run the FIFO baseline too (a second phase on the same load). */
  readonly fifo: boolean;
  /** Exit 1 when a goal is missed. */
  readonly check: boolean;
}

/** Mean delay of the retry loop the queue replaced: 2 s × (1 + U[0, ½)). */
const RETRY_LOOP_MEAN_MS = 2_500;
/** The claim's first statement (activities/provider-guard.ts admit): one per claim transaction, counted by pg_stat_statements. */
const CLAIM_STATEMENT = 'SELECT breaker_force, max_in_flight';

interface PhaseFigures {
  readonly policy: string;
  readonly b: { p50: number; p95: number };
  /** In the queue only (SUBMITTING → SUBMITTED), B and C. */
  readonly bQueue: { p50: number; p95: number };
  readonly cQueue: { p50: number; p95: number };
  readonly c: { p50: number; p95: number };
  readonly a: { p50: number; p95: number; throughputPerS: number };
  /** C tasks submitted after an A task that was created before C and still waiting when C arrived. */
  readonly cBehindA: number;
  readonly utilisation: number;
  readonly taken: number;
  readonly samplesWaiting: number;
  /** NaN where the database does not count statements (no pg_stat_statements). */
  readonly claims: number;
  readonly submits: number;
  readonly claimsPerSubmit: number;
  readonly retryLoopClaimsComputed: number;
  readonly turnoverS: number;
  /** Create → submitted p95 of tasks created alone, before the burst (the unloaded path), seconds. */
  readonly unloadedP95: number;
  /** Submit claims (the worker's vidorch_submit_claim_seconds): upper bucket bounds of p50 and p99, seconds, and the count. */
  readonly claim: { p50: number; p99: number; count: number };
  /** Backends of this database waiting for a lock, sampled every 250 ms: seconds of lock wait in all (≈), and the longest wait seen. */
  readonly lockWaitS: number;
  readonly longestLockWaitS: number;
}

/** A quantile of a Prometheus histogram scraped from `metricsUrl`, as the upper bound of its bucket (Infinity: past the last). */
async function claimQuantiles(metricsUrl: string): Promise<{ p50: number; p99: number; count: number }> {
  const text = await (await fetch(metricsUrl)).text();
  const buckets: { le: number; n: number }[] = [];
  for (const m of text.matchAll(/^vidorch_submit_claim_seconds_bucket\{[^}]*le="([^"]+)"[^}]*\} (\d+)/gm)) {
    buckets.push({ le: m[1] === '+Inf' ? Number.POSITIVE_INFINITY : Number(m[1]), n: Number(m[2]) });
  }
  buckets.sort((a, b) => a.le - b.le);
  const count = buckets.at(-1)?.n ?? 0;
  const q = (p: number) => buckets.find((b) => b.n >= p * count)?.le ?? Number.NaN;
  return { p50: q(0.5), p99: q(0.99), count };
}

async function createTasks(bw: BenchWorld, tenant: BenchTenant, n: number, tag: string, priority: number): Promise<{ id: string; createdAt: number }[]> {
  const client = createHttpClient(bw.world.apiUrl, 16);
  const out: { id: string; createdAt: number }[] = [];
  let next = 0;
  const lane = async () => {
    while (next < n) {
      const i = next++;
      const body = JSON.stringify({ model: 'minimax/video-01', prompt: `${tag} ${i}`, duration_seconds: 6, resolution: '720p', priority });
      const res = await client.request('POST', '/v1/tasks', {
        headers: { authorization: `Bearer ${tenant.apiKey}`, 'content-type': 'application/json', 'idempotency-key': `${tag}-${i}` },
        body,
      });
      if (res.status !== 202) throw new Error(`create ${tag} ${i}: ${res.status} ${res.body.toString()}`);
      out.push({ id: (JSON.parse(res.body.toString()) as { task_id: string }).task_id, createdAt: Date.now() });
    }
  };
  await Promise.all(Array.from({ length: 16 }, lane));
  client.close();
  return out;
}

/** Create → submitted (the attempt's SUBMITTING → SUBMITTED transition), seconds, per task. */
async function submittedAfter(
  bw: BenchWorld,
  ids: readonly string[],
): Promise<Map<string, { waitS: number; queueS: number; queuedAt: number; submittedAt: number; createdAt: number }>> {
  const { rows } = await bw.world.db.pool.query<{ task_id: string; created: Date; queued: Date; submitted: Date }>(
    `SELECT t.task_id, t.created_at AS created,
            min(x.created_at) FILTER (WHERE x.to_status = 'SUBMITTING') AS queued,
            min(x.created_at) FILTER (WHERE x.from_status = 'SUBMITTING' AND x.to_status = 'SUBMITTED') AS submitted
     FROM generation_task t JOIN task_transition x ON x.task_id = t.task_id
     WHERE t.task_id = ANY($1::uuid[]) GROUP BY t.task_id, t.created_at
     HAVING min(x.created_at) FILTER (WHERE x.from_status = 'SUBMITTING' AND x.to_status = 'SUBMITTED') IS NOT NULL`,
    [ids],
  );
  return new Map(
    rows.map((r) => [
      r.task_id,
      {
        waitS: (r.submitted.getTime() - r.created.getTime()) / 1000,
        // In the slot queue: from the attempt's PREPARED (task SUBMITTING) to the provider's acceptance.
        queueS: (r.submitted.getTime() - r.queued.getTime()) / 1000,
        queuedAt: r.queued.getTime(),
        submittedAt: r.submitted.getTime(),
        createdAt: r.created.getTime(),
      },
    ]),
  );
}

const pcts = (values: number[]) => {
  const s = sortNumbers(values);
  return { p50: round(percentile(s, 50), 2), p95: round(percentile(s, 95), 2) };
};

async function phase(bw: BenchWorld, o: FairnessOptions, policy: 'fair' | 'fifo', rep: Reporter): Promise<PhaseFigures> {
  const worker = await bw.startWorker(`worker-${policy}`, { SLOT_QUEUE_POLICY: policy, BULKHEAD_RAMP_MS: '0', SLOT_QUEUE_AGING_MS: '60000' });
  await sleep(3_000);
  const [a, b, c, d] = await bw.createTenants(4);
  // The unloaded path: a few tasks created alone, nothing queued, after a warm-up (the worker's first tasks pay its start).
  const warm = await createTasks(bw, d!, 3, `W-${policy}`, 0);
  await waitForTerminal(
    bw,
    warm.map((t) => t.id),
    { timeoutS: 600, tag: `fairness ${policy} warm-up`, rep },
  );
  const alone = await createTasks(bw, d!, 5, `D-${policy}`, 0);
  await waitForTerminal(
    bw,
    alone.map((t) => t.id),
    { timeoutS: 600, tag: `fairness ${policy} unloaded`, rep },
  );
  const unloaded = [
    ...(
      await submittedAfter(
        bw,
        alone.map((t) => t.id),
      )
    ).values(),
  ].map((x) => x.waitS);
  const before = await bw.pgCounts();
  // Sample in-flight and waiting from the facts while the load runs.
  let sampling = true;
  const samples: { inFlight: number; granted: number; waiting: number; lockWaiters: number; longestLockS: number; dtS: number }[] = [];
  let sampledAt = performance.now();
  const sampler = (async () => {
    while (sampling) {
      const inFlight = (await inFlightByProvider(bw.world.db.db))['replicate'] ?? 0;
      const { rows } = await bw.world.db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM slot_wait WHERE provider = 'replicate' AND granted_at IS NULL`,
      );
      const { rows: g } = await bw.world.db.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM slot_wait WHERE provider = 'replicate' AND granted_at IS NOT NULL`,
      );
      const { rows: l } = await bw.world.db.pool.query<{ n: number; longest: number }>(
        `SELECT count(*)::int AS n, coalesce(max(extract(epoch FROM clock_timestamp() - state_change)), 0)::float8 AS longest
         FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      );
      const dtS = (performance.now() - sampledAt) / 1000;
      sampledAt = performance.now();
      samples.push({ inFlight, granted: g[0]?.n ?? 0, waiting: rows[0]?.n ?? 0, lockWaiters: l[0]?.n ?? 0, longestLockS: l[0]?.longest ?? 0, dtS });
      if (samples.length % 20 === 0) rep.log(`fairness[${policy}]: in flight ${inFlight}, granted not yet used ${g[0]?.n ?? 0}, waiting ${rows[0]?.n ?? 0}`);
      await sleep(250);
    }
  })().catch((err: unknown) => rep.log(`fairness[${policy}]: sampler stopped: ${(err as Error).message}`));
  let aTasks: { id: string; createdAt: number }[] = [];
  let bTasks: { id: string; createdAt: number }[] = [];
  let cTasks: { id: string; createdAt: number }[] = [];
  let all: string[] = [];
  try {
    const t0 = performance.now();
    rep.log(`fairness[${policy}]: tenant A creates ${o.burst} tasks`);
    aTasks = await createTasks(bw, a!, o.burst, `A-${policy}`, 0);
    await sleep(o.delayS * 1000);
    rep.log(`fairness[${policy}]: tenants B (${o.small}) and C (${o.small}, priority 9) create`);
    [bTasks, cTasks] = await Promise.all([createTasks(bw, b!, o.small, `B-${policy}`, 0), createTasks(bw, c!, o.small, `C-${policy}`, 9)]);
    all = [...aTasks, ...bTasks, ...cTasks].map((t) => t.id);
    await waitForTerminal(bw, all, { timeoutS: 1_800, tag: `fairness ${policy}`, rep, t0 });
  } finally {
    sampling = false;
    await sampler;
  }
  const after = await bw.pgCounts();
  const claim = await claimQuantiles(worker.metricsUrl).catch(() => ({ p50: Number.NaN, p99: Number.NaN, count: 0 }));
  await worker.proc.stop('SIGTERM', 10_000);

  const times = await submittedAfter(bw, all);
  const waits = (ts: { id: string }[]) => ts.map((t) => times.get(t.id)?.waitS).filter((x): x is number => x !== undefined);
  const aSubmitted = aTasks.map((t) => times.get(t.id)).filter((x) => x !== undefined);
  const aSpanS = (Math.max(...aSubmitted.map((x) => x.submittedAt)) - Math.min(...aSubmitted.map((x) => x.submittedAt))) / 1000;
  // A tasks already in the queue when C's first task joined it, that still went to the provider
  // before C's last one did.
  const cQueued = Math.min(...cTasks.map((t) => times.get(t.id)?.queuedAt ?? Infinity));
  const lastC = Math.max(...cTasks.map((t) => times.get(t.id)?.submittedAt ?? 0));
  const cBehindA = aTasks.filter((t) => {
    const x = times.get(t.id);
    return x !== undefined && x.queuedAt < cQueued && x.submittedAt > cQueued && x.submittedAt < lastC;
  }).length;
  const queueWaits = (ts: { id: string }[]) => ts.map((t) => times.get(t.id)?.queueS).filter((x): x is number => x !== undefined);
  const waitingSamples = samples.filter((s) => s.waiting > 0);
  const share = (f: (s: (typeof samples)[number]) => number) =>
    waitingSamples.length ? waitingSamples.reduce((n, s) => n + Math.min(1, f(s) / o.slots), 0) / waitingSamples.length : 1;
  // Jobs at the provider, and slots taken (jobs plus grants on their way to the claim).
  const utilisation = share((s) => s.inFlight);
  const taken = share((s) => s.inFlight + s.granted);
  const claims = Number.isNaN(after.total)
    ? Number.NaN
    : Object.entries(after.statements)
        .filter(([k]) => k.includes(CLAIM_STATEMENT))
        .reduce((n, [k, v]) => n + v - (before.statements[k] ?? 0), 0);
  const submits = times.size;
  const allWaits = [...times.values()].map((x) => x.waitS);
  const retryLoop = allWaits.reduce((n, w) => n + 1 + Math.floor((w * 1000) / RETRY_LOOP_MEAN_MS), 0);
  return {
    policy,
    b: pcts(waits(bTasks)),
    bQueue: pcts(queueWaits(bTasks)),
    cQueue: pcts(queueWaits(cTasks)),
    c: pcts(waits(cTasks)),
    a: { ...pcts(waits(aTasks)), throughputPerS: round(aSubmitted.length / Math.max(1, aSpanS), 2) },
    cBehindA,
    utilisation: round(utilisation * 100, 1),
    taken: round(taken * 100, 1),
    samplesWaiting: waitingSamples.length,
    claims,
    submits,
    claimsPerSubmit: round(claims / Math.max(1, submits), 2),
    retryLoopClaimsComputed: round(retryLoop / Math.max(1, submits), 1),
    turnoverS: round(o.generationMs / 1000, 1),
    unloadedP95: pcts(unloaded).p95,
    claim,
    lockWaitS: round(
      samples.reduce((n, x) => n + x.lockWaiters * x.dtS, 0),
      1,
    ),
    longestLockWaitS: round(Math.max(0, ...samples.map((x) => x.longestLockS)), 2),
  };
}

export async function runFairness(o: FairnessOptions, rep: Reporter): Promise<void> {
  const bw = await startBenchWorld('fairness', { SIMULATOR_GENERATION_MS: String(o.generationMs), BULKHEAD_RAMP_MS: '0' }, (l) => rep.log(`fairness: ${l}`));
  try {
    await changeProviderControl(bw.world.db.db, {
      provider: 'replicate',
      change: { kind: 'limit', maxInFlight: o.slots },
      actor: 'bench',
      reason: 'fairness bench',
    });
    const fair = await phase(bw, o, 'fair', rep);
    const fifo = o.fifo ? await phase(bw, o, 'fifo', rep) : null;
    const row = (f: PhaseFigures) => [
      f.policy,
      f.unloadedP95,
      `${f.b.p50} / ${f.b.p95}`,
      `${f.c.p50} / ${f.c.p95}`,
      `${f.bQueue.p50} / ${f.bQueue.p95}`,
      `${f.cQueue.p50} / ${f.cQueue.p95}`,
      `${f.a.p50} / ${f.a.p95}`,
      f.a.throughputPerS,
      f.cBehindA,
      `${f.utilisation} % / ${f.taken} % (${f.samplesWaiting} samples)`,
      `≤ ${f.claim.p50} / ≤ ${f.claim.p99} (${f.claim.count})`,
      `${f.lockWaitS} s (longest ${f.longestLockWaitS} s)`,
      f.claimsPerSubmit,
      f.retryLoopClaimsComputed,
    ];
    rep.table(
      `fairness: ${o.slots} slots, A ${o.burst} at once, B ${o.small} and C ${o.small} (priority 9) ${o.delayS} s later; one job ≈ ${o.generationMs} ms at the provider (the slot turnover)`,
      [
        'policy',
        'unloaded create→submitted p95 s',
        'B create→submitted p50/p95 s',
        'C p50/p95 s',
        'B in queue p50/p95 s',
        'C in queue p50/p95 s',
        'A p50/p95 s',
        'A submits/s',
        'C behind earlier A',
        'jobs / slots taken while anyone waits',
        'claim p50/p99 s (bucket bound, claims)',
        'lock wait (all backends)',
        'claims/submit',
        'retry loop claims/submit (computed)',
      ],
      fifo ? [row(fair), row(fifo)] : [row(fair)],
    );
    // A slot turnover is one job's run plus our bookkeeping around it (callback, apply, grant).
    const turnovers = (s: number) => s / Math.max(0.1, fair.turnoverS);
    const overUnloaded = turnovers(Math.max(0, fair.b.p95 - fair.unloadedP95));
    const goals = [
      {
        name: "B's p95 create→submitted within 5 slot turnovers of the unloaded path (fair)",
        target: '≤ 5 turnovers over the unloaded p95',
        measured: `${round(overUnloaded, 1)} turnovers over ${fair.unloadedP95} s (${round(turnovers(fair.bQueue.p95), 1)} in the queue${fifo ? `; FIFO ${round(turnovers(Math.max(0, fifo.b.p95 - fifo.unloadedP95)), 1)}` : ''})`,
        met: overUnloaded <= 5,
      },
      // A tasks granted before C arrived may still be on their way to the provider: at most one per slot.
      {
        name: 'C ahead of everything queued earlier (fair)',
        target: `≤ ${o.slots} earlier A submitted before C's last (grants already made)`,
        measured: `${fair.cBehindA}${fifo ? ` (FIFO: ${fifo.cBehindA})` : ''}`,
        met: fair.cBehindA <= o.slots,
      },
      {
        name: 'slots holding jobs while anyone waits',
        target: '≥ 95 %',
        measured: `${fair.utilisation} %, ${fair.taken} % with grants${fifo ? ` (FIFO ${fifo.utilisation} %)` : ''}`,
        met: fair.utilisation >= 95,
      },
      {
        name: 'claim p99',
        target: '< 1 s',
        measured: `≤ ${fair.claim.p99} s over ${fair.claim.count} claims (p50 ≤ ${fair.claim.p50} s); lock wait ${fair.lockWaitS} s in all`,
        met: fair.claim.p99 < 1,
      },
      {
        name: 'claim transactions vs the retry loop',
        target: '≥ 10× fewer',
        measured: Number.isNaN(fair.claims)
          ? 'not counted (the server does not load pg_stat_statements)'
          : `${fair.claimsPerSubmit} vs ${fair.retryLoopClaimsComputed} (computed)`,
        met: Number.isNaN(fair.claims) || fair.retryLoopClaimsComputed >= 10 * fair.claimsPerSubmit,
      },
    ];
    rep.goals(goals);
    rep.result({ bench: 'fairness', options: o, fair, fifo, goals });
    checkGoals(rep, 'fairness', goals, o.check);
  } finally {
    await bw.close();
  }
}
